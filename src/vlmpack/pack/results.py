"""Count task results on disk: data only (an Arrow IPC file and sealed JSON), every file checked by sha256.

A finished count task leaves three files in its count store (:mod:`vlmpack.pack.count_stage`):

- ``part-<task>.jsonl``: its accepted samples' pack-JSON entries, each followed by its media's
  sha256 line (written by the task, :func:`vlmpack.pack.count_task.run_task`);
- ``part-<task>.arrow``: an Arrow IPC file, one row per accepted sample, the columns of
  :data:`SCHEMA` (the per-sample arrays of :class:`~vlmpack.pack.count_task.MeasureResult`);
- ``part-<task>.result.json``: sealed JSON (:func:`vlmpack.fsio.sealed_json_bytes`), written last
  (it marks the task done): :data:`FORMAT`, the task's index and input, sha256 and size of the two
  files above, the media fingerprints, the rejections, the read counters, worker seconds and the
  text bounds of :meth:`~vlmpack.pack.count_task.MeasureResult.fits` (``text_bounds``).

Nothing in these files is ever executed: :func:`read_result` parses JSON and Arrow, checks the
seal, the sha256 of the other two files, the Arrow schema (:data:`SCHEMA` exactly) and the Arrow
buffers (``validate(full=True)``), and every JSON field's type; a file that fails any of this makes
the task count as not done (it is counted again). Older stores (``*.result.pkl`` pickles of
vlmpack before this format) are never read: their count key differs and the store is emptied.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from vlmpack.fsio import atomic_write, file_sha256, read_sealed_json, sealed_json_bytes
from vlmpack.media.fingerprint import Fingerprint
from vlmpack.pack.count_task import MeasureResult, arrays_path, media_files_sha256, part_path, result_path
from vlmpack.pack.media_tokens import TOKEN_COLUMNS
from vlmpack.records import Locator, ReadStats, Rejection

#: The ``format`` of a result file this code reads and writes.
#: /2: num_media int32, text_bounds; /3: video_tokens; /4: a token column per media kind after the
#: first, from the registry (:data:`vlmpack.pack.media_tokens.TOKEN_COLUMNS`: + audio_tokens). A
#: result of another format is counted again, never read.
FORMAT = "vlmpack.count-result/4"
#: The columns of ``part-<task>.arrow``: the per-sample fields of MeasureResult (``id``: its ``ids``;
#: the token columns: its ``kind_tokens``).
SCHEMA = pa.schema([("id", pa.string()), ("num_tokens", pa.int32()), ("media_tokens", pa.int32()),
                    ("num_media", pa.int32()), ("kind", pa.int8()), ("media_bytes", pa.int64()),
                    ("line", pa.int64()), ("offset", pa.int64()), ("rec_offset", pa.int64()),
                    ("rec_len", pa.int64()), ("id_kind", pa.int8()), ("label_tokens", pa.int32()),
                    ("id_hash", pa.uint64()), *((col, pa.int32()) for col in TOKEN_COLUMNS.values())])
_ARRAYS = tuple(n for n in SCHEMA.names[1:] if n not in TOKEN_COLUMNS.values())
_UNITS = ("line", "sample", "row")


def _arrow_bytes(r: MeasureResult) -> bytes:
    cols = [r.ids_array()] + [pa.array(np.asarray(getattr(r, name) if name in _ARRAYS else r.kind_tokens[name]),
                                       type=SCHEMA.field(name).type) for name in SCHEMA.names[1:]]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, SCHEMA) as w:
        w.write_table(pa.Table.from_arrays(cols, schema=SCHEMA))
    return sink.getvalue().to_pybytes()


def _rejection_json(r: Rejection) -> list:
    loc = r.locator
    return [loc.file, loc.line, loc.offset, loc.key, loc.unit, r.reason, r.detail, r.id]


def _rejection(value) -> Rejection:
    if not (isinstance(value, list) and len(value) == 8):
        raise ValueError("not a rejection")
    file, line, offset, key, unit, reason, detail, sid = value
    if not (isinstance(file, str) and _is_int(line) and _is_int(offset) and isinstance(key, (str, type(None)))
            and unit in _UNITS and isinstance(reason, str) and isinstance(detail, str)
            and isinstance(sid, (str, type(None)))):
        raise ValueError("not a rejection")
    return Rejection(Locator(file, line, offset, key, unit), reason, detail, sid)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def save_result(store: str | Path, r: MeasureResult) -> None:
    """Save the result of a task whose part file is already in ``store`` (the task wrote it):
    ``part-<task>.arrow`` and then ``part-<task>.result.json`` (atomic writes, the result file
    last). ``r`` must still hold its arrays and media list (not :meth:`~MeasureResult.flatten`\\ ed).
    Raises ``OSError``."""
    data = _arrow_bytes(r)
    atomic_write(arrays_path(store, r.index), data)
    s = r.stats
    meta = {"format": FORMAT, "index": r.index, "file_idx": r.file_idx, "num_samples": len(r.rec_len),
            "files": {"part": {"sha256": r.part_sha256, "size": r.part_size},
                      "arrays": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}},
            "media": [fp.to_json() for fp in r.media_files],
            "rejections": [_rejection_json(x) for x in r.rejections],
            "stats": {"lines": s.lines, "blank": s.blank, "records": s.records, "reasons": dict(s.reasons),
                      "members_without_key": s.members_without_key, "members_not_files": s.members_not_files},
            "seconds_read": r.seconds_read, "seconds_count": r.seconds_count,
            "text_bounds": [r.bound_counted_max, r.bound_skipped_min], **({"split": r.split} if r.split else {})}
    atomic_write(result_path(store, r.index), sealed_json_bytes(meta))


def _file_ok(path: Path, want: dict) -> bool:
    try:
        return path.stat().st_size == want["size"] and file_sha256(path) == (want["sha256"], want["size"])
    except (OSError, KeyError, TypeError):
        return False


def read_result(store: str | Path, index: int, file_idx: int, *, check_part: bool = True) -> MeasureResult | None:
    """The saved result of task ``index`` (of input ``file_idx``) in ``store``, with its arrays and
    its media fingerprints, or ``None`` when any of its files is missing, damaged, of another task,
    or does not match its recorded sha256 (the Arrow file always; the records part file too with
    ``check_part``: it is read once, about the size of the task's input text). Never raises for a
    file's content (``OSError`` is ``None`` too); nothing read is executed."""
    meta = read_sealed_json(result_path(store, index))
    if meta is None or meta.get("format") != FORMAT or meta.get("index") != index or meta.get("file_idx") != file_idx:
        return None
    try:
        files, n = meta["files"], meta["num_samples"]
        data = arrays_path(store, index).read_bytes()
        if hashlib.sha256(data).hexdigest() != files["arrays"]["sha256"] or len(data) != files["arrays"]["size"]:
            return None
        if check_part and not _file_ok(part_path(store, index), files["part"]):
            return None
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        if not table.schema.equals(SCHEMA) or table.num_rows != n:
            return None
        table.validate(full=True)
        table = table.combine_chunks()
        cols = {name: table.column(name).chunk(0) if table.column(name).num_chunks else
                pa.array([], SCHEMA.field(name).type) for name in SCHEMA.names}
        st = meta["stats"]
        stats = ReadStats(int(st["lines"]), int(st["blank"]), int(st["records"]),
                          {str(k): int(v) for k, v in dict(st["reasons"]).items()},
                          int(st.get("members_without_key", 0)), int(st.get("members_not_files", 0)))
        media = [Fingerprint.from_json(x) for x in meta["media"]]
        bounds = meta["text_bounds"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(x) and x >= 0 for x in bounds)):
            return None
        r = MeasureResult(
            index=index, file_idx=file_idx, ids=cols["id"],
            **{name: cols[name].to_numpy(zero_copy_only=False) for name in _ARRAYS},
            kind_tokens={col: cols[col].to_numpy(zero_copy_only=False) for col in TOKEN_COLUMNS.values()},
            media_files=media, media_sha256=media_files_sha256(media),
            rejections=[_rejection(x) for x in meta["rejections"]], stats=stats,
            seconds_read=float(meta["seconds_read"]), seconds_count=float(meta["seconds_count"]),
            part_sha256=str(files["part"]["sha256"]), part_size=int(files["part"]["size"]),
            bound_counted_max=bounds[0], bound_skipped_min=bounds[1],
            split={str(k): int(v) for k, v in dict(meta.get("split") or {}).items()})
    except (OSError, KeyError, TypeError, ValueError, AttributeError, pa.ArrowException):
        return None
    return r
