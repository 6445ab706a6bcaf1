"""A stand-in for torchvision in the lab's SGLang CPU image, where no torchvision can load.

PyPI's torchvision is built against CUDA torch: next to the lab's CPU torch its import fails
("operator torchvision::nms does not exist"). SGLang imports torchvision.transforms at module
level in multimodal configs and processors that its server and model registry import for
text models too. Here every name resolves, so those imports pass; calling or instantiating
any of them raises, naming this stand-in. A text model never does. Version 0.0: transformers
finds torchvision present (by its import spec) and reads its version from `__version__` (no
package metadata); 0.0 passes none of its `is_torchvision_greater_or_equal` checks.
"""

from typing import Any

__version__ = "0.0"


class Absent:
    """Any torchvision function or class: importable, unusable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{type(self).__qualname__}: torchvision is a stand-in in this image (text models only)"
        )


def absent(module: str) -> Any:
    """A module `__getattr__` that answers every name with an unusable class of that name."""

    def attribute(name: str) -> type[Absent]:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (Absent,), {"__qualname__": f"{module}.{name}"})

    return attribute


__getattr__ = absent(__name__)
