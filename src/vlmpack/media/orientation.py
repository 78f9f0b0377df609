"""The size an image has after the training decoder's EXIF orientation, read without decoding pixels.

The training decoder (:func:`vlmpack.media.kinds.image.open_image`, as transformers' ``load_image``)
runs ``img.load()`` then ``PIL.ImageOps.exif_transpose(img)``. In Pillow 13.0 (the version pinned by
the venv; the rule is restated from its source) that is:

1. ``load()`` decodes the pixels and, per format, may change what the image knows:

   - **PNG** (``PngImagePlugin.PngImageFile.load_end``): after the image data, every chunk up to
     ``IEND`` (an animated PNG: up to the next ``fcTL``) goes through the same ``PngStream`` chunk
     handlers as the header did, so an ``eXIf``, a ``tEXt``/``zTXt``/``iTXt`` ``Raw profile type
     exif`` (ImageMagick) or an XMP packet (``XML:com.adobe.xmp``) placed after ``IDAT`` lands in
     ``img.info`` only then; a second ``eXIf`` *replaces* the first (``chunk_eXIf`` assigns
     ``info["exif"]``). The walk stops early at a chunk header that does not parse
     (``struct.error``/``SyntaxError``) and at a ``UnicodeDecodeError`` of a handler.
   - **TIFF** (``TiffImagePlugin``): ``_setup`` already reports ``size`` swapped when tag 274 is 5-8;
     ``load_end`` transposes the pixels in place by ``getexif()`` (``exif_transpose(in_place=True)``)
     and removes the orientation, so the decoder's own ``exif_transpose`` finds none. The pixels are
     stored ``tag_v2[256] x tag_v2[257]`` (``_tile_size``).
   - JPEG/MPO, WebP, GIF, BMP: ``load()`` adds nothing to ``info``; EXIF and XMP are header data.

2. ``exif_transpose`` takes ``getexif().get(274, 1)`` and swaps width/height for 5-8.
   ``Image.getexif`` reads ``info["exif"]``, else ``info["Raw profile type exif"]`` (hex), else a
   TIFF's own IFD; when that has no tag 274, the first ``tiff:Orientation="N"`` /
   ``<tiff:Orientation>N`` of ``info["XML:com.adobe.xmp"]`` (or ``info["xmp"]``).

:func:`oriented_size` gives the same answer from the header: PNG chunks after ``IDAT`` are walked
with a copy of the image's own ``PngStream`` (Pillow's chunk handlers, the loop of ``load_end``;
``IDAT``/``fdAT`` payloads are skipped by seeking, never inflated, and the image's own stream and
``info`` are left untouched for the decode check that may follow), then ``Image.Image.getexif``
runs on that complete ``info`` (the base method: ``PngImageFile.getexif`` would ``load()``). Cost:
one pass over the chunk headers after the first ``IDAT`` (8 bytes read + a seek per chunk), plus
reading the non-image chunks there (as ``load()`` reads them). ``tests/test_orientation.py`` checks
it against ``exif_transpose`` on every placement.
"""

from __future__ import annotations

import copy
import struct

from PIL import ExifTags, Image, ImageFile

from vlmpack.errors import MediaError

_ORIENTATION = ExifTags.Base.Orientation  # 274
_SWAPS = (5, 6, 7, 8)  # TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90 in exif_transpose
#: Most chunks walked after a PNG's image data (about 3 us each, as load_end's own walk): 8 KiB IDAT
#: chunks (libpng's default) of a file at the 2 GiB media cap are 262,144; more is a crafted file.
MAX_PNG_CHUNKS = 1 << 22


def oriented_size(img: ImageFile.ImageFile) -> tuple[int, int]:
    """``ImageOps.exif_transpose(img after load()).size`` without decoding (module docstring).

    ``img``: just opened (not loaded) by :func:`vlmpack.media.image.open_image_file`; its file is
    left at the position it had (PNG; a TIFF's ``getexif()`` reads its IFD). Returns
    ``(width, height)`` in pixels. Raises what ``getexif()`` raises on EXIF that does not parse
    (the decoder's ``exif_transpose`` fails on it too); chunk handlers that fail after ``IDAT``
    (``load()`` fails too, the decode check sees it) only end the walk. :class:`MediaError`
    ``media_unsupported`` for a PNG with more than :data:`MAX_PNG_CHUNKS` chunks after its image
    data (rejected rather than probed short of where the decoder reads).
    """
    if img.format == "TIFF":  # Pillow's size already has tag 274 applied; load() applies getexif()
        width, height = img.tag_v2[256], img.tag_v2[257]
    else:
        width, height = img.size
    return (height, width) if orientation(img) in _SWAPS else (width, height)


def orientation(img: ImageFile.ImageFile) -> int:
    """The EXIF orientation (1-8; 1 when absent or not an int) ``exif_transpose`` reads after
    ``load()`` (for TIFF, the one ``load()`` itself applies). ``img`` as in :func:`oriented_size`."""
    if img.format == "PNG" and getattr(img, "png", None) is not None:  # not loaded: its chunk stream is open
        exif = _png_exif(img)
    else:
        exif = img.getexif()
    value = exif.get(_ORIENTATION, 1)
    return value if isinstance(value, int) else 1


def _png_exif(img: ImageFile.ImageFile) -> Image.Exif:
    """``getexif()`` of a PNG as it is after ``load()``: ``info`` completed by the chunks after the
    image data (``PngImageFile.load_end``'s loop on a copy of ``img.png``), pixels never read."""
    stream = copy.copy(img.png)  # its queue of pushed-back chunks is empty after _open and never pushed here
    stream.im_info = dict(img.info)
    stream.im_text = dict(img.png.im_text)
    animated = getattr(img, "is_animated", False)
    fh = stream.fp  # the file the image was opened from
    pos = fh.tell()
    try:
        if img.tile:
            fh.seek(img.tile[0][2] - 8)  # the first IDAT chunk's header
        for _ in range(MAX_PNG_CHUNKS):
            try:
                cid, start, length = stream.read()
            except (struct.error, SyntaxError):
                break
            if cid == b"IEND" or (cid == b"fcTL" and animated):
                break
            try:
                stream.call(cid, start, length)
            except (EOFError, AttributeError):  # image data or an unknown chunk: skipped, not read
                fh.seek(start + length)
            except Exception:  # noqa: BLE001 - UnicodeDecodeError ends load_end's walk; others fail load()
                break
            fh.read(4)  # CRC (load_end does not check it)
        else:
            raise MediaError("media_unsupported", f"PNG with more than {MAX_PNG_CHUNKS:,} chunks after its "
                             "image data (its EXIF orientation is not read that far)")
    finally:
        fh.seek(pos)
    shown = Image.Image()
    shown.info = stream.im_info
    return Image.Image.getexif(shown)
