"""Media references: where the bytes of one media item live, read in place (never extracted).

A reference is a string, so it travels unchanged through the records part files, pickled task
results and pack plans:

- a plain absolute path: a loose file (``/data/images/a.png``);
- ``tar://<archive>#<offset>+<size>``: a member of an uncompressed tar (a WebDataset shard),
  ``offset`` the byte offset of the member's data in the archive and ``size`` its length in bytes;
- ``lmdb://<env>#<key hex>``: the value of a key in an LMDB environment (``env`` its directory,
  or its data file for a ``subdir=False`` env; the key's bytes in hex), opened read-only without
  locks (``lmdb.open(env, readonly=True, lock=False)``), one cached handle per env and process;
- ``parquet://<file>#<group>:<row>:<column>:<index>``: the bytes of a media cell of a Parquet /
  Arrow table (:mod:`vlmpack.sources.parquet`: row ``row`` of row group / record batch ``group``,
  item ``index`` of the cell's list or ``-1`` for the cell itself; an HF ``Image`` struct gives its
  ``bytes``), read with pyarrow, the group's column cached per process;
- ``data:[<mediatype>];base64,<data>``: inline bytes (an RFC 2397 data URI, base64 form only, as
  OpenAI-style ``image_url`` parts carry them): the reference *is* the bytes; the media type is
  not trusted, the content decides (as for every other reference).

The fragment is split at the *last* ``#``, so archive paths may hold ``#``. More schemes (Parquet
cells, LMDB values) plug in here: one parser, one opener and one identity rule each.

:func:`open_ref` gives a read-only, seekable binary file object over exactly the item's bytes
(what PIL and the writer need), :func:`read_ref` the bytes, :func:`ref_identity` what a resume
compares (the size of the item, the mtime of the file that holds it).
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass

from vlmpack.errors import MediaError

TAR = "tar://"
LMDB = "lmdb://"
PARQUET = "parquet://"
DATA = "data:"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_ENVS: dict[tuple[str, int], object] = {}


@dataclass(frozen=True, slots=True)
class TarMember:
    """A tar member: ``archive`` path, ``offset`` of its data and ``size``, both in bytes."""

    archive: str
    offset: int
    size: int


def tar_member_ref(archive: str, offset: int, size: int) -> str:
    """The reference string of a tar member (see the module docstring)."""
    return f"{TAR}{archive}#{int(offset)}+{int(size)}"


@dataclass(frozen=True, slots=True)
class LmdbValue:
    """The value of ``key`` (bytes) in the LMDB environment at ``env`` (a directory or data file)."""

    env: str
    key: bytes


def lmdb_ref(env: str, key: bytes) -> str:
    """The reference string of an LMDB value (see the module docstring)."""
    return f"{LMDB}{env}#{key.hex()}"


@dataclass(frozen=True, slots=True)
class ParquetCell:
    """A media cell of a Parquet / Arrow table (see the module docstring)."""

    file: str
    group: int
    row: int
    column: str
    index: int


def parquet_cell_ref(file: str, group: int, row: int, column: str, index: int = -1) -> str:
    """The reference string of a Parquet / Arrow media cell (see the module docstring)."""
    return f"{PARQUET}{file}#{int(group)}:{int(row)}:{column}:{int(index)}"


@dataclass(frozen=True, slots=True)
class InlineBytes:
    """The bytes of a ``data:`` URI (decoded from base64)."""

    data: bytes


def _parse_data(ref: str) -> InlineBytes:
    import base64
    import binascii

    head, sep, payload = ref.partition(",")
    if not sep or not head.lower().endswith(";base64"):
        raise MediaError("media_unsupported",
                         "a data: URI must be base64 (data:image/png;base64,...); percent-encoded data is not read")
    try:
        return InlineBytes(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError):
        raise MediaError("media_undecodable",
                         f"the data: URI holds invalid base64 ({len(payload)} characters)") from None


def display_ref(ref: str) -> str:
    """``ref`` for messages: a ``data:`` URI shortened to its media type and payload length."""
    if not ref.startswith(DATA):
        return ref
    head, _, payload = ref.partition(",")
    return f"{head[:60]},<{len(payload)} base64 characters>"


def _parse_parquet(ref: str) -> ParquetCell:
    file, sep, frag = ref[len(PARQUET):].rpartition("#")
    group, _, rest = frag.partition(":")
    row, _, rest = rest.partition(":")
    column, _, index = rest.rpartition(":")
    try:
        if sep and file and column and group.isdigit() and row.isdigit():
            return ParquetCell(file, int(group), int(row), column, int(index))
    except ValueError:
        pass
    raise ValueError(f"malformed Parquet cell reference {ref!r}; expected parquet://FILE#GROUP:ROW:COLUMN:INDEX")


def parse_ref(ref: str) -> TarMember | LmdbValue | ParquetCell | InlineBytes | str:
    """A :class:`TarMember` for a ``tar://`` reference, a :class:`LmdbValue` for ``lmdb://``, a
    :class:`ParquetCell` for ``parquet://``, :class:`InlineBytes` for ``data:``, else ``ref``
    itself (a file path). Raises ``ValueError`` for a malformed reference and
    :class:`~vlmpack.errors.MediaError` for a ``data:`` URI that is not base64 (``media_unsupported``)
    or holds invalid base64 (``media_undecodable``)."""
    if ref.startswith(DATA):
        return _parse_data(ref)
    if ref.startswith(LMDB):
        env, sep, key = ref[len(LMDB):].rpartition("#")
        try:
            return LmdbValue(env, bytes.fromhex(key)) if sep and env and key else _bad(ref)
        except ValueError:
            _bad(ref)
    if ref.startswith(PARQUET):
        return _parse_parquet(ref)
    if not ref.startswith(TAR):
        return ref
    archive, sep, frag = ref[len(TAR):].rpartition("#")
    off, plus, size = frag.partition("+")
    if not sep or not plus or not off.isdigit() or not size.isdigit():
        raise ValueError(f"malformed tar member reference {ref!r}; expected tar://ARCHIVE#OFFSET+SIZE")
    return TarMember(archive, int(off), int(size))


def _bad(ref: str):
    raise ValueError(f"malformed LMDB reference {ref!r}; expected lmdb://ENV#KEYHEX")


def is_member(ref: str) -> bool:
    """True for a reference into a container (any ``scheme://`` reference) or inline bytes
    (``data:``), False for a loose file."""
    return bool(_URL.match(ref)) or ref.startswith(DATA)


def _lmdb_env(path: str):
    """The read-only LMDB environment at ``path``, opened once per process (a forked worker opens
    its own: LMDB handles must not cross a fork). Raises ``OSError`` when it cannot be opened."""
    key = (path, os.getpid())
    env = _ENVS.get(key)
    if env is None:
        try:
            import lmdb
        except ImportError:
            raise OSError(f"reading {path} needs the lmdb package: pip install 'vlmpack[lmdb]'") from None
        try:
            env = lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path), readahead=False)
        except lmdb.Error as e:
            raise OSError(f"cannot open LMDB environment {path}: {e}") from None
        _ENVS[key] = env
    return env


def _lmdb_get(value: LmdbValue, size_only: bool = False):
    """The bytes of an LMDB value, or with ``size_only`` its length in bytes (read from the memory
    map, the value not copied); ``FileNotFoundError`` for a missing key, ``OSError`` otherwise."""
    import lmdb

    try:
        with _lmdb_env(value.env).begin(buffers=size_only) as txn:
            data = txn.get(value.key)
            if data is not None and size_only:
                return len(data)
    except lmdb.Error as e:  # e.g. a key longer than the env's maximum
        raise OSError(f"cannot read key {value.key!r} of LMDB environment {value.env}: {e}") from None
    if data is None:
        raise FileNotFoundError(f"no key {value.key!r} in LMDB environment {value.env}")
    return data


def _lmdb_data_file(env: str) -> str:
    return os.path.join(env, "data.mdb") if os.path.isdir(env) else env


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
    if isinstance(parsed, InlineBytes):
        return io.BytesIO(parsed.data)
    if isinstance(parsed, LmdbValue):
        return io.BytesIO(_lmdb_get(parsed))
    if isinstance(parsed, ParquetCell):
        return io.BytesIO(_parquet_get(parsed))
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
    parsed = parse_ref(ref)
    if isinstance(parsed, TarMember):  # one seek + one read, no file-object view
        with open(parsed.archive, "rb") as f:
            f.seek(parsed.offset)
            data = f.read(parsed.size)
        if len(data) != parsed.size:
            raise EOFError(f"{parsed.archive} ends before the member at byte {parsed.offset} (+{parsed.size} bytes); "
                           "the archive is truncated")
        return data
    with open_ref(ref) as f:
        return f.read()


def ref_identity(ref: str) -> tuple[int, int]:
    """``(size of the item in bytes, mtime in ns of the file that holds it)`` (an LMDB value: its
    length and the mtime of the env's ``data.mdb``; inline bytes: their length and 0); raises
    ``OSError`` (``FileNotFoundError`` for a missing LMDB key)."""
    parsed = parse_ref(ref)
    if isinstance(parsed, InlineBytes):
        return len(parsed.data), 0
    if isinstance(parsed, LmdbValue):
        mtime = os.stat(_lmdb_data_file(parsed.env)).st_mtime_ns
        return _lmdb_get(parsed, size_only=True), mtime
    if isinstance(parsed, ParquetCell):
        return len(_parquet_get(parsed)), os.stat(parsed.file).st_mtime_ns
    if isinstance(parsed, TarMember):
        return parsed.size, os.stat(parsed.archive).st_mtime_ns
    st = os.stat(parsed)
    return st.st_size, st.st_mtime_ns


def _parquet_get(cell: ParquetCell) -> bytes:
    """The bytes of a Parquet / Arrow media cell; ``OSError`` when it is not there."""
    from vlmpack.media.tables import cell_bytes

    return cell_bytes(cell.file, cell.group, cell.row, cell.column, cell.index)
