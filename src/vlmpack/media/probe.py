"""Media probing: header facts of an image or video file (or bytes), with image checks at three
levels. References are resolved before, by :func:`vlmpack.media.resolve.resolve_ref`. The probe
of each kind is its entry's ``probe`` in :mod:`vlmpack.media.kinds` (images:
:func:`vlmpack.media.kinds.image.probe_image`, videos:
:func:`vlmpack.media.kinds.video.probe_video_info`); this module adds the media-root rule, the
checks of the path and the cache.

- :func:`probe_media` checks the file at validation time (:mod:`vlmpack.pack.validate`): with
  ``media_root`` given, its ``os.path.realpath`` (symlinks followed) must lie inside the media
  root's realpath unless ``allow_absolute_media`` (:func:`vlmpack.media.resolve.check_real_path`);
  then the file is opened with PIL restricted to
  :data:`vlmpack.media.image.IMAGE_FORMATS` and checked at the asked level; it returns a
  :class:`MediaInfo` (width/height after EXIF orientation, PIL format name, file size).
  Results are cached per ``(path, kind, check, size, mtime, ctime, inode)`` within a process: many
  samples share images, and a file replaced in place (same size and mtime) is probed again.
- :func:`probe_bytes`: the same for bytes in memory (not cached).

Both raise :class:`MediaError` (``reason`` is a code of :data:`vlmpack.records.REASONS`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat

from vlmpack.errors import MediaError
from vlmpack.media.check_table import CheckTable, close_tables
from vlmpack.media.fingerprint import fingerprint, holder_stat, unchanged
from vlmpack.media.kinds import KINDS, MediaInfo, MediaKind
from vlmpack.media.ref import display_ref, is_member, read_ref, ref_identity
from vlmpack.media.resolve import check_real_path, clear_realpaths
from vlmpack.records import MAX_MEDIA_BYTES

logger = logging.getLogger(__name__)

#: Check levels of :func:`probe_media`, cheapest first. ``verify`` (the default) and ``decode``
#: accept exactly the images the loader decodes; ``header`` only opens them.
CHECKS = ("header", "verify", "decode")

_CACHE: dict[tuple, MediaInfo | MediaError] = {}
_CACHE_MAX = 1 << 18


def _spec(kind: str) -> MediaKind:
    """The registered kind that probes ``kind``; a name outside :data:`vlmpack.media.kinds.KINDS`
    probes as an image (as before the registry: only ``"video"`` was told apart)."""
    return KINDS.get(kind) or KINDS["image"]


def probe_media(
    path: str,
    kind: str = "image",
    check: str = "verify",
    *,
    media_root: str | None = None,
    allow_absolute_media: bool = False,
    max_bytes: int | None = MAX_MEDIA_BYTES,
    table: CheckTable | None = None,
) -> MediaInfo:
    """Header facts of the media file at ``path`` (absolute, as from
    :func:`vlmpack.media.resolve.resolve_ref`).

    ``media_root``: when given and ``allow_absolute_media`` is false, ``os.path.realpath(path)``
    (every symlink followed) must lie inside ``os.path.realpath(media_root)`` (docs/pack.md: "a path
    resolving outside it is rejected"; :func:`vlmpack.media.resolve.check_real_path`); ``None``
    skips this rule (the lexical rule of :func:`vlmpack.media.resolve.resolve_ref` still applied at
    parse time). Checked before anything else; only directory realpaths are cached.
    ``check`` (images; PIL opens only :data:`~vlmpack.media.image.IMAGE_FORMATS`):

    - ``"header"``: open and read the header only;
    - ``"verify"`` (default): accepts exactly the images the training loader decodes (PIL
      ``Image.open`` + ``load()``), by the cheapest equivalent check per format
      (:func:`vlmpack.media.image.check_decodes`: PNG inflate + row filter bytes, JPEG 1/8-scale
      decode, full decode otherwise);
    - ``"decode"``: a full ``load()`` (the same verdicts, slower).

    Videos (``kind="video"``): the container header is read with PyAV
    (:func:`vlmpack.media.video.probe_video`: size, frame count, duration, fps); ``"verify"`` and
    ``"decode"`` also decode every frame and require the header's frame count, ``"header"`` decodes none.
    Width/height are the size after the EXIF orientation the training decoder applies (``load()`` then
    ``PIL.ImageOps.exif_transpose``, as transformers' ``load_image``), wherever the file keeps it
    (:func:`vlmpack.media.orientation.oriented_size`: PNG chunks after the image data, XMP, TIFF
    tags), without decoding pixels. Cached per process, and across processes and runs in ``table``
    (:mod:`vlmpack.media.check_table`: the facts of an accepted item by the sha256 of its bytes).
    Raises :class:`MediaError`: ``media_outside_root`` (see ``media_root``), ``media_missing``
    (absent, a directory, unreadable), ``media_undecodable`` (empty, not an accepted format (the
    detail names what it is, e.g. "EPS is not an accepted image format"), truncated, corrupt),
    ``media_unsupported`` (more pixels than PIL's decompression-bomb limit), ``media_too_large``
    (more than ``max_bytes`` bytes, ``--max-media-bytes``, default
    :data:`vlmpack.records.MAX_MEDIA_BYTES`: told from the file's or member's size, nothing read;
    ``None``: no cap). ``ValueError`` for an unknown ``check``.
    """
    if check not in CHECKS:
        raise ValueError(f"unknown media check {check!r}; use one of {', '.join(CHECKS)}")
    if is_member(path):  # a member of an input archive (read in place): no media-root rule
        return _probe_member(path, kind, check, max_bytes, table)
    if media_root is not None and not allow_absolute_media:
        check_real_path(path, media_root, kind)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise MediaError("media_missing", f"{kind} file not found: {path} ({_oneline(e)})") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise MediaError("media_missing", f"{kind} path is {what}: {path}")
    _check_size(path, kind, st.st_size, max_bytes)
    key = (path, kind, check, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _probe_file(path, kind, check, st.st_size, table)
        _remember(key, hit)
    if isinstance(hit, MediaError):
        raise MediaError(hit.reason, hit.detail)
    return hit


def _probe_file(path: str, kind: str, check: str, size: int, table: CheckTable | None) -> MediaInfo | MediaError:
    """The probe of the file at ``path`` (``size`` bytes), or its :class:`MediaError`: taken from
    ``table`` when its bytes were accepted before, else probed (and kept in ``table`` if accepted and
    the file still holds the bytes hashed before the probe)."""
    fp = None
    if table is not None:
        try:
            fp = fingerprint(path)
        except (OSError, EOFError, ValueError, MediaError):
            fp = None  # unreadable now: the probe says why
        known = table.get(fp.sha256, kind, check) if fp is not None else None
        if known is not None:
            return known
    try:
        info = _spec(kind).probe(path, size, check, None)
    except MediaError as e:
        return e
    if fp is not None and table is not None and unchanged(fp):  # not replaced while probed (stat, else hash)
        table.put(fp.sha256, kind, check, info)
    return info


def probe_bytes(data: bytes, kind: str = "image", check: str = "header", *, name: str = "<bytes>") -> MediaInfo:
    """:func:`probe_media` for bytes already in memory (e.g. a media part of a packed shard):
    width/height after EXIF orientation, format and size; ``name`` is used in error details.
    Not cached. Raises :class:`MediaError` like :func:`probe_media`."""
    if check not in CHECKS:
        raise ValueError(f"unknown media check {check!r}; use one of {', '.join(CHECKS)}")
    return _spec(kind).probe(name, len(data), check, data)


def _probe_member(ref: str, kind: str, check: str, max_bytes: int | None, table: CheckTable | None) -> MediaInfo:
    """:func:`probe_media` for a :mod:`vlmpack.media.ref` archive member (cached per the stat of its
    container: size, mtime, ctime, inode; by content in ``table``)."""
    try:
        size, _ = ref_identity(ref)
        key = (ref, kind, check, size, holder_stat(ref))
    except (OSError, ValueError) as e:
        raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                         f"({_oneline(e)})") from None
    _check_size(display_ref(ref), kind, size, max_bytes)
    hit = _CACHE.get(key)
    spec = _spec(kind)
    if hit is None and spec.probe_by_content:
        # archives store a repeated image as another copy: probe each distinct content once
        try:
            data = read_ref(ref)
        except (OSError, EOFError, ValueError) as e:
            raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                             f"({_oneline(e)})") from None
        ckey = ("content", kind, check, len(data), hashlib.blake2b(data, digest_size=16).digest())
        first = _CACHE.get(ckey)
        if first is None:
            sha = hashlib.sha256(data).hexdigest() if table is not None else ""
            known = table.get(sha, kind, check) if table is not None else None
            try:
                first = (known or spec.probe(display_ref(ref), size, check, data), display_ref(ref))
                if known is None and table is not None:
                    table.put(sha, kind, check, first[0])
            except MediaError as e:
                first = (e, display_ref(ref))
            _remember(ckey, first)
        hit, seen_as = first
        if isinstance(hit, MediaError):  # name this reference, not the first copy's
            hit = MediaError(hit.reason, hit.detail.replace(seen_as, display_ref(ref)))
    elif hit is None:
        try:
            hit = spec.probe(display_ref(ref), size, check, read_ref(ref))
        except (OSError, EOFError, ValueError) as e:
            raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                             f"({_oneline(e)})") from None
        except MediaError as e:
            hit = e
    _remember(key, hit)
    if isinstance(hit, MediaError):
        raise MediaError(hit.reason, hit.detail)
    return hit


def _check_size(where: str, kind: str, size: int, max_bytes: int | None) -> None:
    """``media_too_large`` for an item of more than ``max_bytes`` bytes (``None``: no cap)."""
    if max_bytes is not None and size > max_bytes:
        raise MediaError("media_too_large", f"{kind} {where} is {size:,} bytes, more than --max-media-bytes "
                         f"{max_bytes:,}; not read (raise the option to pack it)")


def _remember(key: tuple, value) -> None:
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = value


def clear_cache() -> None:
    """Forget all cached probe results and directory realpaths of this process (e.g. after files
    or symlinks changed in place), and close its media check tables (opened again on next use)."""
    _CACHE.clear()
    close_tables()
    clear_realpaths()


def _oneline(value: object) -> str:
    return " ".join(str(value).split())
