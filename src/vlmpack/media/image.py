"""Which image files the training loader can decode: an allowlist of formats and the cheapest
check that is equivalent to a full decode.

The loader's decoder is PIL as Energon's image handler and :func:`vlmpack.train.encode.open_image`
use it: ``Image.open`` then ``load()``, with ``ImageFile.LOAD_TRUNCATED_IMAGES`` False (PIL's
default). :func:`open_image_file` opens with ``formats=OPEN_FORMATS`` so that PIL never tries
another plugin (EPS/PS would run Ghostscript, a data file must never start a program).
:func:`check_decodes` then runs, per format, the cheapest check proven to give the same verdict
as ``load()`` (``tests/test_media_integrity.py`` checks this on a corpus of cut and bit-flipped
real images of every accepted format; ``bench/bench_pack.py`` measures the cost):

- **PNG** (not animated): PIL's own ``load()`` runs (chunk walk, truncation handling, the chunks
  after the image data), with the ``zip`` decoder swapped for :class:`_PngRowsCheck`, a copy of
  the decisions of Pillow's ``libImaging/ZipDecode.c``: inflate the IDAT stream with zlib, every
  complete row's filter byte must be 0-4, rows as IHDR implies (Adam7: the 7 passes, empty
  passes skipped); done when all rows are there, or when the zlib stream ends exactly at a row
  boundary within one ``decode`` call (ZipDecode accepts that too). It skips the unfiltering and
  the pixel unpacking; zlib inflate is most of the remaining cost. The inflate is zlib-ng's (the
  ``zlib-ng`` package's ``zlib_ng`` module, zlib's API): the library Pillow's own wheels decode PNG
  with (``PIL.features.pilinfo()``: "compiled for zlib-ng"), about 3x the standard library's zlib on
  the demo PNGs.
- **JPEG / MPO**: ``draft()`` to 1/8 scale, then ``load()``: libjpeg still parses every marker and
  entropy-decodes every scan to its end (so a cut file still runs out of data), it only skips
  most of the inverse DCT and the upsampling.
- **GIF, WebP, BMP, TIFF, animated PNG**: a full ``load()`` (rare; exact by definition).

Errors: PIL's own (``OSError``, ``SyntaxError``, ``ValueError``, ``zlib.error`` ...); callers map
them to reason codes.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import IO

import numpy as np
from PIL import Image, ImageFile, PngImagePlugin, UnidentifiedImageError
from zlib_ng import zlib_ng as zlib  # the inflate of Pillow's wheels (module doc); the stdlib zlib's API

#: PIL plugins tried by :func:`open_image_file` (``Image.open(..., formats=OPEN_FORMATS)``).
OPEN_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
#: Accepted values of ``img.format`` (MPO = multi-picture JPEG, opened by the JPEG plugin).
IMAGE_FORMATS = OPEN_FORMATS + ("MPO",)

_PNG_CHECK = "vlmpack_png_rows_check"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel (PNG spec 11.2.2)
#: PIL's PNG raw mode -> bits per pixel (``PngImagePlugin._MODES``: (bit depth, colour type) -> modes).
_PNG_BITS = {raw: depth * _CHANNELS[ctype] for (depth, ctype), (_, raw) in PngImagePlugin._MODES.items()}
# Adam7 passes as ZipDecode.c walks them (PNG spec 8.2)
_OFFSET = (7, 3, 3, 1, 1, 0, 0)
_START_ROW = (0, 0, 4, 0, 2, 0, 1)
_COL_STEP = (8, 8, 4, 4, 2, 2, 1)
_ROW_STEP = (8, 8, 8, 4, 4, 2, 2)
_INT_MAX = 2**31 - 1


def open_image_file(fp: str | IO[bytes]) -> ImageFile.ImageFile:
    """``Image.open(fp, formats=OPEN_FORMATS)`` (lazy, header only).

    Raises :class:`PIL.UnidentifiedImageError` whose message names what the data looks like
    (:func:`sniff_format`) when no accepted plugin opens it, e.g. ``EPS is not an accepted image
    format``; any other PIL error as is.
    """
    try:
        return Image.open(fp, formats=OPEN_FORMATS)
    except UnidentifiedImageError:
        head = b""
        if isinstance(fp, str):
            with open(fp, "rb") as fh:
                head = fh.read(512)
        elif hasattr(fp, "seek"):
            fp.seek(0)
            head = fp.read(512)
        kind = sniff_format(head)
        if kind in IMAGE_FORMATS:
            msg = f"{kind} data whose header does not parse"
        elif kind == "text":
            msg = f"a text file, not an image (accepted formats: {', '.join(IMAGE_FORMATS)})"
        elif kind:
            msg = f"{kind} is not an accepted image format (accepted: {', '.join(IMAGE_FORMATS)})"
        else:
            msg = f"not an image in an accepted format ({', '.join(IMAGE_FORMATS)})"
        raise UnidentifiedImageError(msg) from None


def sniff_format(head: bytes) -> str:
    """What the first bytes of a file look like: a PIL format name (from the plugins' own prefix
    tests, which read no more than ``head``), ``PDF``, ``SVG``, ``text``, or ``""`` if unknown.
    Never opens the data with a plugin."""
    if head.startswith(b"%PDF"):
        return "PDF"
    low = head.lstrip()[:512].lower()
    if low.startswith(b"<svg") or (low.startswith(b"<?xml") and b"<svg" in low):
        return "SVG"
    Image.init()
    for fmt in Image.ID:
        accept = Image.OPEN[fmt][1]
        try:
            if accept is not None and head and accept(head[:16]):
                return fmt
        except Exception:  # noqa: BLE001, S112 - a prefix test that cannot judge 16 bytes says nothing
            continue
    if head and all(b in b"\t\n\r" or 32 <= b < 127 or b >= 128 for b in head):
        return "text"
    return ""


def check_decodes(img: ImageFile.ImageFile, *, full: bool = False) -> None:
    """Raise what ``img.load()`` would raise, at the cost listed in the module docstring
    (``full=True``: a plain ``load()``, the same verdict at full cost).

    ``img`` comes from :func:`open_image_file` and is consumed (its pixels are not usable after a
    PNG or JPEG check). Take its ``size``/EXIF before calling this.
    """
    with _strict():
        if full:
            pass
        elif img.format == "PNG" and _use_png_rows_check(img):
            tile = img.tile[0]
            bits = _PNG_BITS[tile.args]
            img.tile = [tile._replace(codec_name=_PNG_CHECK, args=(bits, 1 if img.info.get("interlace") else 0))]
        elif img.format in ("JPEG", "MPO"):
            img.draft(img.mode, (1, 1))
        img.load()


def _use_png_rows_check(img: ImageFile.ImageFile) -> bool:
    tile = img.tile
    if len(tile) != 1 or tile[0].codec_name != "zip" or not isinstance(tile[0].args, str):
        return False
    if getattr(getattr(img, "png", None), "im_n_frames", None) is not None:  # APNG: PIL's frame logic
        return False
    bits = _PNG_BITS.get(tile[0].args)
    width, height = img.size
    # ZipDecode's int arithmetic; anything near its limits (or empty) takes the real decoder
    return bits is not None and 0 < width < (_INT_MAX // 64) - 7 and height > 0


@contextmanager
def _strict():
    """Run with ``LOAD_TRUNCATED_IMAGES`` False, as the loader does (restored afterwards)."""
    old = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = old


def png_row_segments(width: int, height: int, bits: int, interlaced: bool) -> list[tuple[int, int, int]]:
    """The filtered rows of a PNG image stream as ``(start byte, row bytes incl. filter byte,
    rows)`` per pass, in stream order (one segment if not interlaced; Adam7 passes whose rows are
    empty are left out, as ZipDecode.c's ``get_row_len`` loop does)."""
    if not interlaced:
        return [(0, (width * bits + 7) // 8 + 1, height)]
    out, pos = [], 0
    for p in range(7):
        row = ((width + _OFFSET[p]) // _COL_STEP[p] * bits + 7) // 8
        rows = 0 if _START_ROW[p] >= height else (height - _START_ROW[p] + _ROW_STEP[p] - 1) // _ROW_STEP[p]
        if p and (row <= 0 or rows == 0):  # ZipDecode always starts pass 0
            continue
        out.append((pos, row + 1, rows))
        pos += (row + 1) * rows
    return out


class _PngRowsCheck(ImageFile.PyDecoder):
    """Drop-in for PIL's ``zip`` decoder of a PNG that decides like ``ZipDecode.c`` and writes no
    pixels. Args: ``(bits per pixel, interlaced)`` (+ PIL's decoder config, ignored).

    ``decode`` returns ``(len(buffer), 0)`` for more data, ``(-1, 0)`` when done, ``(-1, -2)`` for
    a zlib error (PIL: "broken data stream") and ``(-1, -3)`` for a filter byte above 4 (PIL:
    "unrecognized data stream contents"). It gets the same buffers as ZipDecode (PIL's
    ``ImageFile.load`` loop) and follows its calls where they matter: ZipDecode inflates one row
    per call and only while input is left, so output that zlib could still give after the
    buffer's last byte was consumed waits for the next buffer (at the end of the file: "image file
    is truncated"). Hence: inflate the buffer but its last byte at once, never up to the image's
    last byte, then the rest row by row exactly as ZipDecode does.
    """

    def init(self, args: tuple) -> None:
        self.args = args
        self._z = None

    def decode(self, buffer: bytes) -> tuple[int, int]:
        if self._z is None:
            self._segs = png_row_segments(self.state.xsize, self.state.ysize, self.args[0], bool(self.args[1]))
            self._total = sum(row * n for _, row, n in self._segs)
            self._z = zlib.decompressobj()
            self._done = 0
        data, z, start = bytes(buffer), self._z, self._done
        try:
            tail = data
            if len(data) > 1 and self._total - self._done > 1:  # ZipDecode would still be looping
                out = z.decompress(data[:-1], self._total - self._done - 1)
                if self._produced(out):
                    return -1, -3
                if z.eof:
                    return (-1, 0) if self._ends_image(start) else (len(data), 0)
                tail = z.unconsumed_tail + data[-1:]
            while tail:  # ZipDecode.c's loop: one row per inflate call while input is left
                want = self._row_stop(self._done) - self._done
                out = z.decompress(tail, want)
                if self._produced(out):
                    return -1, -3
                if z.eof:
                    return (-1, 0) if self._ends_image(start) else (len(data), 0)
                if len(out) < want:  # input used up
                    break
                if self._done == self._total:
                    return -1, 0
                tail = z.unconsumed_tail
        except zlib.error:
            return -1, -2
        return len(data), 0

    def _ends_image(self, start: int) -> bool:
        """The zlib stream ended in this call (``start``: output position when it began). ZipDecode
        ends the image when the inflate call that completed a row saw Z_STREAM_END: the stream's
        last output byte came in this call and ends a row. Otherwise it waits for data that never
        comes ("image file is truncated")."""
        return self._done > start and self._row_end(self._done)

    def _produced(self, out: bytes) -> bool:
        """Account for ``out``; True if a filter byte in it is above 4. ZipDecode judges a row once
        it is complete; a row whose filter byte was produced can no longer end the image early, so
        it fails either way."""
        start, end = self._done, self._done + len(out)
        self._done = end
        if not out:
            return False
        arr = np.frombuffer(out, np.uint8)
        for seg, row, n in self._segs:
            seg_end = seg + row * n
            if seg_end <= start or seg >= end:
                continue
            first = seg + max(0, -(-(start - seg) // row)) * row
            stop = min(end, seg_end)
            if first < stop and (arr[first - start:stop - start:row] > 4).any():
                return True
        return False

    def _row_end(self, pos: int) -> bool:
        return any(seg < pos <= seg + row * n and (pos - seg) % row == 0 for seg, row, n in self._segs)

    def _row_stop(self, pos: int) -> int:
        """End of the row holding byte ``pos`` (< total) of the image stream."""
        for seg, row, n in self._segs:
            if pos < seg + row * n:
                return seg + ((pos - seg) // row + 1) * row
        return self._total


Image.register_decoder(_PNG_CHECK, _PngRowsCheck)
