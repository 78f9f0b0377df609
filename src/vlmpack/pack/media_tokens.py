"""Media tokens per media kind (image, video, audio: the registry :data:`vlmpack.media.kinds.KINDS`).

The count stage records per sample its ``media_tokens`` (all items) and, for each media kind after
the first, the part of them its items of that kind hold (:data:`TOKEN_COLUMNS`: ``video_tokens``,
``audio_tokens``; columns of the count results and the manifest, :mod:`vlmpack.pack.results`,
:mod:`vlmpack.pack.manifest`); the first kind's (image) tokens are the rest. The report, ``vlmpack
plan`` and the report figures split them with :func:`tokens_by_kind`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from vlmpack.media.kinds import KINDS
from vlmpack.records import SAMPLE_KINDS

#: The media kinds whose tokens are shown apart, in registry order (``image``, ``video``, ``audio``).
MEDIA_KINDS = tuple(KINDS)
#: Kind -> the name of its per-sample token column (int32, tokens), for every media kind but the
#: first: ``{"video": "video_tokens", "audio": "audio_tokens"}``. A new kind gets its column here
#: (and in the count results' schema, whose format version then changes) by being registered.
TOKEN_COLUMNS: dict[str, str] = {k: f"{k}_tokens" for k in MEDIA_KINDS[1:]}


def sample_kind_tokens(media_per_sample: Iterable[Iterable[Any]]) -> dict[str, np.ndarray]:
    """The :data:`TOKEN_COLUMNS` arrays of counted samples: column name -> int32 ``[n]``, the sum
    of ``num_tokens`` (tokens) over each sample's media items (``.kind``, ``.num_tokens``: a
    :class:`vlmpack.records.Media`) of that kind. ``media_per_sample``: one media list per sample."""
    lists = [list(media) for media in media_per_sample]
    return {col: np.array([sum(m.num_tokens for m in media if m.kind == k) for media in lists], dtype=np.int32)
            for k, col in TOKEN_COLUMNS.items()}


def token_columns(table: Any) -> dict[str, np.ndarray | None]:
    """The :data:`TOKEN_COLUMNS` of a manifest table (``pyarrow.Table``) as int64 arrays, None for
    a column it lacks (a manifest written by an older vlmpack: see :func:`tokens_by_kind`)."""
    return {col: (table.column(col).to_numpy(zero_copy_only=False).astype(np.int64)
                  if col in table.column_names else None) for col in TOKEN_COLUMNS.values()}


def tokens_by_kind(media_tokens: np.ndarray, kinds: np.ndarray,
                   columns: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """Media tokens of each sample per media kind, int ``[n]`` each (the dtype of ``media_tokens``:
    int32 from a manifest; sum them with ``dtype=np.int64``), keyed as :data:`MEDIA_KINDS`.

    ``media_tokens`` int ``[n]`` (tokens); ``kinds`` int ``[n]`` sample kinds (index into
    :data:`vlmpack.records.SAMPLE_KINDS`); ``columns``: column name of :data:`TOKEN_COLUMNS` ->
    int ``[n]`` (the part of ``media_tokens`` of the sample's items of that kind) or None / absent
    (a manifest written before the column existed: a sample *of that kind* gives it all its media
    tokens, as ``video_tokens`` did before it was recorded; no sample of a kind registered later
    exists in such a manifest). The first kind (image) gets the rest. Memory: the given columns
    are returned as they are (no copy); one new array for the rest (and one per kind not given)."""
    media = np.asarray(media_tokens)
    out: dict[str, np.ndarray] = {}
    for k, col in TOKEN_COLUMNS.items():
        given = columns.get(col)
        out[k] = (np.where(np.asarray(kinds) == SAMPLE_KINDS.index(k), media, 0).astype(media.dtype, copy=False)
                  if given is None else np.asarray(given))
    rest = media.copy()
    for part in out.values():  # each part <= media: no overflow in media's dtype
        np.subtract(rest, part, out=rest, casting="same_kind")
    return {MEDIA_KINDS[0]: rest, **out}
