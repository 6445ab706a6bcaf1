"""torchvision.transforms.functional in the stand-in: InterpolationMode is real, because
SGLang's processors use its members as default arguments when they are defined."""

from enum import Enum

from torchvision import absent


class InterpolationMode(Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = absent(__name__)
