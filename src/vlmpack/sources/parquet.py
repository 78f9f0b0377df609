"""The Parquet / Arrow source: a table whose rows are samples, media (image, video, audio) read in place from cells.

Inputs: a Parquet file (magic ``PAR1``), an Arrow IPC file (magic ``ARROW1``) or an Arrow IPC
stream (what ``datasets.Dataset.save_to_disk`` writes as ``data-*.arrow``; it starts with the
``0xFFFFFFFF`` continuation marker). A "group" is a Parquet row group or an Arrow record batch:
tasks are ranges of groups and one group is read at a time (bounded memory: one group's rows).

A row is a record in any layout of :mod:`vlmpack.layouts` (``messages`` /
``conversations`` / prompts + captions columns...); the media columns (:data:`MEDIA_COLUMNS`, one
pair per kind of the registry :data:`vlmpack.records.MEDIA_KINDS`: ``images`` / ``image``,
``videos`` / ``video``, ``audios`` / ``audio``) hold, per row, one item or a list of items, each

- the HF ``datasets`` ``Image`` / ``Video`` / ``Audio`` feature (``decode=False``, as stored): a
  struct ``{"bytes", "path"}``; with ``bytes`` it is read
  in place from the file, as a ``parquet://`` reference (:mod:`vlmpack.media.ref`:
  ``parquet://<file>#<group>:<row in group>:<column>:<list index or -1>``), without ``bytes`` its
  ``path`` is a file path;
- a binary value: read in place like the struct's bytes;
- a string: a file path resolved against ``media_root`` (:func:`vlmpack.media.resolve.resolve_ref`,
  the JSONL rules).

Locators: ``Locator(file, line=1-based row number in the file, offset=group index, unit="row")``.
The id is the row's ``id`` column when present (int or non-empty str), else ``file:row``.
A file whose footer/schema cannot be read (a truncated Parquet file) is refused with one
:class:`~vlmpack.errors.InputError` line, as is a group that cannot be decoded during a read.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator

from vlmpack.errors import MediaError
from vlmpack.media.ref import parquet_cell_ref
from vlmpack.media.resolve import resolve_ref
from vlmpack.media.tables import Table, remember_column, table_kind
from vlmpack.readers.jsonl import record_to_sample
from vlmpack.records import MEDIA_KINDS, Locator, ReadStats, Rejection

#: The media columns of a row, column -> media kind: ``<kind>s`` (a list, LLaMA-Factory's
#: ``images`` / ``videos`` / ``audios``) and ``<kind>`` (one item or a list) for each kind of the
#: registry, the names the layouts read (:func:`vlmpack.layouts.builder.top_level_media`).
MEDIA_COLUMNS: dict[str, str] = {name: kind for kind in MEDIA_KINDS for name in (kind + "s", kind)}


def _json_default(v: object) -> object:
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    return str(v)  # dates, decimals...


def _plain(v: object) -> object:
    """``v`` as ``json.loads(json.dumps(v, default=_json_default))`` gives it back, built directly
    (no text): tuples (map entries) become lists, bytes base64 text, dates / decimals / times
    ``str(v)``; anything else unusual (a dict with non-string keys, an int or float subclass)
    takes that round trip itself, so the values are exactly those of the former dump + parse."""
    t = type(v)
    if t is str or t is int or t is float or t is bool or v is None:
        return v
    if t is dict:
        if all(type(k) is str for k in v):  # type: ignore[union-attr]
            return {k: _plain(x) for k, x in v.items()}  # type: ignore[union-attr]
    elif t is list or t is tuple:
        return [_plain(x) for x in v]  # type: ignore[union-attr]
    elif t is bytes or t is bytearray:
        return base64.b64encode(bytes(v)).decode()  # type: ignore[arg-type]
    return json.loads(json.dumps(v, ensure_ascii=True, default=_json_default))


def _row_record(path: str, group: int, row: int, rec: dict, media_root: str, allow_absolute_media: bool,
                lmdb_envs: dict[str, str] | None = None):
    """``(record, resolve)`` of one row, the record as plain JSON values (:func:`_plain`): media
    columns become placeholder names that ``resolve`` maps to references (raising
    :class:`MediaError` for an unusable item)."""
    targets: dict[str, object] = {}

    def place(col: str, idx: int, item: object) -> str:
        name = f"{col}[{idx}]" if idx >= 0 else col
        if isinstance(item, dict) and isinstance(item.get("path"), str) and item["path"]:
            name = item["path"]  # the ref recorded for the item (its bytes, when present, are read)
            if item.get("bytes") is None:
                item = item["path"]
        elif isinstance(item, str):
            name = item
        while name in targets:
            name += "'"
        if isinstance(item, dict) and item.get("bytes") is not None or isinstance(item, (bytes, bytearray)):
            targets[name] = parquet_cell_ref(path, group, row, col, idx)
        elif isinstance(item, str):
            targets[name] = ("path", item)
        else:
            targets[name] = ("bad", item)
        return name

    for col in MEDIA_COLUMNS:
        value = rec.get(col)
        if value is None:
            continue
        if isinstance(value, list):
            rec[col] = [place(col, i, v) for i, v in enumerate(value)]
        else:
            rec[col] = place(col, -1, value)

    def resolve(name: object) -> str:
        t = targets.get(name) if isinstance(name, str) else None
        if isinstance(t, str):
            return t
        if t is not None and t[0] == "path":
            return resolve_ref(t[1], media_root, allow_absolute_media=allow_absolute_media, lmdb_envs=lmdb_envs)
        what = t[1] if t is not None else name
        raise MediaError("wrong_type", f"media item must be an Image / Video / Audio struct, bytes or a path, got "
                                       f"{type(what).__name__}")

    return _plain(rec), resolve


class ParquetSource:
    """Parquet and Arrow IPC tables (see the module docstring)."""

    name = "parquet"
    unit = "row"  # what a Locator's number counts

    @staticmethod
    def sniff(head: bytes) -> bool:
        """``PAR1``, ``ARROW1`` or an Arrow IPC stream's continuation marker at the start."""
        return table_kind(head) is not None

    @staticmethod
    def check(path: str) -> None:
        """Refuse a file whose footer / schema cannot be read (truncated, corrupt), one line."""
        Table(path)

    @staticmethod
    def split(path: str, target_bytes: int) -> list[tuple[int, int, int]]:
        """Ranges ``(first group, end group (exclusive), first row number)``, >= ``target_bytes``
        (compressed Parquet bytes / Arrow buffer bytes) each except the last."""
        tab = Table(path)
        ranges: list[tuple[int, int, int]] = []
        start, first, acc, row = 0, 1, 0, 1
        for i, (n, size) in enumerate(zip(tab.rows, tab.sizes, strict=True)):
            if acc >= target_bytes:
                ranges.append((start, i, first))
                start, first, acc = i, row, 0
            acc += size
            row += n
        ranges.append((start, len(tab.rows), first))
        return ranges

    @staticmethod
    def read(path: str, start: int, end: int, first: int, *, schema: str = "auto", media_root: str = ".",
             allow_absolute_media: bool = False, stats: ReadStats | None = None,
             lmdb_envs: dict[str, str] | None = None, text_key: str | None = None,
             record_map: str | None = None, max_member_bytes: int | None = None) -> Iterator:
        """One :class:`~vlmpack.records.Sample` or :class:`~vlmpack.records.Rejection` per row of
        groups ``[start, end)`` (``end=-1``: to the end); rows numbered from ``first``. Path
        strings resolve like JSONL's (``media_root``, ``allow_absolute_media``, ``lmdb_envs``: the
        ``--media-lmdb`` stores for ``lmdb://NAME/KEY`` names). A row is no container member, so
        ``max_member_bytes`` does not apply (media cells: ``--max-media-bytes`` when probed)."""
        del max_member_bytes
        stats = stats if stats is not None else ReadStats()
        tab = Table(path)
        end = len(tab.rows) if end < 0 else min(end, len(tab.rows))
        no = first
        st = os.stat(path)
        for g in range(start, end):
            table = tab.group(g)
            for col in MEDIA_COLUMNS:  # the probes of this task read these cells next: no re-read
                if col in table.column_names:
                    remember_column((path, st.st_mtime_ns, st.st_size, g, col), table.column(col))
            rows = table.to_pylist()
            del table
            for r, rec in enumerate(rows):
                stats.lines += 1
                stats.records += 1
                obj, resolve = _row_record(path, g, r, rec, media_root, allow_absolute_media, lmdb_envs)
                res = record_to_sample(obj, Locator(path, no, g, None, "row"), schema=schema,
                                       resolve_media=resolve, text_key=text_key, record_map=record_map)
                if isinstance(res, Rejection):
                    stats.reasons[res.reason] = stats.reasons.get(res.reason, 0) + 1
                yield res
                no += 1
            del rows
