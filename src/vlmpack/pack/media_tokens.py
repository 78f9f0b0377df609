"""Media tokens per media kind: a sample's image tokens count as image, its video tokens as video.

The count stage records per sample its ``media_tokens`` (all items) and ``video_tokens`` (its
videos' part; manifest column, :mod:`vlmpack.pack.manifest`); the report, ``vlmpack plan`` and the
report figures split them with :func:`tokens_by_kind`.
"""

from __future__ import annotations

import numpy as np

from vlmpack.media.kinds import KINDS
from vlmpack.records import SAMPLE_KINDS

#: The media kinds whose tokens are shown apart (``image``, ``video``: :data:`vlmpack.media.kinds.KINDS`).
MEDIA_KINDS = tuple(KINDS)


def tokens_by_kind(media_tokens: np.ndarray, kinds: np.ndarray,
                   video_tokens: np.ndarray | None) -> dict[str, np.ndarray]:
    """Media tokens of each sample per media kind, int64 ``[n]`` each, keyed as :data:`MEDIA_KINDS`.

    ``media_tokens``, ``video_tokens`` int ``[n]`` (tokens); ``kinds`` int ``[n]`` sample kinds
    (index into :data:`vlmpack.records.SAMPLE_KINDS`). ``video_tokens`` None (a manifest written by
    an older vlmpack, without the column): a video sample's media tokens all count as video."""
    media = np.asarray(media_tokens, dtype=np.int64)
    if video_tokens is None:
        video = np.where(np.asarray(kinds) == SAMPLE_KINDS.index("video"), media, 0)
    else:
        video = np.asarray(video_tokens, dtype=np.int64)
    return {"image": media - video, "video": video}
