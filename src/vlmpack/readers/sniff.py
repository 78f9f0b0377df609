"""Content sniffing of input files: what a file *looks like*, from its first bytes, not its name.

:func:`sniff_input` (the I/O: one call per input file, before any task is made) refuses a file
that is clearly not JSONL; it uses these pure functions on bytes:

- :func:`codec_of`: the compression of a file from its magic bytes (gzip ``1f 8b``, zstd
  ``28 b5 2f fd`` or a skippable frame ``5? 2a 4d 18``, xz ``fd 37 7a 58 5a 00``, bzip2
  ``BZh1``-``BZh9`` followed by a block or end-of-stream magic), as in RFC 1952, RFC 8878, the
  .xz file format 1.1 and bzip2's format.
- :func:`describe`: a short description ("a tar archive (WebDataset?)", "a Parquet file", "a binary
  file ...") of a (decompressed) head that is clearly not JSONL, or ``None`` when it may be JSONL.
- :func:`printable_path`: a path as one printable line (non-UTF-8 name bytes as ``\\xNN``).

The rule of :func:`describe` is to refuse only what is *clearly* not JSONL, never a JSONL file
with a few bad records (one non-UTF-8 line among good ones is a ``not_utf8`` rejection, not a
refusal): a format signature (tar header checksum per POSIX ustar / GNU / v7, zip local header,
Parquet ``PAR1`` at both ends, Arrow ``ARROW1``, LMDB's ``0xBEEFC0DE`` meta/lock magic, image,
video, audio, PDF, executable and archive magics), or a head where more than
:data:`BINARY_SHARE` of the bytes are NUL, other C0 control bytes (JSON text cannot hold them
raw) or not UTF-8, or a UTF-16/32 byte-order mark. Text signatures (a Git LFS pointer, an HTML
or XML page, a JSON array, a pretty-printed JSON object) refuse only when no complete line of
the head is a JSON object; a JSON array gets its own line from :func:`sniff_input` (read it with
``--input-format json``).
"""

from __future__ import annotations

import io
import json
import logging
import re

from vlmpack.errors import InputError, StreamError
from vlmpack.fsio import printable_path
from vlmpack.readers.streams import broken_message, compression, open_stream

logger = logging.getLogger(__name__)

#: The input formats named in a refusal.
FORMATS = "plain, .gz, .zst, .xz, .bz2"
#: Bytes of the decompressed head that :func:`describe` looks at.
SNIFF_BYTES = 64 << 10
#: What :func:`describe` says of a head that opens a JSON array (the ``json`` format, not JSONL).
JSON_ARRAY = "one JSON array, not JSON lines"
#: Share of bad bytes (NUL, C0 controls other than TAB/LF/FF/CR/ESC, invalid UTF-8) above which a head is binary.
BINARY_SHARE = 0.30

_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")
_INVALID_UTF8 = re.compile("[\udc80-\udcff]")

#: (offset, magic, description) of binary formats; each magic holds a non-text byte, so a
#: JSONL file cannot start with it by accident.
_BINARY_MAGICS: tuple[tuple[int, bytes, str], ...] = (
    (0, b"PK\x03\x04", "a zip archive"),
    (0, b"PK\x05\x06", "a zip archive (empty)"),
    (0, b"PK\x07\x08", "a zip archive (spanned)"),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (0, b"Rar!\x1a\x07", "a RAR archive"),
    (0, b"\x1f\x8b", "gzip-compressed data"),
    (0, b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (0, b"\xfd7zXZ\x00", "xz-compressed data"),
    (0, b"\x04\x22\x4d\x18", "an lz4-compressed file (unsupported: decompress it or use zstd)"),
    (0, b"\xff\x06\x00\x00sNaPpY", "a Snappy-framed file (unsupported: decompress it or use zstd)"),
    (0, b"\x1f\x9d", "a Unix compress (.Z) file (unsupported: decompress it or use gzip)"),
    (0, b"\xde\xc0\xef\xbe", "an LMDB lock file"),
    (16, b"\xde\xc0\xef\xbe", "an LMDB database file"),
    (12, b"\xde\xc0\xef\xbe", "an LMDB database file"),
    (0, b"SQLite format 3\x00", "an SQLite database"),
    (0, b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (0, b"\x93NUMPY", "a NumPy .npy array"),
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"II*\x00", "a TIFF image"),
    (0, b"MM\x00*", "a TIFF image"),
    (0, b"\x00\x00\x01\x00", "an ICO image"),
    (0, b"\x1a\x45\xdf\xa3", "a Matroska/WebM video"),
    (0, b"\x7fELF", "a binary file (ELF executable)"),
    (0, b"\xcf\xfa\xed\xfe", "a binary file (Mach-O executable)"),
    (0, b"\xca\xfe\xba\xbe", "a binary file (Mach-O executable or Java class)"),
)
#: Magics made of text bytes only: they count only when the head also holds NUL or other bad bytes.
_TEXT_MAGICS: tuple[tuple[int, bytes, str], ...] = (
    (0, b"ARROW1", "an Arrow IPC file"),
    (0, b"FEA1", "a Feather file"),
    (0, b"GIF87a", "a GIF image"),
    (0, b"GIF89a", "a GIF image"),
    (0, b"BM", "a BMP image"),
    (0, b"%PDF-", "a PDF document"),
    (0, b"OggS", "an Ogg media file"),
    (0, b"fLaC", "a FLAC audio file"),
    (0, b"ID3", "an MP3 audio file"),
    (0, b"8BPS", "a Photoshop image"),
)
_RIFF = {b"WEBP": "a WebP image", b"AVI ": "an AVI video", b"WAVE": "a WAV audio file"}
_ISO_BRANDS = {b"avif": "an AVIF image", b"avis": "an AVIF image", b"heic": "a HEIF image",
               b"heix": "a HEIF image", b"mif1": "a HEIF image", b"msf1": "a HEIF image"}
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 text"), (b"\x00\x00\xfe\xff", "UTF-32 text"),
         (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"))


def describe(head: bytes, tail: bytes | None = None) -> str | None:
    """What ``head`` looks like when it is clearly not JSONL, else ``None``.

    ``head``: the first bytes of the *decompressed* content (up to :data:`SNIFF_BYTES`; the whole
    content when shorter); ``tail``: the last 4 bytes of an uncompressed file (``None`` when
    unknown). Returns e.g. ``"a tar archive (WebDataset?)"``; never raises. Rules: see the module
    docstring; tar per POSIX.1-1988 ustar (magic at byte 257) and the header checksum (sum of the
    512 header bytes with the checksum field read as spaces, unsigned or signed).
    """
    if not head:
        return None
    bad = _bad_bytes(head)
    binary = bad > BINARY_SHARE * len(head)
    some_bad = b"\x00" in head[:4096] or bad >= max(1, len(head) // 100)
    if _is_tar(head):
        return "a tar archive (WebDataset?)"
    if head.startswith(b"PAR1") and (tail == b"PAR1" or some_bad):
        return "a Parquet file"
    for offset, magic, what in _BINARY_MAGICS:
        if head[offset : offset + len(magic)] == magic:
            return what
    if some_bad:
        if head[:4] == b"RIFF":
            return _RIFF.get(head[8:12], "a RIFF media file")
        if head[4:8] == b"ftyp":
            return _ISO_BRANDS.get(head[8:12], "an MP4/QuickTime (ISO media) file")
        for offset, magic, what in _TEXT_MAGICS:
            if head[offset : offset + len(magic)] == magic:
                return what
    for bom, what in _BOMS:
        if head.startswith(bom):
            return f"{what} (vlmpack reads UTF-8 JSONL)"
    if len(head) >= 64 and _utf16_without_bom(head):
        return "UTF-16 text (vlmpack reads UTF-8 JSONL)"
    if binary:
        share = round(100 * bad / len(head))
        return f"a binary file ({share}% of its first {len(head)} bytes are NUL, control or non-UTF-8 bytes)"
    return _text_not_jsonl(head)


def sniff_input(path: str, *, compressed_tar_rule: bool = False) -> None:
    """Refuse ``path`` at once when its content is clearly not JSONL (one call per input file,
    before any task is made; :func:`vlmpack.config.load_config` calls it for every ``--input``).

    Reads the first :data:`SNIFF_BYTES` of the decompressed content (and the last 4 bytes of an
    uncompressed file) and asks :func:`describe`. Logs a warning when the first zstd frame has no
    content checksum (corruption inside such frames may go undetected). Raises
    :class:`InputError` (one line: the file, what it looks like, what vlmpack reads) for a tar,
    zip, Parquet, image, binary ... file, and for an unreadable file or a compressed head that is
    truncated or corrupt. ``compressed_tar_rule``: a compressed tar gets the WebDataset rule
    instead (shards are read in place by byte offset, so only uncompressed ones can be).
    """
    codec = compression(path)
    tail = None
    try:
        with open_stream(path) as fh:
            head = fh.read(SNIFF_BYTES)
            if codec is None and len(head) >= 8:
                fh.seek(-4, io.SEEK_END)
                tail = fh.read(4)
    except StreamError as e:
        raise InputError(broken_message(path, e, None, 0)) from None
    except OSError as e:
        raise InputError(f"cannot read input {printable_path(path)}: {e.strerror or e}; check the file") from None
    if codec == "zstd" and not _zstd_checked(path):
        logger.warning("%s: its zstd frames carry no content checksum, so corrupt data inside them may go "
                       "undetected; compress with the zstd tool (checksums on by default) or write_checksum=True",
                       printable_path(path))
    if compressed_tar_rule and codec and _is_tar(head):
        raise InputError(f"{printable_path(path)} is a compressed tar: WebDataset shards are read in place by "
                         "byte offset, so .tar.gz/.tgz shards cannot be; decompress them first")
    what = describe(head, tail)
    if what == JSON_ARRAY:  # read as JSONL because --input-format jsonl said so (auto reads it as an array)
        raise InputError(f"{printable_path(path)} holds {JSON_ARRAY}: pass --input-format json (or leave it auto) "
                         "to read it as one array, or convert it to JSONL (jq -c '.[]')")
    if what is not None:
        packed = f" compressed with {codec}" if codec else ""
        raise InputError(f"{printable_path(path)} looks like {what}{packed}, not JSONL; "
                         f"vlmpack reads JSONL ({FORMATS}) and uncompressed WebDataset .tar inputs")


def _zstd_checked(path: str) -> bool:
    """Whether the first zstd frame of ``path`` has a content checksum (RFC 8878 frame header
    descriptor bit 2); ``True`` when the file starts with a skippable frame or is too short."""
    with open(path, "rb") as fh:
        header = fh.read(5)
    return len(header) < 5 or header[:4] != b"\x28\xb5\x2f\xfd" or bool(header[4] & 0x04)


def _bad_bytes(head: bytes) -> int:
    """NUL / C0 control bytes plus bytes that are not part of valid UTF-8 in ``head`` (a
    sequence cut by the end of ``head`` is not counted)."""
    text = head.decode("utf-8", "surrogateescape")
    invalid = len(_INVALID_UTF8.findall(text))
    if invalid and len(head) >= SNIFF_BYTES:  # the last character may be cut by the head's end
        cut = head[-3:].decode("utf-8", "surrogateescape")
        invalid -= min(len(_INVALID_UTF8.findall(cut)), 3)
    return invalid + len(_CONTROL.findall(head))


def _is_tar(head: bytes) -> bool:
    if len(head) < 512:
        return False
    block = head[:512]
    if block[257:262] == b"ustar" and b"\x00" in block:
        return True
    field = block[148:156]
    digits = field.strip(b" \x00")
    if not digits or any(c not in b"01234567" for c in digits):
        return False
    want = int(digits, 8)
    rest = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(rest)
    signed = sum(b - 256 if b > 127 else b for b in rest)
    return want in (unsigned, signed) and block[0] != 0


def _utf16_without_bom(head: bytes) -> bool:
    """ASCII text in UTF-16: nearly every other byte is NUL."""
    sample = head[:4096]
    even, odd = sample[0::2], sample[1::2]
    return max(even.count(0) / max(len(even), 1), odd.count(0) / max(len(odd), 1)) > 0.9


def _text_not_jsonl(head: bytes) -> str | None:
    """Text signatures that are no JSONL (only when no complete line of ``head`` is a JSON object)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start.startswith(b"version https://git-lfs.github.com/spec/"):
        what = "a Git LFS pointer, not the data (run `git lfs pull`)"
    elif start[:15].lower().startswith((b"<!doctype html", b"<html")):
        what = "an HTML page (a failed download?)"
    elif start.startswith(b"<?xml"):
        what = "an XML document"
    elif start.startswith(b"["):
        what = JSON_ARRAY
    elif start.split(b"\n", 1)[0].strip() == b"{":
        what = "a pretty-printed JSON document (JSONL has one JSON object per line; convert it, e.g. jq -c '.[]')"
    else:
        return None
    lines = head.split(b"\n")
    if len(head) >= SNIFF_BYTES:
        lines = lines[:-1]  # the last one may be cut
    for line in lines:
        line = line.strip()
        if line.startswith(b"{"):
            try:
                if isinstance(json.loads(line), dict):
                    return None
            except ValueError:
                continue
    return what


__all__ = ["BINARY_SHARE", "FORMATS", "SNIFF_BYTES", "describe", "sniff_input"]
