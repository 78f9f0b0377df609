"""Frame sampling of transformers' ``BaseVideoProcessor`` video processors, from container header facts.

The families whose video processor keeps whole frames (one resized picture per kept frame, no
temporal patches) count a video from the number of frames it keeps: InternVL
(``InternVLVideoProcessor``, :mod:`vlmpack.models.internvl`) and LLaVA-OneVision
(``LlavaOnevisionVideoProcessor``, :mod:`vlmpack.models.llava_onevision`). Which frames are kept
depends only on the frame count and the average frame rate of the video (what
:mod:`vlmpack.media.video` reads from the header without decoding, and what a full decode gives:
``tests/test_video_families.py``) and on the processor settings read from the model directory:

- :func:`frame_settings`: the settings transformers' ``BaseVideoProcessor.from_pretrained`` loads
  (``processor_config.json["video_processor"]``, else ``video_preprocessor_config.json``, else
  ``preprocessor_config.json``; :func:`vlmpack.models.video_config.video_settings`) over the class
  defaults (``do_sample_frames`` False for both classes: every frame is kept);
- :func:`default_frame_indices`: ``BaseVideoProcessor.sample_frames`` (LLaVA-OneVision does not
  override it): ``num_frames`` and ``fps`` exclusive, then ``video_utils.default_sample_indices_fn``
  (transformers' own function, called here);
- :func:`internvl_frame_indices`: ``InternVLVideoProcessor.sample_frames`` restated (its module
  imports torchvision): ``num_frames`` (or ``int(total / video_fps * fps)``), then
  ``torch.arange(initial_shift, total, total / num_frames).int()`` with ``initial_shift=True``
  meaning ``total / num_frames / 2``.

Both give strictly increasing indices (a step of ``total / n >= 1``), so a video keeps
``len(indices)`` frames whether transformers indexes decoded frames (``video[indices]``) or
decodes a path (``read_video_pyav`` keeps frame ``i`` when ``i in indices``).

Errors: :class:`vlmpack.models.base.MediaRuleError` (a ``media_unsupported`` rejection) wherever
transformers raises (more frames asked than the video has, ``fps`` sampling without a frame rate,
``num_frames`` and ``fps`` both set, 0 frames to sample).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlmpack.errors import MediaRuleError

__all__ = ["PIXEL_DEFAULTS", "default_frame_indices", "frame_settings", "internvl_frame_indices"]

#: The ``BaseVideoProcessor`` sampling settings and their class defaults (``VideosKwargs``:
#: ``num_frames`` / ``fps`` None; ``do_sample_frames`` False in ``InternVLVideoProcessor`` and
#: ``LlavaOnevisionVideoProcessor``; ``initial_shift`` True in ``InternVLVideoProcessor``).
SAMPLING_DEFAULTS = {"do_sample_frames": False, "num_frames": None, "fps": None}


#: transformers' ``OPENAI_CLIP_MEAN`` / ``OPENAI_CLIP_STD``.
_CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
#: The pixel settings' class attributes of ``InternVLVideoProcessor`` and
#: ``LlavaOnevisionVideoProcessor`` (identical: bicubic, 384 x 384, CLIP mean / std, rescale
#: 1/255 from ``VideoProcessorMixin``, no center crop).
PIXEL_DEFAULTS = {"do_resize": True, "size": {"height": 384, "width": 384}, "resample": 3, "do_center_crop": None,
                  "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                  "image_mean": _CLIP[0], "image_std": _CLIP[1]}


def frame_settings(model_dir: str | Path, defaults: dict) -> dict:
    """The video processor settings of ``model_dir`` that decide frame sampling, over ``defaults``
    (keys of ``defaults`` only; the order of files is transformers', see the module docstring)."""
    from vlmpack.models.video_config import video_settings

    cfg = video_settings(Path(model_dir), {**defaults, "size": {}})
    cfg.pop("size")
    return cfg


def _check_total(total: int) -> int:
    if not total or int(total) <= 0:
        raise MediaRuleError(f"video has no frames ({total})")
    return int(total)


def default_frame_indices(total: int, fps: float | None, settings: dict) -> np.ndarray:
    """int64 ``[n]``: the frames ``BaseVideoProcessor`` keeps of a ``total``-frame video at average
    ``fps``: every frame without ``do_sample_frames``; else ``BaseVideoProcessor.sample_frames``
    (``ValueError`` when both ``num_frames`` and ``fps`` are set) and transformers'
    ``default_sample_indices_fn`` (``np.arange(n) * total // n``, ``n = max(1, int(total /
    video_fps * fps))`` when sampling by ``fps``). Raises :class:`MediaRuleError` where they raise."""
    total = _check_total(total)
    if not settings.get("do_sample_frames"):
        return np.arange(total, dtype=np.int64)
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn

    num, rate = settings.get("num_frames"), settings.get("fps")
    if num is not None and rate is not None:
        raise MediaRuleError("the video processor config sets both num_frames and fps (mutually exclusive)")
    try:
        idx = default_sample_indices_fn(VideoMetadata(total_num_frames=total, fps=fps), num_frames=num, fps=rate)
    except (ValueError, ZeroDivisionError) as e:
        raise MediaRuleError(f"the video processor cannot sample this video: {' '.join(str(e).split())}") from None
    return np.asarray(idx, dtype=np.int64)


def internvl_frame_indices(total: int, fps: float | None, settings: dict) -> np.ndarray:
    """int64 ``[n]``: the frames ``InternVLVideoProcessor`` keeps of a ``total``-frame video at
    average ``fps``: every frame without ``do_sample_frames``; else its ``sample_frames``
    (``num_frames`` wins over ``fps``; ``num_frames = int(total / fps * settings["fps"])`` otherwise;
    ``torch.arange(shift, total, total / num_frames).int()``, ``shift = total / num_frames / 2``
    for ``initial_shift=True``, ``0`` for ``False``). Raises :class:`MediaRuleError` where it raises
    (no ``num_frames`` nor ``fps``, no frame rate, more frames than the video has, 0 frames)."""
    import torch

    total = _check_total(total)
    if not settings.get("do_sample_frames"):
        return np.arange(total, dtype=np.int64)
    num, rate, shift = settings.get("num_frames"), settings.get("fps"), settings.get("initial_shift", True)
    if num is None and rate is not None:
        if fps is None:
            raise MediaRuleError("video has no frame rate; the processor samples at fps")
        num = int(total / fps * rate)
    if num is None or num <= 0:
        raise MediaRuleError(f"the video processor cannot sample {num} frames (set num_frames or fps)")
    if shift is True:
        shift = total / num / 2
    if num > total:
        raise MediaRuleError(f"the video processor cannot sample {num} frames of a {total}-frame video")
    return torch.arange(shift, total, total / num).int().numpy().astype(np.int64)

