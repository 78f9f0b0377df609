"""Input byte streams: compression detected by magic bytes, decompressed member by member.

:func:`codec_of` names the codec of a file's first bytes, :func:`open_stream` gives a binary,
line-iterable stream of the decompressed content of plain, gzip, zstd, xz or bzip2 files of any
number of concatenated members, and a stream cut or corrupt inside a member raises
:class:`~vlmpack.errors.StreamError` (:func:`broken_message` makes its one-line
:class:`~vlmpack.errors.InputError` text). Used by :mod:`vlmpack.readers.sniff` and
:mod:`vlmpack.readers.jsonl`.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib
from typing import IO, Any

from vlmpack.errors import InputError, StreamError
from vlmpack.fsio import printable_path

_COMPRESSED_CHUNK = 64 << 10  # compressed bytes fed to a decompressor at once (bounds its output)


_MEMBER = {"gzip": "member", "zstd": "frame", "xz": "stream", "bz2": "stream"}


def compression(path: str) -> str | None:
    """``"gzip"``, ``"zstd"``, ``"xz"``, ``"bz2"`` or ``None`` (plain) from the first bytes of ``path``.
    Raises :class:`InputError` when the file cannot be opened."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(10)
    except OSError as e:
        raise InputError(f"cannot open input {printable_path(path)}: {e.strerror or e}; check the path") from None
    return codec_of(magic)


def open_stream(path: str) -> IO[bytes]:
    """A binary, line-iterable stream of the *decompressed* content of ``path``.

    Reading a compressed stream raises :class:`StreamError` (truncated or corrupt data) and
    ``OSError`` (I/O); :func:`iter_lines` turns both into :class:`InputError`.
    Raises :class:`InputError` when the file cannot be opened."""
    kind = compression(path)
    if kind is None:
        return open(path, "rb")
    try:
        return io.BufferedReader(_Members(path, kind), buffer_size=1 << 20)
    except OSError as e:
        raise InputError(f"cannot open input {printable_path(path)}: {e.strerror or e}; check the path") from None


class _Members(io.RawIOBase):
    """Raw stream of the decompressed content of a file of concatenated compressed members.

    One stdlib / python-zstandard decompressor object per member, fed :data:`_COMPRESSED_CHUNK`
    compressed bytes at a time; a member is complete when its decompressor says ``eof`` (gzip
    trailer CRC32 + ISIZE checked by zlib, zstd frame end and checksum if present, xz/bzip2 stream
    end and checks). Raises :class:`StreamError` when the file ends inside a member, when a member
    is corrupt or when bytes after a member are not another member.
    """

    def __init__(self, path: str, codec: str) -> None:
        super().__init__()
        self._raw = open(path, "rb")
        self.codec = codec
        self.decoded = 0  # decompressed bytes produced so far
        self._done = 0  # complete members
        self._dec: Any = None  # decompressor of the member being read, None between members
        self._pending = b""  # compressed bytes not yet fed
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._out:
            if not self._fill():
                return 0
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()

    def _fill(self) -> bool:
        data, self._pending = self._pending or self._raw.read(_COMPRESSED_CHUNK), b""
        unit = _MEMBER[self.codec]
        if not data:
            if self._dec is not None:
                raise StreamError(self.codec, f"ends inside {unit} {self._done + 1} (the file is cut short)",
                                  self.decoded)
            return False
        fresh = self._dec is None
        if fresh:
            if self.codec in ("gzip", "xz") and self._done:
                data = data.lstrip(b"\x00")  # zero padding after a member (gzip, xz stream padding)
                if not data:
                    return True
            self._dec = _decompressor(self.codec)
        try:
            out = self._dec.decompress(data)
        except Exception as e:  # noqa: BLE001 - zlib.error, LZMAError, OSError (bz2), ZstdError, ...
            if fresh and self._done:
                what = f"has bytes that are not {self.codec} after {unit} {self._done}"
            else:
                what = f"is corrupt in {unit} {self._done + 1}"
            raise StreamError(self.codec, f"{what} ({_short(str(e) or type(e).__name__)})", self.decoded) from None
        self.decoded += len(out)
        if self._dec.eof:
            self._pending, self._dec = self._dec.unused_data, None
            self._done += 1
        self._out = memoryview(out)
        return True


def _decompressor(codec: str) -> Any:
    if codec == "gzip":
        return zlib.decompressobj(wbits=31)
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj()
    if codec == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    return bz2.BZ2Decompressor()


def broken_message(path: str, e: StreamError, line_no: int | None, offset: int) -> str:
    """The one-line :class:`InputError` message for ``e`` in ``path``; ``line_no`` is the line
    being read (``None``: while sniffing the head) and ``offset`` its first decompressed byte."""
    where = f", after line {line_no - 1} (which ends at byte {offset})" if line_no is not None else ""
    return (f"{printable_path(path)}: the {e.codec} stream {e.reason} at decompressed byte {e.at}{where}; "
            "the file is truncated or corrupt, re-create or re-download it")


_BZ2_BLOCK = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")


def codec_of(magic: bytes) -> str | None:
    """``"gzip"``, ``"zstd"``, ``"xz"``, ``"bz2"`` or ``None`` (not compressed) from the first
    10 bytes of a file (fewer only when the file is shorter: a whole file of 2 or more bytes that
    is a cut-off zstd, xz or bzip2 magic counts as that codec, so reading it fails as truncated
    instead of reading a stub as text; a 1-byte stub reads as a 1-line text file, rejected as a
    record or refused as binary by :func:`describe`). Never raises."""
    if magic.startswith(b"\x1f\x8b"):
        return "gzip"
    if magic.startswith(b"\x28\xb5\x2f\xfd") or (2 <= len(magic) < 4 and b"\x28\xb5\x2f\xfd".startswith(magic)):
        return "zstd"
    if len(magic) >= 4 and 0x50 <= magic[0] <= 0x5F and magic[1:4] == b"\x2a\x4d\x18":
        return "zstd"  # a skippable frame (RFC 8878 section 3.1.2) first
    if magic.startswith(b"\xfd7zXZ\x00") or (2 <= len(magic) < 6 and b"\xfd7zXZ\x00".startswith(magic)):
        return "xz"
    if 2 <= len(magic) < 4 and b"BZh".startswith(magic):
        return "bz2"
    if magic[:3] == b"BZh" and len(magic) >= 4 and magic[3] in b"123456789":
        rest = magic[4:10]
        if rest in _BZ2_BLOCK or (len(magic) < 10 and any(b.startswith(rest) for b in _BZ2_BLOCK)):
            return "bz2"
    return None


def _short(value: object, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
