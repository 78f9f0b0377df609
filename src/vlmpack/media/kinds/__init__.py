"""The media kinds: one module per kind (:mod:`~vlmpack.media.kinds.image`,
:mod:`~vlmpack.media.kinds.video`, :mod:`~vlmpack.media.kinds.audio`), each defining ``KIND``, a
:class:`MediaKind` (name, pack member tag, file extensions, header probe, training-side decoder),
and this registry of them.

A new kind (see CONTRIBUTING.md, "A new media kind"): its module here, its line in
:data:`KINDS`, its name in :data:`vlmpack.records.MediaKind`, and the token rule of each model
family that takes it (``media_tokens``, :mod:`vlmpack.models.base`).
"""

from __future__ import annotations

import re

from vlmpack.media.kinds import audio, image, video
from vlmpack.media.kinds.spec import MediaInfo, MediaKind

__all__ = ["KINDS", "MEDIA_TAGS", "PART_RE", "MediaInfo", "MediaKind", "kind_of_ext", "kind_of_part", "kind_spec",
           "tag_of"]

#: name -> kind, in registry order (the order of ``records.MediaKind``).
KINDS: dict[str, MediaKind] = {k.name: k for k in (
    image.KIND,
    video.KIND,
    audio.KIND,
)}

#: The pack member tags of all kinds (``("img", "vid", "aud")``), e.g. for ``str.startswith``.
MEDIA_TAGS: tuple[str, ...] = tuple(k.tag for k in KINDS.values())
#: A media member name of a pack: ``<tag><N>.<ext>`` (group 1 the tag, group 2 N).
PART_RE = re.compile(rf"({'|'.join(map(re.escape, MEDIA_TAGS))})(\d+)\.")

_BY_TAG = {k.tag: k for k in KINDS.values()}
_BY_EXT = {ext: k for k in KINDS.values() for ext in k.extensions}


def kind_spec(kind: str) -> MediaKind:
    """The registered :class:`MediaKind` named ``kind``; ``KeyError`` naming the known ones otherwise."""
    try:
        return KINDS[kind]
    except KeyError:
        raise KeyError(f"unknown media kind {kind!r} (known: {', '.join(KINDS)})") from None


def tag_of(kind: str) -> str:
    """The pack member tag of ``kind`` (``"image"`` -> ``"img"``)."""
    return kind_spec(kind).tag


def kind_of_part(part: str) -> str | None:
    """The kind of a pack member named ``<tag><N>.<ext>`` (``"vid3.mp4"`` -> ``"video"``), None
    for another member (``json``, ``input_ids.npy``)."""
    m = PART_RE.match(part)
    return _BY_TAG[m.group(1)].name if m else None


def kind_of_ext(ext: str) -> str | None:
    """The kind a file extension (any case, with or without its dot) is recognised as, or None."""
    k = _BY_EXT.get(ext.lower().lstrip("."))
    return k.name if k else None
