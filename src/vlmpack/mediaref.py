"""Media references: where the bytes of one media item live, read in place (never extracted).

A reference is a string, so it travels unchanged through the records part files, pickled task
results and pack plans:

- a plain absolute path: a loose file (``/data/images/a.png``);
- ``tar://<archive>#<offset>+<size>``: a member of an uncompressed tar (a WebDataset shard),
  ``offset`` the byte offset of the member's data in the archive and ``size`` its length in bytes.

The fragment is split at the *last* ``#``, so archive paths may hold ``#``. More schemes (Parquet
cells, LMDB values) plug in here: one parser, one opener and one identity rule each.

:func:`open_ref` gives a read-only, seekable binary file object over exactly the item's bytes
(what PIL and the writer need), :func:`read_ref` the bytes, :func:`ref_identity` what a resume
compares (the size of the item, the mtime of the file that holds it).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

TAR = "tar://"


@dataclass(frozen=True, slots=True)
class TarMember:
    """A tar member: ``archive`` path, ``offset`` of its data and ``size``, both in bytes."""

    archive: str
    offset: int
    size: int


def tar_member_ref(archive: str, offset: int, size: int) -> str:
    """The reference string of a tar member (see the module docstring)."""
    return f"{TAR}{archive}#{int(offset)}+{int(size)}"


def parse_ref(ref: str) -> TarMember | str:
    """A :class:`TarMember` for a ``tar://`` reference, else ``ref`` itself (a file path).
    Raises ``ValueError`` for a malformed ``tar://`` reference."""
    if not ref.startswith(TAR):
        return ref
    archive, sep, frag = ref[len(TAR):].rpartition("#")
    off, plus, size = frag.partition("+")
    if not sep or not plus or not off.isdigit() or not size.isdigit():
        raise ValueError(f"malformed tar member reference {ref!r}; expected tar://ARCHIVE#OFFSET+SIZE")
    return TarMember(archive, int(off), int(size))


def is_member(ref: str) -> bool:
    """True for a reference into an archive (not a loose file)."""
    return ref.startswith(TAR)


def container_path(ref: str) -> str:
    """The file that holds the item: the path itself, or the archive of a member."""
    parsed = parse_ref(ref)
    return parsed.archive if isinstance(parsed, TarMember) else parsed


class _Window(io.RawIOBase):
    """A read-only view of ``[offset, offset + size)`` of an open binary file."""

    def __init__(self, raw, offset: int, size: int):
        super().__init__()
        self._raw, self._start, self._size, self._pos = raw, offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf) -> int:
        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        self._raw.seek(self._start + self._pos)
        data = self._raw.read(n)
        buf[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_ref(ref: str):
    """A seekable, read-only binary file object over the item's bytes (close it after use).
    Raises ``OSError`` when the file cannot be opened and ``EOFError`` when a member ends past
    the end of its archive (a truncated shard)."""
    parsed = parse_ref(ref)
    if not isinstance(parsed, TarMember):
        return open(parsed, "rb")  # noqa: SIM115 - returned to the caller
    raw = open(parsed.archive, "rb")  # noqa: SIM115
    if os.fstat(raw.fileno()).st_size < parsed.offset + parsed.size:
        raw.close()
        raise EOFError(f"{parsed.archive} ends before the member at byte {parsed.offset} (+{parsed.size} bytes); "
                       "the archive is truncated")
    return io.BufferedReader(_Window(raw, parsed.offset, parsed.size))


def read_ref(ref: str) -> bytes:
    """The item's bytes. Raises like :func:`open_ref`."""
    with open_ref(ref) as f:
        return f.read()


def ref_identity(ref: str) -> tuple[int, int]:
    """``(size of the item in bytes, mtime in ns of the file that holds it)``; raises ``OSError``."""
    parsed = parse_ref(ref)
    if isinstance(parsed, TarMember):
        return parsed.size, os.stat(parsed.archive).st_mtime_ns
    st = os.stat(parsed)
    return st.st_size, st.st_mtime_ns
