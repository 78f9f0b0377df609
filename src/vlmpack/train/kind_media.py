"""The media kinds after image and video (the registry :data:`vlmpack.media.kinds.KINDS`: audio)
in pack encoding (:mod:`vlmpack.train.encode`): each item decoded by its kind's registry decoder,
a pack's items of a kind through the family's ``process_media`` (one call per kind and pack), each
sample's ids expanded with every media item's tokens in order of appearance, and the checks of a
kind's feature tokens against its features and the counts recorded at pack time
(:class:`vlmpack.errors.PackMismatchError`). The collator's side is :func:`batch_media_inputs`.

No family is named here: a family that trains on such a kind gives ``process_media`` /
``batch_media_inputs`` and ``<kind>_token_id`` (:mod:`vlmpack.models.base`).

Sound tracks: a family whose ``audio_in_video`` is true (Qwen2.5-Omni with the processor kwarg
``use_audio_in_video``) reads each video's sound track as an audio item of its own, at the video's
place among the sample's audio items (``Qwen2_5OmniProcessor`` with ``audio_from_video_indices``:
the audio slots in content order, a video's slot where the video is): :func:`media_items` puts it
there (decoded by the audio decoder from the video's bytes, as the counting side probed them),
:func:`with_sound_tracks` gives each video its full token count (``2 + video + track``, what
``media_tokens`` recorded), and :func:`expand_with_media` / :func:`check_media` tell the tracks
from the sample's audio parts (whose ``<|AUDIO|>`` placeholders the text holds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.media.kinds import KINDS
from vlmpack.models.base import ProcessedMedia, ProcessedVideos

__all__ = ["LATER_KINDS", "batch_media_inputs", "check_media", "expand_with_media", "media_counts", "media_items",
           "process_pack_media", "sample_media_counts", "with_sound_tracks"]

#: The kind of a video's sound track when the family reads it (``audio_in_video``).
TRACK_KIND = "audio"

#: The registered kinds the image and video paths do not handle, in registry order.
LATER_KINDS: tuple[str, ...] = tuple(k for k in KINDS if k not in ("image", "video"))


def _hook(f, name: str, kind: str):
    hook = getattr(f, name, None)
    if hook is None:
        raise ConfigError(f"{f.model_dir}: the {f.name} family cannot train on {kind} items (it has no {name})")
    return hook


def process_pack_media(f, items: Sequence) -> tuple[dict[str, ProcessedMedia], dict[str, list[int]]]:
    """The later-kind items of a pack's samples, processed: ``items`` per sample its
    ``(kind, raw, where)`` triples in order of appearance (raw bytes, a path or a file object;
    ``where`` labels errors). Each item is decoded by ``KINDS[kind].decode(raw, where=where)``
    (audio: :func:`vlmpack.media.audio.decode_audio`, float32 16 kHz mono) and every kind present
    goes through the family's ``process_media(kind, decoded, items_per_sample)`` once.

    Returns ``({kind: ProcessedMedia}, {kind: items per sample})`` for the kinds present. Raises
    :class:`ConfigError` for a family without ``process_media``, ``MediaDecodeError`` for an item
    that does not decode, :class:`PackMismatchError` when the family returns another number of
    token counts than items."""
    processed: dict[str, ProcessedMedia] = {}
    per_sample: dict[str, list[int]] = {}
    for kind in LATER_KINDS:
        counts = [sum(1 for k, _, _ in sample if k == kind) for sample in items]
        if not sum(counts):
            continue
        process, decode = _hook(f, "process_media", kind), KINDS[kind].decode
        decoded = [decode(raw, where=where) for sample in items for k, raw, where in sample if k == kind]
        out = process(kind, decoded, counts)
        if len(out.tokens) != len(decoded):
            raise PackMismatchError(f"{f.name}.process_media gave {len(out.tokens)} token counts for "
                                    f"{len(decoded)} {kind} items")
        processed[kind], per_sample[kind] = out, counts
    return processed, per_sample


def sample_media_counts(it) -> dict[str, int]:
    """``{kind: items}`` of one sample's later-kind items (``PackItem.other``), kinds present only."""
    counts: dict[str, int] = {}
    for kind, _, _ in it.other:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _tracks(f) -> bool:
    """True when the family reads each video's sound track as an audio item (``audio_in_video``)."""
    return bool(getattr(f, "audio_in_video", False))


def _kinds(it) -> list[str]:
    return list(it.kinds) if it.kinds is not None else ["image"] * len(it.images)


def media_items(f, it) -> list[tuple]:
    """One sample's later-kind items in content order, ``(kind, raw, where)`` each: its parts
    (``it.other``) and, for a family with ``audio_in_video``, each video's sound track
    (``("audio", the video's raw bytes / path / file object, where + " (sound track)")``) at the
    video's place (module docstring). What :func:`process_pack_media` takes per sample."""
    if not (_tracks(f) and it.videos):
        return list(it.other)
    other, videos, out = iter(it.other), iter(it.videos), []
    for kind in _kinds(it):
        if kind == "video":
            raw, where = next(videos)
            out.append((TRACK_KIND, raw, f"{where} (sound track)"))
        elif kind != "image":
            out.append(next(other))
    return out


def media_counts(f, it) -> dict[str, int]:
    """``{kind: items}`` of :func:`media_items` (the sample's rows in ``ProcessedMedia``: its parts
    and, with ``audio_in_video``, its videos' sound tracks), kinds present only."""
    counts = sample_media_counts(it)
    if _tracks(f) and it.videos:
        counts[TRACK_KIND] = counts.get(TRACK_KIND, 0) + len(it.videos)
    return counts


def _is_track(f, it) -> list[bool]:
    """Per audio item of :func:`media_items`: True for a video's sound track."""
    if not _tracks(f):
        return [False] * sample_media_counts(it).get(TRACK_KIND, 0)
    return [k == "video" for k in _kinds(it) if k in ("video", TRACK_KIND)]


def with_sound_tracks(f, videos: ProcessedVideos, media: dict[str, ProcessedMedia], items: Sequence
                      ) -> ProcessedVideos:
    """``videos`` (a pack's, :func:`vlmpack.train.videos.process_pack_videos`) with each video's
    ``tokens`` = ``2 + tokens + its sound track's audio tokens`` (the ``<|audio_bos|>`` /
    ``<|audio_eos|>`` pair, ``Qwen2_5OmniProcessor.replace_video_with_audio_token``), what the
    family's ``media_tokens`` recorded and its ``expand_videos`` lays out; ``media``: the pack's
    processed later kinds (:func:`process_pack_media` of :func:`media_items`), ``items``: the
    pack's :class:`~vlmpack.train.encode.PackItem` in order. Unchanged without ``audio_in_video``
    or videos. Raises :class:`PackMismatchError` when the audio rows do not cover the tracks."""
    if not (_tracks(f) and len(videos.tokens)):
        return videos
    audio = media.get(TRACK_KIND)
    track_tokens, at = [], 0
    for it in items:
        flags = _is_track(f, it)
        got = audio.tokens[at:at + len(flags)].tolist() if audio is not None else []
        if len(got) != len(flags):
            raise PackMismatchError(f"sample {it.id!r}: {len(got)} processed audio items for {len(flags)} audio "
                                    "items and sound tracks")
        track_tokens += [n for n, is_track in zip(got, flags) if is_track]
        at += len(flags)
    if len(track_tokens) != len(videos.tokens):
        raise PackMismatchError(f"{len(track_tokens)} sound tracks for {len(videos.tokens)} videos")
    tokens = np.asarray(videos.tokens, dtype=np.int64) + 2 + np.asarray(track_tokens, dtype=np.int64)
    return ProcessedVideos(videos.pixel_values, videos.grids, tokens, videos.features, videos.model_kwargs,
                           videos.layouts)


def expand_with_media(f, ids0: np.ndarray, it, image_tokens: np.ndarray, media: dict[str, ProcessedMedia],
                      offsets: dict[str, int], videos: ProcessedVideos | None = None, vi: int = 0) -> np.ndarray:
    """One sample's ids with its images, videos and later-kind items expanded (media tokens in
    order of appearance: ``it.kinds``) by the family's
    :meth:`~vlmpack.models.base.ModelFamily.expand`, or with videos its
    :meth:`~vlmpack.models.base.ModelFamily.expand_videos` (``videos``: the pack's, after
    :func:`with_sound_tracks`; ``vi``: the sample's first video); ``offsets``: per kind the index of
    the sample's first item in ``media`` (a video's sound track is skipped there: its tokens are in
    the video's). Raises :class:`ConfigError` for a sample with videos and later-kind parts in a
    family that does not read sound tracks (none counts both), or without ``videos``."""
    if it.videos and (videos is None or not _tracks(f)):
        raise ConfigError(f"{f.model_dir}: a sample with videos and {', '.join(sample_media_counts(it))} items "
                          "is not supported by the collator")
    runs = {"image": iter(np.asarray(image_tokens).tolist())}
    for kind, proc in media.items():
        runs[kind] = iter(proc.tokens[offsets.get(kind, 0):].tolist())
    nv = len(it.videos)
    if nv:
        runs["video"] = iter(videos.tokens[vi:vi + nv].tolist())
    tokens = []
    for k in _kinds(it):
        if k == "video":
            next(runs[TRACK_KIND])  # the video's sound track (its tokens are in the video's)
        tokens.append(next(runs[k]))
    if not nv:
        return f.expand(ids0, tokens)
    return f.expand_videos(ids0, tokens, videos.layouts[vi:vi + nv], it.special_tokens, kinds=_kinds(it))


def check_media(f, key: str, it, ids: np.ndarray, media: dict[str, ProcessedMedia], offsets: dict[str, int],
                check_recorded: bool) -> None:
    """:class:`PackMismatchError` when the sample's ``<kind>_token_id`` tokens differ from its
    items' feature tokens (``ProcessedMedia.tokens``) for a later kind, or (``check_recorded``) an
    item's feature tokens from the count recorded at pack time (``it.recorded_other``: ``(kind,
    part, tokens)`` per item): the item decodes to another length than its header said, or the
    feature extractor config differs from the packing one. With ``audio_in_video`` the sample's
    audio items include its videos' sound tracks (:func:`media_items`), whose recorded count is the
    video's (:func:`vlmpack.train.videos.check_videos`)."""
    counts = media_counts(f, it)
    for kind in LATER_KINDS:
        token_id = getattr(f, f"{kind}_token_id", None)
        n = counts.get(kind, 0)
        at = offsets.get(kind, 0)
        got = media[kind].tokens[at:at + n] if n else np.zeros(0, dtype=np.int64)
        n_pad = int(np.count_nonzero(ids == token_id)) if token_id is not None else 0
        if n_pad != int(got.sum()):
            raise PackMismatchError(f"pack {key!r} sample {it.id!r}: {n_pad} {kind} tokens for {int(got.sum())} "
                                    f"{kind} features")
        if not (check_recorded and n and it.recorded_other):
            continue
        recorded = [(part, rec) for k, part, rec in it.recorded_other if k == kind]
        if kind == TRACK_KIND:  # the audio parts' own tokens, without the sound tracks
            got = got[~np.asarray(_is_track(f, it), dtype=bool)]
        for (part, rec), tokens in zip(recorded, got.tolist()):
            if rec is not None and rec != tokens:
                raise PackMismatchError(
                    f"pack {key!r} sample {it.id!r}: {kind} {part} gives {tokens} tokens from its features but the "
                    f"pack records {rec}; the item decodes to another length than its header said, or the "
                    "feature extractor config differs from the packing one: re-pack with the same --model")


def batch_media_inputs(f, encs: Sequence) -> dict[str, dict]:
    """``{kind: model kwargs}`` of a batch: per later kind present in the encoded packs (their
    ``media``, in order) the family's ``batch_media_inputs(kind, parts)``."""
    out = {}
    for kind in LATER_KINDS:
        parts = [e.media[kind] for e in encs if kind in e.media]
        if parts:
            out[kind] = _hook(f, "batch_media_inputs", kind)(kind, parts)
    return out
