"""Media probing: header facts of an image or video file (or bytes), with image checks at three
levels. References are resolved before, by :func:`vlmpack.media.resolve.resolve_ref`.

- :func:`probe_media` checks the file at validation time (:mod:`vlmpack.pack.validate`): with
  ``media_root`` given, its ``os.path.realpath`` (symlinks followed) must lie inside the media
  root's realpath unless ``allow_absolute_media`` (:func:`vlmpack.media.resolve.check_real_path`);
  then the file is opened with PIL restricted to
  :data:`vlmpack.media.image.IMAGE_FORMATS` and checked at the asked level; it returns a
  :class:`MediaInfo` (width/height after EXIF orientation, PIL format name, file size).
  Results are cached per ``(path, kind, check, size, mtime)`` within a process: many samples share
  images.
- :func:`probe_bytes`: the same for bytes in memory (not cached).

Both raise :class:`MediaError` (``reason`` is a code of :data:`vlmpack.records.REASONS`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import stat
import struct
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from vlmpack.errors import MediaError
from vlmpack.media.image import IMAGE_FORMATS, check_decodes, open_image_file
from vlmpack.media.ref import display_ref, is_member, open_ref, read_ref, ref_identity
from vlmpack.media.resolve import check_real_path, clear_realpaths

logger = logging.getLogger(__name__)

#: Check levels of :func:`probe_media`, cheapest first. ``verify`` (the default) and ``decode``
#: accept exactly the images the loader decodes; ``header`` only opens them.
CHECKS = ("header", "verify", "decode")

_ORIENTATION_TAG = 0x0112
_CACHE: dict[tuple, MediaInfo | MediaError] = {}
_CACHE_MAX = 1 << 18


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


def probe_media(
    path: str,
    kind: str = "image",
    check: str = "verify",
    *,
    media_root: str | None = None,
    allow_absolute_media: bool = False,
) -> MediaInfo:
    """Header facts of the media file at ``path`` (absolute, as from
    :func:`vlmpack.media.resolve.resolve_ref`).

    ``media_root``: when given and ``allow_absolute_media`` is false, ``os.path.realpath(path)``
    (every symlink followed) must lie inside ``os.path.realpath(media_root)`` (README: "a path
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
    (:func:`vlmpack.media.video.probe_video`: size, frame count, duration, fps; no decoding, except
    ``check="decode"``, which decodes every frame and requires the header's frame count).
    Width/height follow the EXIF orientation tag (5-8 swap them), as ``PIL.ImageOps.exif_transpose``
    (and transformers' ``load_image``) would. Cached per process.
    Raises :class:`MediaError`: ``media_outside_root`` (see ``media_root``), ``media_missing``
    (absent, a directory, unreadable), ``media_undecodable`` (empty, not an accepted format (the
    detail names what it is, e.g. "EPS is not an accepted image format"), truncated, corrupt),
    ``media_unsupported`` (more pixels than PIL's decompression-bomb limit). ``ValueError`` for an
    unknown ``check``.
    """
    if check not in CHECKS:
        raise ValueError(f"unknown media check {check!r}; use one of {', '.join(CHECKS)}")
    if is_member(path):  # a member of an input archive (read in place): no media-root rule
        return _probe_member(path, kind, check)
    if media_root is not None and not allow_absolute_media:
        check_real_path(path, media_root, kind)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise MediaError("media_missing", f"{kind} file not found: {path} ({_oneline(e)})") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise MediaError("media_missing", f"{kind} path is {what}: {path}")
    key = (path, kind, check, st.st_size, st.st_mtime_ns)
    hit = _CACHE.get(key)
    if hit is None:
        try:
            hit = _probe_video(path, st.st_size, check) if kind == "video" else _probe_image(path, st.st_size, check)
        except MediaError as e:
            hit = e
        _remember(key, hit)
    if isinstance(hit, MediaError):
        raise MediaError(hit.reason, hit.detail)
    return hit


def probe_bytes(data: bytes, kind: str = "image", check: str = "header", *, name: str = "<bytes>") -> MediaInfo:
    """:func:`probe_media` for bytes already in memory (e.g. a media part of a packed shard):
    width/height after EXIF orientation, format and size; ``name`` is used in error details.
    Not cached. Raises :class:`MediaError` like :func:`probe_media`."""
    if check not in CHECKS:
        raise ValueError(f"unknown media check {check!r}; use one of {', '.join(CHECKS)}")
    if kind == "video":
        return _probe_video(name, len(data), check, data)
    return _probe_image(name, len(data), check, data)


def _probe_member(ref: str, kind: str, check: str) -> MediaInfo:
    """:func:`probe_media` for a :mod:`vlmpack.media.ref` archive member (cached per archive mtime)."""
    try:
        size, mtime = ref_identity(ref)
    except (OSError, ValueError) as e:
        raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                         f"({_oneline(e)})") from None
    key = (ref, kind, check, size, mtime)
    hit = _CACHE.get(key)
    if hit is None and kind != "video":
        # archives store a repeated image as another copy: probe each distinct content once
        try:
            data = read_ref(ref)
        except (OSError, EOFError, ValueError) as e:
            raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                             f"({_oneline(e)})") from None
        ckey = ("content", kind, check, len(data), hashlib.blake2b(data, digest_size=16).digest())
        first = _CACHE.get(ckey)
        if first is None:
            try:
                first = (_probe_image(display_ref(ref), size, check, data), display_ref(ref))
            except MediaError as e:
                first = (e, display_ref(ref))
            _remember(ckey, first)
        hit, seen_as = first
        if isinstance(hit, MediaError):  # name this reference, not the first copy's
            hit = MediaError(hit.reason, hit.detail.replace(seen_as, display_ref(ref)))
    elif hit is None:
        try:
            hit = _probe_video(display_ref(ref), size, check, read_ref(ref))
        except (OSError, EOFError, ValueError) as e:
            raise MediaError("media_missing", f"{kind} not readable in its container: {display_ref(ref)} "
                             f"({_oneline(e)})") from None
        except MediaError as e:
            hit = e
    _remember(key, hit)
    if isinstance(hit, MediaError):
        raise MediaError(hit.reason, hit.detail)
    return hit


def _remember(key: tuple, value) -> None:
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = value


def clear_cache() -> None:
    """Forget all cached probe results and directory realpaths of this process (e.g. after files
    or symlinks changed in place)."""
    _CACHE.clear()
    clear_realpaths()


def _probe_video(path: str, nbytes: int, check: str, data: bytes | None = None) -> MediaInfo:
    """:func:`vlmpack.media.video.probe_video` of a file (``data`` None) or of bytes in memory."""
    from vlmpack.media.video import probe_video

    if nbytes == 0:
        raise MediaError("media_undecodable", f"video file is empty: {path}")
    if data is None and not os.access(path, os.R_OK):
        raise MediaError("media_missing", f"video not readable: {path}")
    try:
        h = probe_video(path if data is None else data, path, check)
    except MediaError:
        raise
    except Exception as e:  # noqa: BLE001 - FFmpeg/PyAV may raise anything on hostile bytes
        raise MediaError("media_undecodable",
                         f"video does not open: {type(e).__name__}: {_oneline(e)}: {path}") from None
    return MediaInfo(h.width, h.height, h.format, nbytes, h.duration_s, h.fps, h.frames)


def _probe_image(path: str, nbytes: int, check: str, data: bytes | None = None) -> MediaInfo:
    if nbytes == 0:
        raise MediaError("media_undecodable", f"image file is empty: {path}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with (open_ref(path) if data is None else io.BytesIO(data)) as fh, open_image_file(fh) as img:
                fmt = img.format or ""
                if fmt not in IMAGE_FORMATS:  # a plugin of OPEN_FORMATS that answered with another format
                    raise MediaError("media_undecodable", f"{fmt} is not an accepted image format: {path}")
                width, height = img.size
                orientation = _orientation(img, fh)
                if check != "header":
                    check_decodes(img, full=check == "decode")
    except MediaError:
        raise
    except Image.DecompressionBombError as e:
        raise MediaError("media_unsupported", f"image too large: {_oneline(e)}: {path}") from None
    except UnidentifiedImageError as e:
        raise MediaError("media_undecodable", f"{_oneline(e)}: {path}") from None
    except EOFError as e:  # a member past the end of a truncated archive
        raise MediaError("media_missing", f"{_oneline(e)}: {path}") from None
    except OSError as e:
        if not is_member(path) and not os.access(path, os.R_OK):
            raise MediaError("media_missing", f"image not readable: {path} ({_oneline(e)})") from None
        raise MediaError("media_undecodable", f"image does not decode: {_oneline(e)}: {path}") from None
    except Exception as e:  # noqa: BLE001 - PIL raises SyntaxError, ValueError, struct.error, zlib.error...
        raise MediaError(
            "media_undecodable", f"image does not decode: {type(e).__name__}: {_oneline(e)}: {path}"
        ) from None
    if width <= 0 or height <= 0:
        raise MediaError("media_undecodable", f"image has size {width}x{height}: {path}")
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    return MediaInfo(width, height, fmt, nbytes)


def _orientation(img: Image.Image, fh) -> int:
    """The EXIF orientation (1-8) PIL's ``exif_transpose`` would apply, without decoding pixels.

    PNG keeps EXIF in an ``eXIf`` chunk that may follow the image data; PIL's ``PngImageFile.getexif``
    would decode all pixels to reach it, so trailing chunk headers are walked here instead (seek only).
    """
    if img.format == "PNG" and "exif" not in img.info:
        pos = fh.tell()
        try:
            trailing = _png_trailing_exif(fh, img.tile[0][2] - 8 if img.tile else pos)
        finally:
            fh.seek(pos)
        if trailing is not None:
            img.info["exif"] = b"Exif\x00\x00" + trailing
        exif = Image.Image.getexif(img)  # base method: reads info only, never loads pixels
    else:
        exif = img.getexif()
    value = exif.get(_ORIENTATION_TAG, 1)
    return value if isinstance(value, int) else 1


def _png_trailing_exif(fh, start: int) -> bytes | None:
    """Payload of the first ``eXIf`` chunk at or after byte ``start`` (a chunk boundary), or None."""
    fh.seek(start)
    for _ in range(1 << 20):
        head = fh.read(8)
        if len(head) < 8:
            return None
        length, cid = struct.unpack(">I4s", head)
        if cid == b"eXIf":
            data = fh.read(length)
            return data if len(data) == length else None
        if cid == b"IEND":
            return None
        fh.seek(length + 4, os.SEEK_CUR)
    return None


def _oneline(value: object) -> str:
    return " ".join(str(value).split())
