"""Parquet / Arrow tables read in place: random access to row groups and the media bytes of one cell.

A "group" is a Parquet row group or an Arrow record batch (an Arrow IPC file, or the IPC stream
``datasets.Dataset.save_to_disk`` writes). :class:`Table` opens a file by its magic bytes;
:func:`cell_bytes` returns the bytes of one media cell (what a ``parquet://`` reference of
:mod:`vlmpack.media.ref` names), through a per-process LRU cache of group columns. The input
source :mod:`vlmpack.sources.parquet` reads records through :class:`Table` too.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from vlmpack.errors import InputError
from vlmpack.fsio import printable_path

PAR1 = b"PAR1"


ARROW1 = b"ARROW1"


STREAM = b"\xff\xff\xff\xff"


# open_ref's cache of group columns, per process (so x workers): 256 MiB took a 2 GB input's workers to
# ~1.2 GB RSS each (bench_pack.py --parquet-rss); a file whose media exceed it re-reads groups when writing
_CACHE_BYTES = 64 << 20


def table_kind(head: bytes) -> str | None:
    """``"parquet"``, ``"arrow"`` (IPC file) or ``"stream"`` (IPC stream) from a file's first bytes, else None."""
    if head.startswith(PAR1):
        return "parquet"
    if head.startswith(ARROW1):
        return "arrow"
    if head.startswith(STREAM) and len(head) >= 8 and 0 < int.from_bytes(head[4:8], "little") < (1 << 24):
        return "stream"
    return None


class Table:
    """Random access to the groups of one Parquet / Arrow file (``pyarrow`` errors -> InputError)."""

    def __init__(self, path: str):
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq

        self.path = path
        with open(path, "rb") as f:
            self.kind = table_kind(f.read(16))
        try:
            if self.kind == "parquet":
                self._pf = pq.ParquetFile(path, memory_map=True)
                meta = self._pf.metadata
                self.rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                self.sizes = [sum(meta.row_group(i).column(c).total_compressed_size
                                  for c in range(meta.row_group(i).num_columns)) for i in range(meta.num_row_groups)]
                self.names = list(self._pf.schema_arrow.names)
            elif self.kind in ("arrow", "stream"):
                src = pa.memory_map(path, "r")
                if self.kind == "arrow":
                    rd = ipc.open_file(src)
                    self._batches = [rd.get_batch(i) for i in range(rd.num_record_batches)]
                else:  # a stream has no index: map it once (zero-copy), batches are views
                    self._batches = list(ipc.open_stream(src))
                self.rows = [b.num_rows for b in self._batches]
                self.sizes = [b.nbytes for b in self._batches]
                self.names = list(self._batches[0].schema.names) if self._batches else []
            else:
                raise InputError(f"{printable_path(path)} is neither Parquet (PAR1) nor Arrow IPC; "
                                 "pass --input-format for another format")
        except (OSError, pa.ArrowException, ValueError) as e:
            raise InputError(f"{printable_path(path)}: not a readable {self.kind} file ({_oneline(e)}); "
                             "it is truncated or corrupt, re-create it") from None

    def group(self, i: int, columns: list[str] | None = None):
        """Group ``i`` as a ``pyarrow.Table`` / ``RecordBatch`` (only ``columns`` when given)."""
        import pyarrow as pa

        try:
            if self.kind == "parquet":
                return self._pf.read_row_group(i, columns=columns)
            b = self._batches[i]
            return b.select(columns) if columns is not None else b
        except (OSError, pa.ArrowException, ValueError) as e:
            raise InputError(f"{printable_path(self.path)}: row group {i} cannot be read ({_oneline(e)}); "
                             "the file is truncated or corrupt, re-create it") from None


def _oneline(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


_CELLS: OrderedDict[tuple, tuple[object, int]] = OrderedDict()


def cell_bytes(file: str, group: int, row: int, column: str, index: int) -> bytes:
    """The bytes of one media cell (``index=-1``: the cell itself, else item ``index`` of its list;
    a struct gives its ``bytes`` field). The group's column is cached per process (LRU, up to
    ~64 MiB), so a sample's images and neighbouring rows do not re-read the file. Raises
    ``OSError`` when the file, group, row or value is not there (a changed or truncated file)."""
    st = os.stat(file)
    key = (file, st.st_mtime_ns, st.st_size, group, column)
    hit = _CELLS.get(key)
    if hit is None:
        try:
            tab = Table(file)
            if not 0 <= group < len(tab.rows):
                raise OSError(f"{file} has no row group {group}")
            col = tab.group(group, [column]).column(0)
        except InputError as e:
            raise OSError(str(e)) from None
        remember_column(key, col)
    else:
        _CELLS.move_to_end(key)
        col = hit[0]
    if not 0 <= row < len(col):
        raise OSError(f"{file}: row group {group} has no row {row}")
    value = col[row].as_py()
    if index >= 0:
        if not isinstance(value, list) or index >= len(value):
            raise OSError(f"{file}: cell {group}:{row}:{column} has no item {index}")
        value = value[index]
    if isinstance(value, dict):
        value = value.get("bytes")
    if not isinstance(value, bytes):
        raise OSError(f"{file}: cell {group}:{row}:{column}:{index} holds no bytes")
    return value


def remember_column(key: tuple, col) -> None:
    """Keep a group column in the per-process cache of :func:`cell_bytes` (LRU, up to
    ``_CACHE_BYTES`` bytes); ``key`` = ``(file, mtime_ns, size, group, column)``."""
    import pyarrow as pa

    size = col.nbytes
    evicted = False
    while _CELLS and sum(v[1] for v in _CELLS.values()) + size > _CACHE_BYTES:
        _CELLS.popitem(last=False)
        evicted = True
    _CELLS[key] = (col, size)
    if evicted:  # else Arrow's allocator (mimalloc) keeps the freed columns: RSS ~2.5x the cache
        pa.default_memory_pool().release_unused()
