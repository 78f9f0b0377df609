"""Qwen-VL video pixels and video ``input_ids`` for training (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

transformers' video processors (``Qwen2VLVideoProcessor``, ``Qwen3VLVideoProcessor``) need
torchvision; this module restates their pixel pipeline with torch alone, step by step:

1. frame indices: :func:`sample_indices` — ``Qwen2VLVideoProcessor.sample_frames``
   (``torch.arange(0, total, total / n).int()``, ``n`` from ``num_frames`` or ``fps``) or, for
   Qwen3-VL, ``Qwen3VLVideoProcessor.sample_frames`` (:meth:`Qwen3VLFamily.video_indices`,
   ``np.linspace(0, total - 1, n).round()``), from the container header's frame count and
   average fps (:mod:`vlmpack.media.video`), the same facts the counter used;
2. decode: :func:`vlmpack.media.frames.decode_frames` (transformers' ``read_video_pyav``:
   PyAV, decode order, ``to_ndarray(format="rgb24")``);
3. resize: every frame to the family's ``video_grid`` size (``smart_resize`` of the video
   processor, the counter's rule) by :func:`resize_frames`, torchvision's
   ``transforms.v2.functional.resize`` on a uint8 tensor (what ``TorchvisionBackend.resize``
   calls with ``antialias=True``) restated: on CPU, bicubic (and bilinear with AVX2) run
   natively on uint8, ``torch.nn.functional.interpolate(..., align_corners=False,
   antialias=True)``; otherwise float32, clamp (bicubic), round, back to uint8; unchanged size: no
   resize. (Transformers on a GPU device takes the float path; frames are processed on CPU here.)
   Note: PIL's bicubic (the image processor's ``...ImageProcessorPil`` path) differs from this by
   up to 1 level on some pixels, so images and video frames are not resized by the same code;
4. rescale + normalize: ``TorchvisionBackend.rescale_and_normalize`` (fused: ``x.float()``
   ``- mean / rescale_factor``, ``/ (std / rescale_factor)``, float32);
5. patchify: ``Qwen2VLVideoProcessor.patchify`` / ``Qwen3VLVideoProcessor.patchify`` (the same
   code): the last frame repeated to a multiple of ``temporal_patch_size``, then
   ``[t*h*w, C*tp*p*p]`` in the merge-window order.

``second_per_grid_ts`` (Qwen2.5-VL only, ``Qwen2_5_VLProcessor._process_videos``):
``temporal_patch_size / sampled_fps`` with ``sampled_fps = len(indices) / total * fps``
(``VideoMetadata.sampled_fps``; 24 without an fps), float32.

``input_ids``: Qwen2-VL / Qwen2.5-VL expand each ``<|video_pad|>`` to ``t*h*w // merge**2``
copies (:meth:`Qwen2VLFamily.expand`); Qwen3-VL (:func:`expand_qwen3_videos`) builds what
``Qwen3VLProcessor.__call__`` tokenizes: per temporal group ``"<{t:.1f} seconds>"`` +
``<|vision_start|>`` + ``h*w // merge**2`` pads + ``<|vision_end|>``.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from vlmpack.errors import ConfigError, MediaDecodeError, MediaRuleError
from vlmpack.models.base import MediaSize, ProcessedVideos, cat_rows
from vlmpack.models.video_config import video_settings

__all__ = ["batch_qwen_video_inputs", "expand_qwen3_videos", "normalize_frames", "patchify", "process_qwen_videos",
           "resize_frames", "sample_indices", "video_pixel_settings"]

#: transformers' ``OPENAI_CLIP_MEAN`` / ``OPENAI_CLIP_STD`` (``Qwen2VLVideoProcessor`` defaults) and
#: ``IMAGENET_STANDARD_MEAN`` / ``_STD`` (``Qwen3VLVideoProcessor``).
_CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
_HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
_PIXEL_DEFAULTS = {"resample": 3, "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255,
                   "do_normalize": True}


def video_pixel_settings(family) -> dict:
    """The pixel settings of the family's video processor (``resample``, ``do_resize``,
    ``do_rescale``, ``rescale_factor``, ``do_normalize``, ``image_mean``, ``image_std``), read
    from the model directory as :func:`vlmpack.models.video_config.video_settings` reads the others,
    over the class defaults of ``Qwen2VLVideoProcessor`` / ``Qwen3VLVideoProcessor``."""
    cached = family.__dict__.get("_video_pixel_settings")
    if cached is None:
        mean, std = _HALF if family.video_rule == "qwen3" else _CLIP
        cached = video_settings(Path(family.model_dir), {**_PIXEL_DEFAULTS, "image_mean": mean, "image_std": std,
                                                         "size": {}})
        cached.pop("size")
        family.__dict__["_video_pixel_settings"] = cached
    return cached


def sample_indices(family, frames: int, fps: float | None) -> np.ndarray:
    """int64 ``[n]``: the frame indices the family's video processor keeps of a ``frames``-frame
    video at average ``fps``. Qwen3-VL: :meth:`Qwen3VLFamily.video_indices`. Qwen2-VL/2.5-VL:
    ``Qwen2VLVideoProcessor.sample_frames`` (``n`` from ``num_frames`` rounded to
    ``temporal_patch_size``, or ``fps`` frames a second clamped to ``[min_frames, max_frames]`` and
    floored to ``temporal_patch_size``; ``torch.arange(0, frames, frames / n).int()``), every frame
    without ``do_sample_frames``. Raises :class:`MediaRuleError` where the processor raises."""
    if hasattr(family, "video_indices"):
        return np.asarray(family.video_indices(frames, fps), dtype=np.int64)
    c = family.video_config
    family.video_frames(frames, fps)  # the counter's checks (MediaRuleError)
    tp, num, rate = int(c["temporal_patch_size"]), c["num_frames"], c["fps"]
    if not c["do_sample_frames"] or (num is None and rate is None):
        return np.arange(frames, dtype=np.int64)
    if num is not None:
        n = round(num / tp) * tp
    else:
        top = math.floor(min(c["max_frames"], frames) / tp) * tp
        n = min(max(frames / fps * rate, c["min_frames"]), top, frames)
        n = math.floor(n / tp) * tp
    return torch.arange(0, frames, frames / n).int().numpy().astype(np.int64)


def _native_uint8(interpolation: int) -> bool:
    """torchvision's ``_do_native_uint8_resize_on_cpu``: bicubic always, bilinear with AVX2."""
    if interpolation == 2:
        return "AVX2" in torch.backends.cpu.get_cpu_capability()
    return interpolation == 3


def resize_frames(frames: torch.Tensor, height: int, width: int, resample: int = 3) -> torch.Tensor:
    """uint8 ``[n, C, H, W]`` -> uint8 ``[n, C, height, width]``: torchvision's
    ``transforms.v2.functional.resize_image`` with ``antialias=True`` on CPU (see the module
    docstring); ``resample`` is PIL's code (3 bicubic, 2 bilinear). Raises :class:`ConfigError`
    for another resample."""
    if resample not in (2, 3):
        raise ConfigError(f"video resample {resample} is not supported (bicubic 3 or bilinear 2)")
    if tuple(frames.shape[-2:]) == (height, width):
        return frames
    mode = "bicubic" if resample == 3 else "bilinear"
    if frames.dtype == torch.uint8 and _native_uint8(resample):
        return torch.nn.functional.interpolate(frames, size=[height, width], mode=mode, align_corners=False,
                                               antialias=True)
    out = torch.nn.functional.interpolate(frames.to(torch.float32), size=[height, width], mode=mode,
                                          align_corners=False, antialias=True)
    if resample == 3:
        out = out.clamp_(min=0, max=255)
    return out.round_().to(torch.uint8)


def normalize_frames(frames: torch.Tensor, settings: dict) -> torch.Tensor:
    """uint8 ``[..., C, H, W]`` -> float32: ``TorchvisionBackend.rescale_and_normalize`` (fused
    mean/std ``* (1 / rescale_factor)`` when both are on, then ``tvF.normalize``: sub, div)."""
    do_rescale, do_norm = settings["do_rescale"], settings["do_normalize"]
    if do_norm:
        mean, std = torch.tensor(settings["image_mean"]), torch.tensor(settings["image_std"])
        if do_rescale:
            mean, std = mean * (1.0 / settings["rescale_factor"]), std * (1.0 / settings["rescale_factor"])
        x = frames.to(torch.float32)
        return x.sub_(mean.to(torch.float32).view(-1, 1, 1)).div_(std.to(torch.float32).view(-1, 1, 1))
    if do_rescale:
        return frames * settings["rescale_factor"]
    return frames.to(torch.float32)


def patchify(videos: torch.Tensor, patch_size: int, merge_size: int,
             temporal_patch_size: int) -> tuple[torch.Tensor, int, int, int]:
    """``Qwen2VLVideoProcessor.patchify`` (= ``Qwen3VLVideoProcessor.patchify``): float
    ``[B, T, C, H, W]`` -> ``([B, t*h*w, C*tp*p*p], t, h, w)``, the last frame repeated to a
    multiple of ``temporal_patch_size``; ``H``, ``W`` multiples of ``patch_size * merge_size``."""
    batch_size, num_frames, channel, resized_height, resized_width = videos.shape
    if pad := -num_frames % temporal_patch_size:
        repeats = videos[:, -1:].expand(-1, pad, -1, -1, -1)
        videos = torch.cat((videos, repeats), dim=1)
        num_frames += pad
    grid_t = num_frames // temporal_patch_size
    grid_h, grid_w = resized_height // patch_size, resized_width // patch_size
    patches = videos.view(batch_size, grid_t, temporal_patch_size, channel, grid_h // merge_size, merge_size,
                          patch_size, grid_w // merge_size, merge_size, patch_size)
    patches = patches.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    flat = patches.reshape(batch_size, grid_t * grid_h * grid_w, channel * temporal_patch_size * patch_size ** 2)
    return flat, grid_t, grid_h, grid_w


def _source_and_label(item) -> tuple[object, str]:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
        return item
    return item, "video"


def _probe(src, label: str):
    from vlmpack.errors import MediaError
    from vlmpack.media.frames import video_source
    from vlmpack.media.video import probe_video

    s = video_source(src, where=label)
    data = s if isinstance(s, str) else s.read()
    try:
        return probe_video(data, os.path.basename(label)), (data if isinstance(data, str) else io.BytesIO(data))
    except MediaError as e:
        raise MediaDecodeError(f"{label}: {e}") from None


def video_header(item) -> tuple[MediaSize, tuple[object, str]]:
    """``(MediaSize of the container header, (a re-readable source, label))`` of one video item (raw
    bytes, a path, a file object or an Energon ``AVDecoder``; or ``(source, label)``): what the
    counter reads (:func:`vlmpack.media.video.probe_video`); the returned item replaces a consumed
    file object. Raises :class:`MediaDecodeError`."""
    src, label = _source_and_label(item)
    head, src = _probe(src, label)
    return MediaSize("video", head.width, head.height, head.duration_s, head.fps, head.frames), (src, label)


def decode_sampled(src, idx, head, label: str) -> torch.Tensor:
    """uint8 ``[F, 3, H, W]``: the frames ``idx`` of a video decoded with PyAV
    (:func:`vlmpack.media.frames.decode_frames`, transformers' ``read_video_pyav``) and permuted as
    ``BaseVideoProcessor._prepare_input_videos`` does. Raises :class:`MediaDecodeError` when the
    frames are not of the size the header (``head``, what the count used) gives."""
    from vlmpack.media.frames import decode_frames

    frames = decode_frames(src, idx, where=label)
    if frames.shape[1:3] != (head.height, head.width):
        raise MediaDecodeError(f"{label}: frames decode to {frames.shape[2]}x{frames.shape[1]}, the header "
                               f"says {head.width}x{head.height}")
    return torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()


def process_qwen_videos(family, videos: Sequence) -> ProcessedVideos:
    """The videos of one pack -> :class:`ProcessedVideos` for a Qwen-VL family (steps 1-5 of the
    module docstring). ``videos``: raw bytes, paths, binary file objects or Energon ``AVDecoder``
    objects, or ``(source, label)`` pairs whose label (e.g. ``"pack 'k' sample 'x' part vid0.mp4"``)
    starts every error message. ``tokens`` = the family's ``video_tokens`` of the header (what was
    recorded), ``features`` = ``t*h*w // merge**2``. Raises :class:`MediaDecodeError`,
    :class:`MediaRuleError`, :class:`ConfigError` (a family whose videos are not built here)."""

    if getattr(family, "video_rule", None) not in ("qwen2", "qwen3"):
        raise ConfigError(f"{family.model_dir}: the {family.name} family cannot train on videos yet")
    c, px = family.video_config, video_pixel_settings(family)
    patch, merge, tp = int(c["patch_size"]), int(c["merge_size"]), int(c["temporal_patch_size"])
    pixels, grids, tokens, features, seconds, layouts = [], [], [], [], [], []
    for item in videos:
        src, label = _source_and_label(item)
        head, src = _probe(src, label)
        media = MediaSize("video", head.width, head.height, head.duration_s, head.fps, head.frames)
        try:
            t, gh, gw = family.video_grid(media)
            idx = sample_indices(family, head.frames, head.fps)
            n_tokens = family.video_tokens(media)
        except MediaRuleError as e:
            raise MediaDecodeError(f"{label}: the video processor refuses it: {e}") from None
        x = decode_sampled(src, idx, head, label)
        if px["do_resize"]:
            x = resize_frames(x, gh * patch, gw * patch, int(px["resample"]))
        flat, *grid = patchify(normalize_frames(x, px)[None], patch, merge, tp)
        if tuple(grid) != (t, gh, gw):
            raise MediaDecodeError(f"{label}: patch grid {tuple(grid)} differs from the counted {(t, gh, gw)}")
        pixels.append(flat[0])
        grids.append((t, gh, gw))
        tokens.append(n_tokens)
        features.append(t * gh * gw // merge ** 2)
        sampled_fps = len(idx) / head.frames * head.fps if head.fps else 24.0  # VideoMetadata.sampled_fps
        seconds.append(tp / sampled_fps)
        layouts.append(family.video_layout(media) if family.video_rule == "qwen3" else None)
    g = np.asarray(grids, dtype=np.int64).reshape(-1, 3)
    kwargs = {"video_grid_thw": torch.from_numpy(g)}
    if getattr(family, "model_type", "") == "qwen2_5_vl":
        kwargs["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
    return ProcessedVideos(torch.cat(pixels) if pixels else None, g, np.asarray(tokens, dtype=np.int64),
                           np.asarray(features, dtype=np.int64), kwargs, layouts)


def batch_qwen_video_inputs(parts: Sequence[ProcessedVideos]) -> dict:
    """``pixel_values_videos`` float32 ``[sum P, D]``, ``video_grid_thw`` int64 ``[k, 3]`` and, when
    the parts have it, ``second_per_grid_ts`` float32 ``[k]``, concatenated in order."""
    out = {"pixel_values_videos": cat_rows([p.pixel_values for p in parts]),
           "video_grid_thw": torch.from_numpy(np.concatenate([p.grids for p in parts]))}
    if parts and all("second_per_grid_ts" in p.model_kwargs for p in parts):
        out["second_per_grid_ts"] = torch.cat([p.model_kwargs["second_per_grid_ts"] for p in parts])
    return out


def expand_qwen3_videos(family, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                        special_tokens: str | None = None) -> np.ndarray:
    """Qwen3-VL ``input_ids`` (int32) of rendered ids that hold videos, as ``Qwen3VLProcessor``
    builds them: image pads repeated ``media_tokens[i]`` times; each rendered
    ``<|vision_start|><|video_pad|><|vision_end|>`` replaced by, per temporal group, the
    tokenized ``"<{t:.1f} seconds>"`` + ``<|vision_start|>`` + pads + ``<|vision_end|>``
    (``layouts[j] = (timestamps, pads per group)`` of :func:`process_qwen_videos`). The first
    timestamp is tokenized together with the text before it (back to the previous added token,
    decoded), since the processor tokenizes them as one piece (``special_tokens="split"``: with
    ``split_special_tokens=True``, as that text was). Raises ``ValueError`` when pads and media
    disagree."""
    ids = np.asarray(ids, dtype=np.int64)
    tok = family.tokenizer
    pads = np.flatnonzero((ids == family.image_token_id) | (ids == family.video_token_id))
    if len(pads) != len(media_tokens):
        raise ValueError(f"{len(pads)} media pads in the ids for {len(media_tokens)} media items")
    added = set(int(k) for k in tok.added_tokens_decoder)
    vs, ve = family.vision_start_token_id, family.vision_end_token_id

    def encode(text: str) -> list[int]:
        return tok(text, add_special_tokens=False, split_special_tokens=special_tokens == "split")["input_ids"]

    out: list = []
    prev, vi = 0, 0
    for p, n in zip(pads.tolist(), media_tokens):
        if ids[p] == family.image_token_id:
            out += [ids[prev:p], np.full(int(n), family.image_token_id, dtype=np.int64)]
            prev = p + 1
            continue
        if p < 1 or p + 1 >= len(ids) or ids[p - 1] != vs or ids[p + 1] != ve:
            raise ValueError("a <|video_pad|> is not between <|vision_start|> and <|vision_end|>")
        if vi >= len(layouts) or layouts[vi] is None:
            raise ValueError(f"no timestamp layout for video {vi}")
        stamps, per = layouts[vi]
        vi += 1
        seg = p - 1
        while seg > prev and int(ids[seg - 1]) not in added:
            seg -= 1
        text = tok.decode(ids[seg:p - 1].tolist(), clean_up_tokenization_spaces=False) if seg < p - 1 else ""
        out += [ids[prev:seg], np.asarray(encode(text + stamps[0]), dtype=np.int64)]
        group = np.asarray([vs] + [family.video_token_id] * int(per) + [ve], dtype=np.int64)
        for i, stamp in enumerate(stamps):
            if i:
                out.append(np.asarray(encode(stamp), dtype=np.int64))
            out.append(group)
        prev = p + 2
    out.append(ids[prev:])
    return np.concatenate(out).astype(np.int32)
