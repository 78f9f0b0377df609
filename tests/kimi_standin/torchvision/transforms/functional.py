"""``torchvision.transforms.functional``: ``pil_to_tensor`` only."""

from .v2.functional import pil_to_tensor  # noqa: F401
