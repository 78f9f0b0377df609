"""Shape-true stand-in of torchvision for transformers' Kimi-K2.5 processor (see ../README.md)."""

from . import io, transforms  # noqa: F401

__version__ = "0.28.0"
