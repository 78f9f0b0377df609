"""The Qwen2-VL / Qwen2.5-VL video counting rule (:class:`QwenVideoRule`): video tokens from the
container header (frames, fps, size; :mod:`vlmpack.media.video`), without decoding pixels.

transformers' ``Qwen2VLVideoProcessor`` keeps frames by ``sample_frames`` (:meth:`QwenVideoRule.video_frames`),
resizes them by its ``smart_resize`` (the same function as the image processor's, restated in
:func:`vlmpack.models.qwen_image_rule.smart_resize`: the video module imports torchvision;
``tests/test_video.py`` runs the video module's source against it) and ``Qwen2VLProcessor``
expands each ``<|video_pad|>`` to ``t * h * w // merge_size**2`` copies
(:meth:`QwenVideoRule.video_tokens`). Settings: the model directory's video processor config over
:attr:`QwenVideoRule.video_defaults` (:func:`vlmpack.models.video_config.video_settings`).
Qwen3-VL (:mod:`vlmpack.models.qwen3_vl`) overrides the frame and resize rules; the pixels are
:mod:`vlmpack.models.qwen_video`'s.
"""

from __future__ import annotations

import math
from pathlib import Path

from vlmpack.errors import MediaRuleError
from vlmpack.models.base import MediaSize
from vlmpack.models.qwen_image_rule import smart_resize
from vlmpack.models.video_config import video_settings, video_size_edges

#: The pixel settings of the Qwen-VL video processors (:func:`vlmpack.models.qwen_video.video_pixel_settings`).
VIDEO_PIXEL_KEYS = ("resample", "do_resize", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std")


class QwenVideoRule:
    """Mixin of :class:`vlmpack.models.qwen2_vl.Qwen2VLFamily`: the video rule. Needs the family's
    ``model_dir`` and ``name``."""

    #: transformers' ``Qwen2VLVideoProcessor`` class defaults (``video_processing_qwen2_vl.py``),
    #: overridden by the model directory's video processor config (:func:`vlmpack.models.video_config.video_settings`).
    video_defaults = {"size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768}, "patch_size": 14,
                      "temporal_patch_size": 2, "merge_size": 2, "min_frames": 4, "max_frames": 768,
                      "do_sample_frames": False, "fps": None, "num_frames": None,
                      "cap_pixels_per_frame": None, "max_video_tokens": 128000}

    @property
    def video_config(self) -> dict:
        """The video processor settings of the model directory (read once, on first use)."""
        cfg = getattr(self, "_video_config", None)
        if cfg is None:
            cfg = self._video_config = video_settings(Path(self.model_dir), self.video_defaults,
                                                      pixels_keys=self.name == "qwen2_vl")
        return cfg

    def video_frames(self, frames: int, fps: float | None) -> int:
        """Frames the processor keeps of a video of ``frames`` frames at ``fps`` (average frames per
        second): transformers' ``Qwen2VLVideoProcessor.sample_frames`` when ``do_sample_frames``
        (``num_frames`` rounded to ``temporal_patch_size``, or ``fps`` frames a second clamped to
        ``[min_frames, max_frames]``, ``total`` and floored to ``temporal_patch_size``; the kept
        count is the length of ``torch.arange(0, total, total / n)``), else all of them."""
        c = self.video_config
        tp, num, rate = int(c["temporal_patch_size"]), c["num_frames"], c["fps"]
        if not c["do_sample_frames"] or (num is None and rate is None):
            return frames
        if num is not None and rate is not None:
            raise MediaRuleError("the video processor config sets both num_frames and fps")
        if num is not None:
            n = round(num / tp) * tp
        else:
            if not fps:
                raise MediaRuleError("video has no frame rate; the processor samples at fps")
            top = math.floor(min(c["max_frames"], frames) / tp) * tp
            n = math.floor(min(max(frames / fps * rate, c["min_frames"]), top, frames) / tp) * tp
        if n > frames or n <= 0:
            raise MediaRuleError(f"the processor cannot sample {n} frames of a {frames}-frame video")
        return math.ceil(frames / (frames / n))  # len(torch.arange(0, frames, frames / n))

    def video_grid(self, media: MediaSize) -> tuple[int, int, int]:
        """``(t, h, w)`` patches of a video (``media.frames``, ``fps``, ``width``, ``height``): the
        kept frames (:meth:`video_frames`) padded to ``temporal_patch_size``, each frame resized by
        the video processor's ``smart_resize`` with ``size`` (``shortest_edge``/``longest_edge``
        pixels), capped per frame when ``cap_pixels_per_frame`` (``Qwen2VLVideoProcessor.resize``)."""
        if not media.frames or media.frames <= 0 or media.width <= 0 or media.height <= 0:
            raise MediaRuleError(f"video has no frames or size ({media.frames} frames, {media.width}x{media.height})")
        c = self.video_config
        n = self.video_frames(int(media.frames), media.fps)
        tp, patch, merge = int(c["temporal_patch_size"]), int(c["patch_size"]), int(c["merge_size"])
        factor = patch * merge
        lo, hi = video_size_edges(c["size"])
        if c["cap_pixels_per_frame"]:
            total_pixels = int(c["max_video_tokens"] * factor * factor * 0.9)
            hi = max(min(hi, total_pixels * tp // n), int(lo * 1.05))
        try:
            h, w = smart_resize(int(media.height), int(media.width), factor, lo, hi)
        except ValueError as e:
            raise MediaRuleError(str(e)) from None
        return -(-n // tp), h // patch, w // patch

    def video_tokens(self, media: MediaSize) -> int:
        """``<|video_pad|>`` tokens of a video: ``t * h * w // merge_size**2`` of :meth:`video_grid`
        (``Qwen2VLProcessor`` expands each video pad to that many). Raises :class:`MediaRuleError`."""
        t, h, w = self.video_grid(media)
        return t * h * w // int(self.video_config["merge_size"]) ** 2
