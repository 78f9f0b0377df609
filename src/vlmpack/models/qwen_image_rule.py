"""Qwen2-VL's image token rule on the settings read off its image processor, so that counting needs
the processor object only once per model directory (:mod:`vlmpack.models.load_recipe`).

The rule is transformers' ``Qwen2VLImageProcessorPil.get_number_of_image_patches(height, width)``
(transformers 5.x, ``models/qwen2_vl/image_processing_pil_qwen2_vl.py``) with its ``smart_resize``,
restated: the processor's own ``size["shortest_edge"]`` / ``size["longest_edge"]`` (min / max
pixels), ``patch_size`` and ``merge_size``, read off the object transformers built from the
directory (:meth:`QwenImageSettings.of`), never resolved here. ``tests/test_load_recipe.py`` checks
the restated rule against the processor's method on thousands of sizes (and the refusals).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from vlmpack.models import load_recipe

__all__ = ["QwenImageSettings", "recorded_settings", "smart_resize"]

#: transformers' ``smart_resize`` refuses ``max(h, w) / min(h, w)`` above this.
MAX_RATIO = 200


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """``(height, width)`` in pixels after Qwen2-VL's resize: both multiples of ``factor``, the area
    within ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as possible (transformers'
    ``image_processing_pil_qwen2_vl.smart_resize``, the same float operations in the same order; the
    video processor's ``video_processing_qwen2_vl.smart_resize`` is the same function, and
    :mod:`vlmpack.models.qwen_video_rule` resizes video frames with this one).
    Raises ``ValueError`` (transformers' message) when ``max / min`` of the sides exceeds 200."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_RATIO}, "
                         f"got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class QwenImageSettings:
    """What Qwen2-VL's image rule reads of its image processor: ``min_pixels`` / ``max_pixels``
    (``size["shortest_edge"]`` / ``size["longest_edge"]``, pixels), ``patch_size`` (pixels a
    patch side) and ``merge_size`` (patches merged per side into one token)."""

    min_pixels: int
    max_pixels: int
    patch_size: int
    merge_size: int

    @classmethod
    def of(cls, processor) -> QwenImageSettings | None:
        """The settings of a built ``Qwen2VLImageProcessorPil`` (or a subclass), or ``None`` when it
        lacks one of them (the caller then asks the processor itself)."""
        try:
            size = processor.size
            return cls.from_recipe({"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"],
                                    "patch_size": processor.patch_size, "merge_size": processor.merge_size})
        except (AttributeError, KeyError, TypeError):
            return None

    @classmethod
    def from_recipe(cls, value) -> QwenImageSettings | None:
        """The settings of a recorded dict (:meth:`as_recipe`), or ``None`` unless it holds exactly
        the four fields, each a positive ``int``."""
        names = ("min_pixels", "max_pixels", "patch_size", "merge_size")
        if not isinstance(value, dict) or set(value) != set(names):
            return None
        if not all(type(value[n]) is int and value[n] > 0 for n in names):
            return None
        return cls(**{n: value[n] for n in names})

    def as_recipe(self) -> dict:
        """The settings as JSON data (:meth:`from_recipe` reads it back)."""
        return asdict(self)

    def patches(self, height: int, width: int) -> int:
        """Patches of an image of ``height`` x ``width`` pixels (> 0): the processor's
        ``get_number_of_image_patches``; its tokens are this ``// merge_size**2``. Raises
        ``ValueError`` like :func:`smart_resize`."""
        h, w = smart_resize(height, width, self.patch_size * self.merge_size, self.min_pixels, self.max_pixels)
        return (h // self.patch_size) * (w // self.patch_size)


def recorded_settings(family) -> QwenImageSettings | None:
    """The image rule's settings of ``family`` (a Qwen2-VL family with ``model_dir``, ``name`` and an
    ``image_processor`` built on first use): from its recipe (part ``image:<name>``), else read off
    the built processor and recorded (:mod:`vlmpack.models.load_recipe`); ``None`` when the
    processor lacks one of them (the family then asks the processor's own method)."""
    part = f"image:{family.name}"
    settings = QwenImageSettings.from_recipe(load_recipe.read(family.model_dir, part))
    if settings is None:
        settings = QwenImageSettings.of(family.image_processor)
        if settings is not None:
            load_recipe.record(family.model_dir, part, settings.as_recipe())
    return settings
