"""The media kinds after image and video (the registry :data:`vlmpack.media.kinds.KINDS`: audio)
in pack encoding (:mod:`vlmpack.train.encode`): each item decoded by its kind's registry decoder,
a pack's items of a kind through the family's ``process_media`` (one call per kind and pack), each
sample's ids expanded with every media item's tokens in order of appearance, and the checks of a
kind's feature tokens against its features and the counts recorded at pack time
(:class:`vlmpack.errors.PackMismatchError`). The collator's side is :func:`batch_media_inputs`.

No family is named here: a family that trains on such a kind gives ``process_media`` /
``batch_media_inputs`` and ``<kind>_token_id`` (:mod:`vlmpack.models.base`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.media.kinds import KINDS
from vlmpack.models.base import ProcessedMedia

__all__ = ["LATER_KINDS", "batch_media_inputs", "check_media", "expand_with_media", "process_pack_media",
           "sample_media_counts"]

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


def expand_with_media(f, ids0: np.ndarray, it, image_tokens: np.ndarray, media: dict[str, ProcessedMedia],
                      offsets: dict[str, int]) -> np.ndarray:
    """One sample's ids with its images and later-kind items expanded by the family's
    :meth:`~vlmpack.models.base.ModelFamily.expand` (media tokens in order of appearance:
    ``it.kinds``); ``offsets``: per kind the index of the sample's first item in ``media``.
    Raises :class:`ConfigError` for a sample that also holds videos (no family counts both)."""
    if it.videos:
        raise ConfigError(f"{f.model_dir}: a sample with videos and {', '.join(sample_media_counts(it))} items "
                          "is not supported by the collator")
    runs = {"image": iter(np.asarray(image_tokens).tolist())}
    for kind, proc in media.items():
        runs[kind] = iter(proc.tokens[offsets.get(kind, 0):].tolist())
    tokens = [next(runs[k]) for k in it.kinds]
    return f.expand(ids0, tokens)


def check_media(f, key: str, it, ids: np.ndarray, media: dict[str, ProcessedMedia], offsets: dict[str, int],
                check_recorded: bool) -> None:
    """:class:`PackMismatchError` when the sample's ``<kind>_token_id`` tokens differ from its
    items' feature tokens (``ProcessedMedia.tokens``) for a later kind, or (``check_recorded``) an
    item's feature tokens from the count recorded at pack time (``it.recorded_other``: ``(kind,
    part, tokens)`` per item): the item decodes to another length than its header said, or the
    feature extractor config differs from the packing one."""
    counts = sample_media_counts(it)
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
