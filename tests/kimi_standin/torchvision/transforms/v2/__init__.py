"""``torchvision.transforms.v2``: ``functional``."""

from . import functional  # noqa: F401
