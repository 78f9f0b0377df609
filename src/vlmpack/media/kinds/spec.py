"""The two types every media kind entry (:mod:`vlmpack.media.kinds`) is written against:
:class:`MediaInfo` (what a probe returns) and :class:`MediaKind` (one entry of the registry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """Header facts of one media file: ``width``/``height`` in pixels as the model processor sees
    them (images: after EXIF orientation; videos: the decoded frame size), ``format`` (PIL name for
    images, the container's extension for videos: ``mp4``, ``webm``...), ``nbytes`` the file size
    in bytes; videos also ``duration_s`` (seconds), ``fps`` (average frames per second) and
    ``frames`` (see :mod:`vlmpack.media.video`), None for images."""

    width: int
    height: int
    format: str
    nbytes: int
    duration_s: float | None = None
    fps: float | None = None
    frames: int | None = None


#: ``probe(name, nbytes, check, data)``: header facts of the file at ``name`` (``data`` None: read it
#: through :func:`vlmpack.media.ref.open_ref`) or of the bytes ``data`` (``name`` then only labels
#: errors); ``check`` one of :data:`vlmpack.media.probe.CHECKS`. Raises
#: :class:`vlmpack.errors.MediaError` only.
Probe = Callable[[str, int, str, "bytes | None"], MediaInfo]


@dataclass(frozen=True, slots=True)
class MediaKind:
    """One media kind (one module of :mod:`vlmpack.media.kinds` defines it as ``KIND``).

    - ``name``: the kind as records, canonical messages and pack JSON spell it
      (``Media.kind``, ``{"type": name, ...}`` parts, ``"kind"`` of a pack's media list);
    - ``tag``: the prefix of its members in a pack (``<tag><N>.<ext>``, N counting over all kinds);
    - ``extensions``: the file extensions (lower case, no dot) a WebDataset input's member is
      recognised as this kind by (disjoint between kinds);
    - ``probe``: header facts at pack time (:data:`Probe`), dispatched by
      :func:`vlmpack.media.probe.probe_media` / :func:`~vlmpack.media.probe.probe_bytes`;
    - ``decode``: the training-side decoder of one item (its arguments are the kind's own: images
      ``decode(obj, where=) -> PIL RGB``, videos ``decode(obj, indices, where=) -> frames``);
    - ``check_stored``: ``check_stored(raw, name, where)`` decodes one stored item (``raw`` the
      bytes of the pack member ``name``) as the training side does and raises
      :class:`vlmpack.errors.MediaDecodeError`, one line starting with ``where``, when it does not
      (``vlmpack check``'s Energon pass);
    - ``probe_by_content``: a member of an input archive is probed once per distinct content
      (archives store a repeated image as another copy); False for kinds whose items are too
      large to hash on every reference (videos).

    The token rule is not here (media sits below the model families): each family's
    ``media_tokens`` answers per kind (:mod:`vlmpack.models.base`).
    """

    name: str
    tag: str
    extensions: tuple[str, ...]
    probe: Probe
    decode: Callable[..., Any]
    check_stored: Callable[[bytes, str, str], None]
    probe_by_content: bool = False
