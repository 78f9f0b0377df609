"""The image kind: PNG, JPEG, WebP, GIF, BMP, TIFF files (:data:`vlmpack.media.image.IMAGE_FORMATS`),
packed as ``img<N>.<ext>`` members. Probe: :func:`probe_image` (PIL header + the decodability check
of :mod:`vlmpack.media.image`, size after EXIF orientation as the decoder applies it:
:func:`vlmpack.media.orientation.oriented_size`); decoder: :func:`open_image` (PIL, as
transformers' ``load_image``; re-exported by :mod:`vlmpack.train.encode`)."""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from vlmpack.errors import ConfigError, MediaDecodeError, MediaError
from vlmpack.media.image import IMAGE_FORMATS, check_decodes, open_image_file
from vlmpack.media.kinds.spec import MediaInfo, MediaKind
from vlmpack.media.orientation import oriented_size
from vlmpack.media.ref import is_member, open_ref


def probe_image(path: str, nbytes: int, check: str, data: bytes | None = None) -> MediaInfo:
    if nbytes == 0:
        raise MediaError("media_undecodable", f"image file is empty: {path}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with (open_ref(path) if data is None else io.BytesIO(data)) as fh, open_image_file(fh) as img:
                fmt = img.format or ""
                if fmt not in IMAGE_FORMATS:  # a plugin of OPEN_FORMATS that answered with another format
                    raise MediaError("media_undecodable", f"{fmt} is not an accepted image format: {path}")
                width, height = oriented_size(img)
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
    return MediaInfo(width, height, fmt, nbytes)


def open_image(obj: Any, *, where: str = "") -> Image.Image:
    """A PIL RGB image as transformers' ``load_image`` gives it (EXIF orientation applied).

    obj: raw bytes (what the vlmpack sample loader passes on when Energon's decoder is off), a
    path, or a PIL image. Bytes and paths are opened with ``formats=``
    :data:`vlmpack.media.image.OPEN_FORMATS` (PIL never tries EPS/PS, which would run Ghostscript)
    and fully decoded here (``load()``, ``LOAD_TRUNCATED_IMAGES`` as the process has it, PIL's
    default False); ``where`` (e.g. ``"pack 'pack000000012' sample 'x1' part img3.png"``) starts
    every error message.
    Raises :class:`MediaDecodeError` (one line: ``where``, the PIL error) when the image is missing,
    not of an accepted format, truncated or corrupt, and :class:`ConfigError` for a decoded tensor
    (the TaskEncoder must leave images undecoded or use ``SampleDecoder(image_decode="pil")``) or
    another type.
    """
    if isinstance(obj, (bytes, bytearray, memoryview)):
        src = io.BytesIO(bytes(obj))
    elif isinstance(obj, (str, Path)):
        src = str(obj)
    elif isinstance(obj, Image.Image):
        src = None
        fmt = getattr(obj, "format", None)
        if fmt and fmt not in IMAGE_FORMATS and getattr(obj, "tile", None):  # not decoded yet: never load it
            raise MediaDecodeError(f"{where}: image does not decode: {fmt} is not an accepted image format "
                                   f"({', '.join(IMAGE_FORMATS)}); re-pack with vlmpack's media check")
    else:
        raise ConfigError(f"{where}: media of type {type(obj).__name__} cannot be used; pass raw bytes or decode "
                          "media as PIL (SampleDecoder(image_decode='pil'))")
    try:
        img = obj if src is None else open_image_file(src)
        img.load()
        img = ImageOps.exif_transpose(img)
        return img.convert("RGB")
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError, struct.error...
        raise MediaDecodeError(_undecodable(where, e)) from None


def _undecodable(where: str, e: Exception) -> str:
    """The one-line message of an image that does not decode."""
    detail = " ".join(str(e).split()) or type(e).__name__
    return (f"{where}: image does not decode ({type(e).__name__}: {detail}); the shard or file is corrupt or "
            "changed after packing: re-pack it (vlmpack pack checks that every image decodes)")


def check_stored_image(raw: bytes, name: str, where: str) -> None:
    """:func:`open_image`'s verdict on a stored image (``vlmpack check``'s decode of each distinct
    member), without decoding its pixels: the loader's steps with ``load()`` replaced by
    :func:`vlmpack.media.image.check_decodes` (the count stage's media check: the verdict of
    ``load()`` at a fraction of its cost), then the EXIF transpose (in place: Pillow's
    ``exif_transpose(in_place=True)``, the same calls without a copy) and the conversion to RGB of
    an image of another mode, on a one-pixel crop (which keeps the mode, the palette and the info
    that a conversion's outcome depends on; PIL's ``convert`` to an image's own mode is ``load()``
    and a copy).
    Raises :class:`MediaDecodeError` (one line starting with ``where``, which names the member;
    ``name`` is not needed) exactly where :func:`open_image` raises, on every file of the
    corrupt-image corpus (``tests/test_media_integrity.py``; the message may name PIL's error
    otherwise). On the demo output: the gate's decode ~2.5 -> ~0.6 CPU-s."""
    try:
        img = open_image_file(io.BytesIO(raw))
        check_decodes(img)
        ImageOps.exif_transpose(img, in_place=True)
        if img.mode != "RGB":
            img.crop((0, 0, 1, 1)).convert("RGB")
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError, struct.error...
        raise MediaDecodeError(_undecodable(where, e)) from None


def _oneline(value: object) -> str:
    return " ".join(str(value).split())


KIND = MediaKind(
    name="image",
    tag="img",
    extensions=("png", "jpg", "jpeg", "webp", "gif", "bmp", "tif", "tiff"),
    probe=probe_image,
    decode=open_image,
    check_stored=check_stored_image,
    probe_by_content=True,
)
