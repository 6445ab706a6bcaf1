"""torchvision.io in the stand-in (see torchvision/__init__.py)."""

from torchvision import absent

__getattr__ = absent(__name__)
