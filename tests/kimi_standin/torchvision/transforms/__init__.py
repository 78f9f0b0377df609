"""``torchvision.transforms``: ``InterpolationMode`` and ``v2`` (see ../../README.md)."""

from . import v2  # noqa: F401
from .v2.functional import InterpolationMode  # noqa: F401
