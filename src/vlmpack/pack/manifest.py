"""The manifest: one row per valid, unique sample, built flat on the driver from the count results.

:func:`build_manifest` fills columns allocated once at their final size, task by task (released
results are read back from their saved files), :func:`duplicate_positions` finds repeated ids by
sorting 64-bit key hashes (confirmed on the ids), :func:`manifest_digest` is the key of the plan
(:func:`vlmpack.pack.stages.plan_key`), :func:`locator` names a manifest row in rejections.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vlmpack.pack.count_task import MeasureResult
from vlmpack.pack.media_tokens import TOKEN_COLUMNS
from vlmpack.pack.results import read_result
from vlmpack.records import ID_KINDS, Locator, Rejection
from vlmpack.sources import get_source, resolve_format

if TYPE_CHECKING:
    from vlmpack.config import PackConfig

__all__ = ["InputFiles", "build_manifest", "duplicate_positions", "manifest_digest"]


def duplicate_positions(ids, id_kind: np.ndarray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sort-based duplicate detection: ``(dups, firsts)``, int64 positions of every sample whose
    ``(id_kind, id)`` occurred before, in increasing order, and the position of that first
    occurrence for each.

    With ``hashes`` (uint64 per sample, :func:`vlmpack.pack.count_task.id_key_hashes`): a sorted copy
    of the hashes finds the values that repeat; the positions holding them, grouped by a stable
    argsort, are then compared on the ids themselves (duplicates, or a 64-bit collision), so a
    collision never merges two different ids. Memory: the sorted copy (8 bytes per sample) while
    it runs, then arrays the size of the repeated positions only. Without: a stable
    Arrow ``sort_indices`` of (id, id_kind) and adjacent comparison of the sorted ids (exact, but
    one sorted copy of the ids). ``ids``: Arrow string array or chunked array."""
    n = len(ids)
    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if n < 2:
        return none
    if hashes is not None and len(hashes) == n:
        sh = np.sort(hashes)
        repeated = np.unique(sh[1:][sh[1:] == sh[:-1]])  # hash values seen more than once
        del sh
        if not len(repeated):
            return none
        at = np.flatnonzero(np.isin(hashes, repeated))  # their positions, in input order
        order = at[np.argsort(hashes[at], kind="stable")]  # grouped by hash, input order within a group
        sh = hashes[order]
        starts = np.flatnonzero(np.concatenate([[True], sh[1:] != sh[:-1]]))
        ends = np.concatenate([starts[1:], [len(order)]])
        dups, firsts = [], []
        for a, z in zip(starts.tolist(), ends.tolist()):
            first_of: dict[tuple[int, str], int] = {}
            for p in order[a:z].tolist():  # input order within the run (stable sort)
                key = (int(id_kind[p]), ids[p].as_py())
                f = first_of.setdefault(key, p)
                if f != p:
                    dups.append(p)
                    firsts.append(f)
        if not dups:
            return none
        d, f = np.asarray(dups, np.int64), np.asarray(firsts, np.int64)
        by = np.argsort(d, kind="stable")
        return d[by], f[by]
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    order = pc.sort_indices(pa.table({"id": ids, "k": pa.array(id_kind, pa.int8())}),
                            sort_keys=[("id", "ascending"), ("k", "ascending")])
    sorted_ids = ids.take(order)
    k = id_kind[order.to_numpy()]
    same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    same &= k[1:] == k[:-1]
    del sorted_ids, k
    if not same.any():
        return none
    pos = order.to_numpy().astype(np.int64)
    run_start = np.maximum.accumulate(np.where(np.concatenate([[False], same]), 0, np.arange(n)))
    dup_sorted = np.flatnonzero(np.concatenate([[False], same]))
    dups, firsts = pos[dup_sorted], pos[run_start[dup_sorted]]
    by_pos = np.argsort(dups, kind="stable")
    return dups[by_pos], firsts[by_pos]


#: Per-sample array fields of :class:`MeasureResult` and their manifest dtypes.
_COLUMNS = {"num_tokens": np.int32, "media_tokens": np.int32, "num_media": np.int32,
            "kind": np.int8, "media_bytes": np.int64, "line": np.int64, "offset": np.int64, "rec_offset": np.int64,
            "rec_len": np.int64}


def build_manifest(inputs: InputFiles, results: list[MeasureResult],
                   store: Path | None = None) -> tuple[pa.Table, list[Rejection]]:
    """Concatenate the task results into the manifest (valid, unique samples in input order)
    and the list of rejections, duplicates included (``inputs``: what their locators name). Ids
    are compared as ``(id_kind, id)`` (:data:`vlmpack.records.ID_KINDS`) by
    :func:`duplicate_positions`; the first occurrence in input order is kept.

    Flat in memory: every column is allocated once at its final size and filled task by task
    (the ids: one Arrow chunk per task); a result whose arrays were released on the driver
    (:meth:`MeasureResult.release`, done by :func:`count_stage`) is read back from its saved files
    in ``store`` (checked against their sha256, :func:`vlmpack.pack.results.read_result`), one task
    at a time, so the per-task results and the manifest are never both held. Raises ``ValueError``
    when a released result cannot be read back."""
    counts = [r.num_samples if r.released else len(r.ids) for r in results]
    total = int(sum(counts))
    cols = {k: np.empty(total, dt) for k, dt in _COLUMNS.items()}
    for col in TOKEN_COLUMNS.values():  # per media kind after the first (video_tokens, audio_tokens)
        cols[col] = np.empty(total, np.int32)
    cols["id_kind"] = np.empty(total, np.int8)
    cols["label_tokens"] = np.empty(total, np.int32)
    hashes: np.ndarray | None = np.empty(total, np.uint64)
    chunks, rejections, pos = [], [], 0
    for r, n in zip(results, counts):
        full = r
        if r.released:
            full = read_result(store, r.index, r.file_idx, check_part=False) if store is not None else None
            if full is None or len(full.rec_len) != n:
                raise ValueError(f"the counts of task {r.index} cannot be read back from {store}")
        for k in _COLUMNS:
            cols[k][pos:pos + n] = getattr(full, k)
        for col in TOKEN_COLUMNS.values():
            cols[col][pos:pos + n] = full.kind_tokens[col]
        kinds, labels = getattr(full, "id_kind", ()), getattr(full, "label_tokens", ())
        cols["id_kind"][pos:pos + n] = kinds if len(kinds) == n else 0
        cols["label_tokens"][pos:pos + n] = labels if len(labels) == n else -1  # -1: counted by an older vlmpack
        h = getattr(full, "id_hash", None)
        if hashes is not None and h is not None and len(h) == n:
            hashes[pos:pos + n] = h
        else:
            hashes = None  # counted by an older vlmpack: duplicates by sorting the ids themselves
        chunks.append(pa.concat_arrays([full.ids_array()]))  # a copy: a view would keep the task's whole file alive
        rejections.extend(full.rejections)
        pos += n
        if full is not r:
            del full
        else:
            r.release()
    ids = pa.chunked_array(chunks, pa.string())
    del chunks
    cols["file_idx"] = np.repeat(np.array([r.file_idx for r in results], np.int32), counts)
    cols["part"] = np.repeat(np.array([r.index for r in results], np.int32), counts)
    id_kind, file_idx = cols["id_kind"], cols["file_idx"]
    dups, firsts = duplicate_positions(ids, id_kind, hashes)
    del hashes
    for i, f in zip(dups.tolist(), firsts.tolist()):
        sid, k = ids[i].as_py(), int(id_kind[i])
        loc = inputs.locator(file_idx[i], int(cols["line"][i]), int(cols["offset"][i]))
        first = str(inputs.locator(file_idx[f], int(cols["line"][f]), 0))
        rejections.append(Rejection(loc, "duplicate_id", f"{ID_KINDS[k]} id {sid!r} first seen at {first}", sid))
    if len(dups):
        keep = np.ones(total, dtype=bool)
        keep[dups] = False
        ids = ids.filter(pa.array(keep))
        for k in list(cols):  # one column at a time: the old one is freed before the next is copied
            cols[k] = cols[k][keep]
    order = ("id_kind", "num_tokens", "media_tokens", *TOKEN_COLUMNS.values(), "label_tokens", "num_media", "kind",
             "media_bytes", "file_idx", "line", "offset", "part", "rec_offset", "rec_len")
    return pa.table({"id": ids, **{k: cols[k] for k in order}}), rejections


def manifest_digest(manifest: pa.Table) -> str:
    """sha256 (hex) of the manifest's content: with the plan options, the key of the plan
    (:func:`vlmpack.pack.stages.plan_key`), so a resume whose counts changed (media edited since)
    plans and writes again."""
    h = hashlib.sha256()
    for name in manifest.column_names:
        col = manifest.column(name)
        if pa.types.is_string(col.type):  # all lengths, then all UTF-8 bytes, read chunk by chunk from the buffers
            chunks = [a for a in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]) if len(a)]
            offsets = [np.frombuffer(a.buffers()[1], np.int32)[a.offset:a.offset + len(a) + 1] for a in chunks]
            for o in offsets:
                h.update(np.diff(o).astype(np.int64).tobytes())
            for a, o in zip(chunks, offsets):
                h.update(memoryview(a.buffers()[2])[o[0]:o[-1]])
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
        h.update(name.encode())
    return h.hexdigest()


@dataclass(frozen=True)
class InputFiles:
    """The run's input files in config order (a manifest row's ``file_idx`` indexes ``paths``) and
    ``--input-format`` (``"auto"``: sniffed per file, :func:`vlmpack.sources.resolve_format`): what a
    row's :class:`~vlmpack.records.Locator` needs. Built from a config with :meth:`of`."""

    paths: tuple[str, ...]
    input_format: str = "auto"

    @classmethod
    def of(cls, cfg: PackConfig) -> InputFiles:
        """The inputs of ``cfg``."""
        return cls(tuple(cfg.input), cfg.input_format)

    def locator(self, file_idx: int, number: int, offset: int) -> Locator:
        """The locator of a manifest row (its file's format decides what ``number`` counts: line,
        sample or row). Raises ``IndexError`` for a ``file_idx`` outside ``paths``."""
        path = self.paths[file_idx]
        return Locator(path, number, offset, None, _unit(path, self.input_format))


@functools.lru_cache(maxsize=1024)
def _unit(path: str, input_format: str) -> str:
    return get_source(resolve_format(path, input_format)).unit
