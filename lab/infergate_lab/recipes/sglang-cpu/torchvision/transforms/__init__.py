"""torchvision.transforms in the stand-in (see torchvision/__init__.py)."""

from torchvision import absent
from torchvision.transforms import functional
from torchvision.transforms.functional import InterpolationMode

__all__ = ["InterpolationMode", "functional"]
__getattr__ = absent(__name__)
