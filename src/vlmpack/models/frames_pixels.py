"""Video pixels of the whole-frame families for training: InternVL and LLaVA-OneVision.

``InternVLVideoProcessor`` and ``LlavaOnevisionVideoProcessor`` are ``BaseVideoProcessor``s that
keep whole frames (no temporal patches); both use ``BaseVideoProcessor._preprocess`` unchanged
(InternVL's ``_preprocess`` is a copy of it). transformers' torchvision backend cannot be loaded
here, so :func:`process_frame_videos` restates the pipeline with torch alone, step by step:

1. frame indices: the counter's rule (:mod:`vlmpack.models.frames_rule`:
   ``InternVLVideoProcessor.sample_frames`` / ``BaseVideoProcessor.sample_frames``) from the
   container header's frame count and average fps, so the frames decoded are the frames counted;
2. decode: :func:`vlmpack.media.frames.decode_frames` (transformers' ``read_video_pyav``: PyAV,
   decode order, ``to_ndarray(format="rgb24")``), then ``_prepare_input_videos``'s permute to
   uint8 ``[F, 3, H, W]`` (``do_convert_rgb``: ``grayscale_to_rgb`` / ``convert_to_rgb`` leave
   3-channel RGB frames as they are);
3. resize: every frame to ``size`` ``{"height", "width"}`` (``TorchvisionBackend.resize`` ->
   ``tvF.resize(..., antialias=True)`` with ``resample``):
   :func:`vlmpack.models.qwen_video.resize_frames`, the restatement the Qwen-VL video path uses
   (bit-exact against torchvision's code path on CPU, ``tests/test_train_video.py``);
4. ``do_center_crop``: not supported (:class:`ConfigError`; neither processor sets it);
5. rescale + normalize: ``TorchvisionBackend.rescale_and_normalize`` (fused mean / std ``*
   (1 / rescale_factor)``): :func:`vlmpack.models.qwen_video.normalize_frames`, float32.

Settings (``do_resize``, ``size``, ``resample``, ``do_center_crop``, ``do_rescale``,
``rescale_factor``, ``do_normalize``, ``image_mean``, ``image_std``) are read from the model
directory in transformers' order of files (:func:`vlmpack.models.video_config.video_settings`:
``processor_config.json["video_processor"]``, ``video_preprocessor_config.json``,
``preprocessor_config.json``) over the class attributes (:data:`PIXEL_DEFAULTS`). The resized
frame must be the vision tower's input (InternVL's tile, LLaVA-OneVision's crop), since the
counts assume it: :class:`ConfigError` otherwise.

What the models take (``modeling_internvl.py``, ``modeling_llava_onevision.py``):

- InternVL: ``InternVLProcessor.__call__`` flattens ``pixel_values_videos`` ``[B, F, 3, 448,
  448]`` to frames and merges them with the image tiles into one ``pixel_values``, media in text
  order; ``InternVLModel.get_image_features`` turns each frame (like each tile) into
  ``image_seq_length`` features, scattered over the ``<IMG_CONTEXT>`` tokens in order.
  :func:`interleave_frames` builds that per pack;
- LLaVA-OneVision: ``pixel_values_videos`` float32 ``[B, F, 3, 384, 384]``;
  ``LlavaOnevisionModel.get_video_features`` runs every frame through the tower,
  ``apply_pooling`` (bilinear to ``ceil(side / 2)**2`` per frame) and appends one
  ``image_newline`` per *row* (video). One tensor needs the same ``F`` for every video of the
  batch (the processor itself cannot stack others); :func:`stack_frame_videos` stacks them and
  refuses a batch whose videos keep different frame counts (padding frames would add features,
  and the newline is per row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from vlmpack.errors import ConfigError, MediaDecodeError, MediaRuleError
from vlmpack.models.base import MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.frames_rule import PIXEL_DEFAULTS
from vlmpack.models.qwen_video import _probe, _source_and_label, decode_sampled, normalize_frames, resize_frames

__all__ = ["PIXEL_DEFAULTS", "frame_pixel_settings", "interleave_frames", "process_frame_videos",
           "stack_frame_videos"]

def frame_pixel_settings(family, tile: tuple[int, int]) -> dict:
    """The video processor's pixel settings of ``family.model_dir`` (see the module docstring),
    cached on the family. ``tile``: ``(height, width)`` px the vision tower takes. Raises
    :class:`ConfigError` for a center crop, a ``size`` without height / width, no resize, or a
    ``size`` other than ``tile``."""
    from vlmpack.models.video_config import video_settings

    cached = family.__dict__.get("_frame_pixel_settings")
    if cached is not None:
        return cached
    s = video_settings(Path(family.model_dir), dict(PIXEL_DEFAULTS))
    where = f"{family.model_dir}: the {family.name} video processor"
    if s["do_center_crop"]:
        raise ConfigError(f"{where} sets do_center_crop, which vlmpack's frame pipeline does not build; drop it")
    size = (s["size"].get("height"), s["size"].get("width"))
    if not (s["do_resize"] and None not in size and (int(size[0]), int(size[1])) == tuple(tile)):
        raise ConfigError(f"{where} resizes frames to {s['size'] if s['do_resize'] else 'their own size'}, but the "
                          f"vision tower takes {tile[0]}x{tile[1]} (the token counts assume it); set size "
                          f"{{'height': {tile[0]}, 'width': {tile[1]}}} with do_resize true")
    s["size"] = {"height": int(size[0]), "width": int(size[1])}
    family.__dict__["_frame_pixel_settings"] = s
    return s


def process_frame_videos(family, videos: Sequence, indices: Callable[[int, float | None], np.ndarray],
                         tile: tuple[int, int], features: Callable[[int], int]) -> ProcessedVideos:
    """The videos of one pack -> :class:`ProcessedVideos` for a whole-frame family (steps 1-5 of
    the module docstring). ``videos``: raw bytes, paths, binary file objects or Energon
    ``AVDecoder`` objects, or ``(source, label)`` pairs (the label starts every error message);
    ``indices(frames, fps)``: the family's frame rule (int64 ``[F]``); ``tile``: ``(height,
    width)``; ``features(F)``: feature vectors of an ``F``-frame video.

    Returns ``pixel_values`` float32 ``[sum F, 3, height, width]`` (the frames of every video in
    order), ``grids`` int64 ``[k, 3]`` = ``(F, 1, 1)``, ``tokens`` = the family's
    ``media_tokens`` of each header (what the pack recorded), ``features``, ``layouts`` = the
    family's ``video_layout``, no model kwargs. Raises :class:`MediaDecodeError` (a video that
    does not decode or that the processor refuses), :class:`ConfigError` (settings)."""

    px = frame_pixel_settings(family, tile)
    height, width = px["size"]["height"], px["size"]["width"]
    pixels, grids, tokens, feats, layouts = [], [], [], [], []
    for item in videos:
        src, label = _source_and_label(item)
        head, src = _probe(src, label)
        media = MediaSize("video", head.width, head.height, head.duration_s, head.fps, head.frames)
        try:
            idx = indices(head.frames, head.fps)
            n_tokens = family.media_tokens(media)
            layout = family.video_layout(media)
        except MediaRuleError as e:
            raise MediaDecodeError(f"{label}: the video processor refuses it: {e}") from None
        x = decode_sampled(src, idx, head, label)
        x = resize_frames(x, height, width, int(px["resample"]))
        pixels.append(normalize_frames(x, px))
        grids.append((len(idx), 1, 1))
        tokens.append(n_tokens)
        feats.append(features(len(idx)))
        layouts.append(layout)
    return ProcessedVideos(torch.cat(pixels) if pixels else None, np.asarray(grids, dtype=np.int64).reshape(-1, 3),
                           np.asarray(tokens, dtype=np.int64), np.asarray(feats, dtype=np.int64), {}, layouts)


def interleave_frames(images: ProcessedImages, videos: ProcessedVideos,
                      kinds: Sequence[str]) -> tuple[ProcessedImages, ProcessedVideos]:
    """InternVL's merge of one pack's media into one ``pixel_values`` (``InternVLProcessor.__call__``):
    each image's tiles (``images.grids[:, 0]`` rows) and each video's frames (``videos.grids[:, 0]``)
    in ``kinds`` order (``"image"`` / ``"video"`` per media item as the text holds them). Returns
    the images with the merged float32 ``[sum tiles + sum F, 3, H, W]`` ``pixel_values`` and the
    videos without pixels (their grids, tokens, features and layouts kept). Raises ``ValueError``
    when ``kinds`` does not hold the pack's media."""
    if videos.pixel_values is None:
        return images, videos
    n_img, n_vid = len(images.grids), len(videos.grids)
    if (list(kinds).count("image"), list(kinds).count("video"), len(kinds)) != (n_img, n_vid, n_img + n_vid):
        raise ValueError(f"media kinds {list(kinds)[:8]} do not hold {n_img} images and {n_vid} videos")
    tiles = iter(torch.split(images.pixel_values, images.grids[:, 0].tolist()) if n_img else ())
    frames = iter(torch.split(videos.pixel_values, videos.grids[:, 0].tolist()))
    merged = torch.cat([next(tiles) if k == "image" else next(frames) for k in kinds])
    return (ProcessedImages(merged, images.grids, images.tokens, images.model_kwargs),
            ProcessedVideos(None, videos.grids, videos.tokens, videos.features, {}, videos.layouts))


def stack_frame_videos(parts: Sequence[ProcessedVideos], model_dir: str) -> dict:
    """LLaVA-OneVision's ``pixel_values_videos`` float32 ``[k, F, 3, H, W]`` of a batch: the frames
    of every video of the packs in order, one row per video. Raises :class:`ConfigError` when the
    videos keep different frame counts (``LlavaOnevisionModel.get_video_features`` takes one
    ``[B, F, ...]`` tensor and adds one newline per row, so no padding or flattening keeps each
    video's features)."""
    pixels = cat_rows([p.pixel_values for p in parts])
    frames = np.concatenate([p.grids[:, 0] for p in parts]).tolist()
    if len(set(frames)) != 1:
        raise ConfigError(f"{model_dir}: this batch's videos keep {sorted(set(frames))} frames, but "
                          "LlavaOnevisionForConditionalGeneration takes one pixel_values_videos [videos, frames, ...] "
                          "tensor; sample a fixed count (do_sample_frames true + num_frames in the video processor "
                          "config) or put one video in a batch")
    return {"pixel_values_videos": pixels.view(len(frames), frames[0], *pixels.shape[1:])}
