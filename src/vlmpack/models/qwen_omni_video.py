"""Qwen2.5-Omni videos: the video rule of ``Qwen2_5OmniProcessor`` (transformers 5.24) and its
``use_audio_in_video`` layout, for :class:`vlmpack.models.qwen2_5_omni.Qwen25OmniFamily`.

What the processor does to a video, and what is restated here:

- frames and grid: ``Qwen2VLVideoProcessor`` of the directory (frame sampling and ``smart_resize``
  of :class:`vlmpack.models.qwen_video_rule.QwenVideoRule`, every frame kept unless the directory
  turns ``do_sample_frames`` on), called with the processor's own ``videos_kwargs``: its class
  attribute ``size = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}``, which
  ``ProcessorMixin._merge_kwargs`` passes at every call and so replaces the video processor's size
  (``min_pixels`` / ``max_pixels`` of ``preprocessor_config.json`` do not reach videos):
  :data:`OMNI_VIDEO_SIZE`;
- ``video_second_per_grid = temporal_patch_size / fps``, ``fps`` the call's ``videos_kwargs["fps"]``
  or 2.0 (``_process_videos``: "default fps not saved in official ckpt, hardcode"); a directory's
  video processor ``fps`` is not a call kwarg and does not reach it: :data:`PROCESSOR_FPS`;
- without ``use_audio_in_video`` (``load_audio_from_video``) the rendered ``<|VIDEO|>`` becomes
  ``t * h * w // merge_size**2`` copies (``replace_video_token``);
- with it, each video's sound track (``OmniModalProcessorMixin._resolve_audio_from_video``: the
  track decoded at 16 kHz; a video without an audio stream is skipped there and keeps the plain
  form) goes through the feature extractor like an audio item
  (:func:`vlmpack.models.qwen_omni_audio.audio_tokens` of the track's header:
  :func:`vlmpack.media.audio.probe_sound_track`), and ``<|VIDEO|>`` becomes ``<|audio_bos|>`` +
  the video and audio runs of :func:`vlmpack.models.qwen_omni_audio.interleaved_runs` +
  ``<|audio_eos|>`` (``replace_video_with_audio_token``): ``2 + video + audio`` tokens.

The settings ``use_audio_in_video`` / ``load_audio_from_video`` (either turns it on, as
``Qwen2_5OmniProcessor.__call__`` maps the first onto the second), ``seconds_per_chunk`` (2.0) and
``position_id_per_seconds`` (25) are call kwargs of the processor: vlmpack takes them as
``--processor-kwargs`` (component ``processor``: :mod:`vlmpack.models.options` writes them to the
directory's ``processor_config.json``, read here by :func:`omni_video_settings`).

A video without a sound track is refused when ``use_audio_in_video`` is on: the processor would
give it the plain form, but the thinker's ``get_rope_index(use_audio_in_video=True)`` reads every
video as ``<|vision_bos|><|audio_bos|>...`` and takes the next audio length for it, so such a
sample cannot be trained on (``media_unsupported``). A track that is cut short (it decodes to fewer
samples than its container states) is refused by the probe (``media_undecodable`` on the error).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaError, MediaRuleError
from vlmpack.models.qwen_omni_audio import audio_tokens, interleaved_runs

__all__ = ["OMNI_VIDEO_SIZE", "PROCESSOR_FPS", "PROCESSOR_KEYS", "expand_omni", "omni_video_settings",
           "sound_track_tokens"]

#: ``Qwen2_5OmniProcessor.videos_kwargs["size"]`` (pixels), passed to the video processor at every call.
OMNI_VIDEO_SIZE = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}
#: The fps ``Qwen2_5OmniProcessor._process_videos`` assumes for ``video_second_per_grid``.
PROCESSOR_FPS = 2.0
#: The processor call kwargs the family reads, with the processor's defaults.
PROCESSOR_KEYS = {"use_audio_in_video": False, "load_audio_from_video": False, "seconds_per_chunk": 2.0,
                  "position_id_per_seconds": 25}


def omni_video_settings(model_dir: str | Path) -> dict:
    """``{"audio_in_video": bool, "seconds_per_chunk": float, "position_id_per_seconds": float}``:
    :data:`PROCESSOR_KEYS` from ``processor_config.json`` of ``model_dir`` (where
    ``--processor-kwargs`` writes them) over the processor's defaults. Raises :class:`ConfigError`
    for a value of the wrong type or a non-positive chunk / rate."""
    path = Path(model_dir) / "processor_config.json"
    found = {}
    if path.is_file():
        try:
            found = json.loads(path.read_text())
        except ValueError:
            raise ConfigError(f"{path}: not JSON") from None
    cfg = {k: (found.get(k) if isinstance(found, dict) and found.get(k) is not None else v)
           for k, v in PROCESSOR_KEYS.items()}
    for k in ("use_audio_in_video", "load_audio_from_video"):
        if not isinstance(cfg[k], bool):
            raise ConfigError(f"{path}: {k} must be true or false, got {cfg[k]!r}")
    for k in ("seconds_per_chunk", "position_id_per_seconds"):
        if isinstance(cfg[k], bool) or not isinstance(cfg[k], (int, float)) or cfg[k] <= 0:
            raise ConfigError(f"{path}: {k} must be a positive number, got {cfg[k]!r}")
    return {"audio_in_video": cfg["use_audio_in_video"] or cfg["load_audio_from_video"],
            "seconds_per_chunk": float(cfg["seconds_per_chunk"]),
            "position_id_per_seconds": cfg["position_id_per_seconds"]}


_TRACKS: dict[tuple, object] = {}


def _track_header(path: str):
    """The sound track header of the video file (or archive member) ``path``, None without one;
    cached per ``(path, size, mtime)`` (a member: per path). Raises ``MediaError``."""
    from vlmpack.media.audio import probe_sound_track
    from vlmpack.media.ref import display_ref, is_member, read_ref

    if is_member(path):
        key: tuple = (path,)
    else:
        try:
            st = os.stat(path)
        except OSError as e:
            raise MediaError("media_missing", f"video file not found: {path} ({e})") from None
        key = (path, st.st_size, st.st_mtime_ns)
    hit = _TRACKS.get(key)
    if hit is None:
        try:
            hit = probe_sound_track(read_ref(path) if is_member(path) else path, display_ref(path))
        except MediaError as e:
            hit = e
        if len(_TRACKS) > 4096:
            _TRACKS.clear()
        _TRACKS[key] = hit if hit is not None else False
    if isinstance(hit, MediaError):
        raise MediaError(hit.reason, hit.detail)
    return hit or None


def sound_track_tokens(media, *, hop_length: int, n_samples: int) -> int:
    """``<|AUDIO|>`` tokens of the sound track of a video ``media``: a :class:`vlmpack.records.Media`
    with its ``path`` (the count stage's item: a file or an archive member), or any item with the
    video's bytes as ``data``. :func:`~vlmpack.models.qwen_omni_audio.audio_tokens` of the track's
    header (:func:`vlmpack.media.audio.probe_sound_track`: sample count and rate). Raises
    :class:`MediaRuleError`: ``media_unsupported`` for a video without a sound track or an item
    that names no file and holds no bytes (a bare :class:`~vlmpack.models.base.MediaSize`; ``vlmpack
    verify`` passes :class:`vlmpack.verify.PartMedia`, the size with the part's bytes), the probe's
    reason (``media_undecodable``: a track cut short, ``media_missing``) otherwise."""
    from vlmpack.media.audio import probe_sound_track

    path, data = getattr(media, "path", "") or "", getattr(media, "data", None)
    if not path and data is None:
        raise MediaRuleError("use_audio_in_video: the sound track is counted from the video's bytes, and this item "
                             "names no file and holds no bytes (a recount from the header alone cannot see it)")
    try:
        head = _track_header(path) if path else probe_sound_track(bytes(data), "video")
    except MediaError as e:
        raise MediaRuleError(f"the sound track of the video: {e.detail}", reason=e.reason) from None
    if head is None:
        raise MediaRuleError("the video has no sound track; with use_audio_in_video the thinker reads every video "
                             "as video + sound (get_rope_index), so a silent one cannot be packed")
    return audio_tokens(head.samples, head.sample_rate, hop_length=hop_length, n_samples=n_samples)


def expand_omni(family, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence | None) -> np.ndarray:
    """int32 ``input_ids``: the i-th ``<|IMAGE|>`` / ``<|AUDIO|>`` / ``<|VIDEO|>`` of ``ids`` (in
    order of appearance) replaced as ``Qwen2_5OmniProcessor`` does: ``media_tokens[i]`` copies, and
    a video whose layout (``layouts``, one per video in order; :meth:`Qwen25OmniFamily.video_layout`)
    is a grid ``(t, h, w)`` by ``<|audio_bos|>`` + the runs of
    :func:`~vlmpack.models.qwen_omni_audio.interleaved_runs` (its sound track's tokens =
    ``media_tokens[i] - 2 - t*h*w // merge**2``) + ``<|audio_eos|>``. Raises ``ValueError`` when
    the pads and the media disagree, or a video with sound has no layout (``layouts`` None)."""
    ids = np.asarray(ids, dtype=np.int64)
    f = family
    pads = np.flatnonzero((ids == f.image_token_id) | (ids == f.audio_token_id) | (ids == f.video_token_id))
    if len(pads) != len(media_tokens):
        raise ValueError(f"{len(pads)} media pads in the ids for {len(media_tokens)} media items")
    out: list[np.ndarray] = []
    prev, vi = 0, 0
    merge = int(f.video_config["merge_size"])
    for p, n in zip(pads.tolist(), media_tokens):
        out.append(ids[prev:p])
        prev = p + 1
        if ids[p] != f.video_token_id:
            out.append(np.full(int(n), ids[p], dtype=np.int64))
            continue
        layout = layouts[vi] if layouts is not None and vi < len(layouts) else None
        vi += 1
        if not f.audio_in_video:
            out.append(np.full(int(n), f.video_token_id, dtype=np.int64))
            continue
        if layout is None:
            raise ValueError("a video with its sound track needs its grid to be laid out (expand_videos)")
        t, h, w = (int(x) for x in layout)
        video = t * h * w // merge ** 2
        audio = int(n) - 2 - video
        if audio <= 0:
            raise ValueError(f"a video of {video} video tokens was counted {n} tokens: no sound track tokens left")
        runs = interleaved_runs((t, h, w), audio, merge_size=merge, second_per_grid=f.second_per_grid,
                                position_id_per_seconds=f.omni_video["position_id_per_seconds"],
                                seconds_per_chunk=f.omni_video["seconds_per_chunk"])
        tok = {"video": f.video_token_id, "audio": f.audio_token_id}
        out.append(np.array([f.audio_start_token_id], dtype=np.int64))
        out += [np.full(k, tok[kind], dtype=np.int64) for kind, k in runs]
        out.append(np.array([f.audio_end_token_id], dtype=np.int64))
    out.append(ids[prev:])
    return np.concatenate(out).astype(np.int32)
