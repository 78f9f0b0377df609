"""Count stage of ``vlmpack pack`` and ``vlmpack plan --input``: every count task runs once per count key.

A *store* is a folder holding the count tasks' outputs for one count key
(:func:`vlmpack.pack.stages.count_key`): per task ``part-<task>.jsonl`` (the canonical accepted
records, read back by the writer) and ``part-<task>.result.pkl`` (its
:class:`~vlmpack.pack.count.MeasureResult`), plus ``count.json`` naming the key it holds. Two
stores exist:

- the run's own, ``OUT/.vlmpack/records/`` (resume; kept by ``--overwrite``, so another
  ``--seq-len`` re-plans without counting): a store stamped with another key is emptied first;
- the shared cache ``<cache root>/<count key>/`` (:func:`vlmpack.pack.stages.count_cache_dir`),
  filled by ``vlmpack plan --input`` and by every ``pack`` (hard links when on the same file
  system, else copies), read by both: a ``pack`` into a new ``OUT`` takes its finished tasks from
  there instead of counting. Writers of a cache store hold its ``lock`` (``flock``); ``pack``
  publishes only when it gets the lock at once, ``plan`` waits for it.

A task's output is reused when both files are readable and consistent (the part file has the size
the result's offsets say) and none of its media files changed since (size + mtime,
:func:`vlmpack.pack.count.media_changed`); otherwise the task is counted again. Files are written
with :func:`vlmpack.pack.rundir.atomic_write` (the part first: a result file marks a task done), so
a kill at any point leaves stores that the next run can use.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import pickle
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vlmpack import signals
from vlmpack.config import PackConfig
from vlmpack.pack import count as count_mod
from vlmpack.pack import stages
from vlmpack.pack.count import MeasureResult, MeasureTask, media_changed, media_files_sha256, part_path
from vlmpack.pack.executors import guarded_executor, run_tasks
from vlmpack.pack.nodes import InputRange, node_ranges
from vlmpack.pack.rundir import atomic_write, fsync_dir, json_bytes, read_json, read_pickle
from vlmpack.pack.stages import count_cache_dir, count_key, count_payload
from vlmpack.records import ID_KINDS, Locator, ReadStats, Rejection
from vlmpack.sources import get_source, resolve_format

log = logging.getLogger(__name__)

STAMP = "count.json"  # the count key a store holds


def result_path(store: Path, index: int) -> Path:
    """The result file of task ``index`` in ``store``."""
    return store / f"part-{index:06d}.result.pkl"


def claim_store(store: Path, key: str, payload: dict | None = None) -> None:
    """Make ``store`` hold count key ``key``: create it; when its stamp names another key (or none),
    delete its task files (``part-*``, vlmpack's own names) and then write the stamp (with
    ``payload``, for people). Raises ``OSError`` when the folder cannot be written."""
    store.mkdir(parents=True, exist_ok=True)
    stamp = read_json(store / STAMP)
    if isinstance(stamp, dict) and stamp.get("count_key") == key:
        return
    for p in store.glob("part-*"):
        p.unlink()
    atomic_write(store / STAMP, json_bytes({"count_key": key, **({"payload": payload} if payload else {})},
                                           indent=1, sort_keys=True))


def load_result(store: Path, task: MeasureTask) -> MeasureResult | None:
    """The finished output of ``task`` in ``store``, or ``None`` when missing, unreadable,
    inconsistent (part file size) or counted from media that changed since."""
    r = read_pickle(result_path(store, task.index))
    if not isinstance(r, MeasureResult) or r.index != task.index or r.file_idx != task.file_idx:
        return None
    try:
        size = part_path(store, task.index).stat().st_size
    except OSError:
        return None
    if size != (int(r.rec_offset[-1] + r.rec_len[-1]) + 1 if len(r.rec_len) else 0):
        return None
    changed = media_changed(r.media_files)
    if changed is not None:
        log.warning("media file %s changed since it was counted; counting task %d again", changed, task.index)
        return None
    return r


def copy_task(src: Path, dst: Path, index: int) -> None:
    """Put task ``index``'s files of store ``src`` into store ``dst``: a hard link (no copy) where
    both are on one file system, else a copy; each file appears atomically, the part first.
    Raises ``OSError`` (disk full, read-only, ...)."""
    for name in (part_path(src, index).name, result_path(src, index).name):
        tmp = dst / (name + ".link.tmp")
        try:
            tmp.unlink(missing_ok=True)
            os.link(src / name, tmp)
        except OSError:  # another file system, or links not allowed
            atomic_write(dst / name, (src / name).read_bytes())
            continue
        os.replace(tmp, dst / name)
        fsync_dir(dst)


@contextmanager
def store_lock(store: Path, *, wait: bool):
    """Hold the exclusive ``flock`` of ``store/lock`` for the block; yields ``True`` when held and
    ``False`` when another process holds it and ``wait`` is false (with ``wait``: polls every
    :data:`vlmpack.signals.POLL_S` seconds, so an interrupt still stops it). The lock goes with the
    process, also on SIGKILL. Raises ``OSError`` when the folder cannot be created."""
    import fcntl

    store.mkdir(parents=True, exist_ok=True)
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if not wait:
                    yield False
                    return
                if not said:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    log.warning("waiting for the count cache %s (in use by pid %s)", store, holder)
                    said = True
                signals.check()
                time.sleep(signals.POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield True
    finally:
        os.close(fd)


def _tasks(cfg: PackConfig, store: Path, ranges: list[InputRange]) -> list[MeasureTask]:
    return [MeasureTask(i, fi, path, start, end, first, cfg.input_schema, str(cfg.media_root),
                        cfg.allow_absolute_media, cfg.media_check, str(cfg.model), str(store), cfg.special_tokens,
                        fmt, tuple(sorted(cfg.media_lmdb.items())), cfg.text_key)
            for i, (fi, path, fmt, start, end, first, _) in enumerate(ranges)]


def count_stage(cfg: PackConfig, store: Path, ranges: list[InputRange], key: str, reuse: dict, *,
                cache: Path | None = None, payload: dict | None = None) -> list[MeasureResult]:
    """The results of every count task of ``ranges`` for count key ``key``, in task order.

    Reused from ``store`` (emptied first when it holds another key), else taken from the cache
    store ``cache/<key>`` when given, else counted into ``store`` (a pool is started, and the model
    loaded, only then). With ``cache``, every task done in ``store`` is also published there when its
    lock is free. ``reuse`` gets ``count_tasks``, ``count_tasks_reused`` (not counted by this run)
    and ``count_tasks_from_cache``. Problems with the cache are logged and ignored. Raises what the
    tasks raise (:class:`vlmpack.errors.InputError`, :class:`vlmpack.errors.ConfigError`) and
    ``OSError`` for ``store``.
    """
    claim_store(store, key, payload)
    tasks = _tasks(cfg, store, ranges)
    results: list[MeasureResult | None] = [None] * len(tasks)
    with ExitStack() as stack:
        shared, publish = None, False
        if cache is not None:
            try:
                held = stack.enter_context(store_lock(cache / key, wait=False))
                shared = cache / key
                if held:
                    claim_store(shared, key, payload)
                    publish = True
                else:
                    log.info("count cache %s is in use by another run; reading it, not publishing to it", shared)
            except OSError as e:
                log.warning("count cache %s cannot be used (%s); counting without it", cache, e.strerror or e)
                shared, publish = None, False
        todo, from_cache = [], 0
        for t in tasks:
            r = load_result(store, t)
            if r is None and shared is not None and (r := load_result(shared, t)) is not None:
                copy_task(shared, store, t.index)
                from_cache += 1
            if r is None:
                todo.append(t)
            if r is not None:
                r.flatten().release()
            results[t.index] = r
        reuse.update(count_tasks=len(tasks), count_tasks_reused=len(tasks) - len(todo),
                     count_tasks_from_cache=from_cache)

        def share(index: int, fresh: bool) -> None:
            nonlocal publish
            if publish and (fresh or not result_path(shared, index).is_file()):
                try:
                    copy_task(store, shared, index)
                except OSError as e:
                    log.warning("cannot publish counts to %s (%s); going on without", shared, e.strerror or e)
                    publish = False

        def save(t: MeasureTask, r: MeasureResult) -> None:
            atomic_write(result_path(store, t.index), pickle.dumps(r))
            r.flatten().release()  # the arrays are in the saved result: build_manifest reads them back
            results[t.index] = r
            share(t.index, fresh=True)  # replaces a stale entry (media changed since)

        if todo:
            weights = [r.nbytes for r in ranges]
            with guarded_executor(cfg.executor, cfg.workers, str(cfg.model), cfg.ray_address) as pool:
                run_tasks(pool, count_mod.run_task, todo, done=save, desc="count",
                          weights=[weights[t.index] for t in todo], unit="B", show=cfg.progress)
        for t in tasks:  # counted before the cache existed, or while it was busy
            share(t.index, fresh=False)
    return results  # type: ignore[return-value]


def media_digest(results: list[MeasureResult]) -> str:
    """sha256 (hex) of every task's media files as counted (reference, size, mtime), in task order."""
    h = hashlib.sha256()
    for r in results:
        h.update((r.media_sha256 or media_files_sha256(r.media_files)).encode())
    return h.hexdigest()


def duplicate_positions(ids, id_kind: np.ndarray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sort-based duplicate detection: ``(dups, firsts)``, int64 positions of every sample whose
    ``(id_kind, id)`` occurred before, in increasing order, and the position of that first
    occurrence for each.

    With ``hashes`` (uint64 per sample, :func:`vlmpack.pack.count.id_key_hashes`): a stable argsort
    of the hashes puts equal keys next to each other in input order; only runs of equal hashes
    (duplicates, or a 64-bit collision) are then compared on the ids themselves, so a collision
    never merges two different ids. Memory: 8-byte permutation + sorted hashes. Without: a stable
    Arrow ``sort_indices`` of (id, id_kind) and adjacent comparison of the sorted ids (exact, but
    one sorted copy of the ids). ``ids``: Arrow string array or chunked array."""
    n = len(ids)
    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if n < 2:
        return none
    if hashes is not None and len(hashes) == n:
        order = np.argsort(hashes, kind="stable")
        sh = hashes[order]
        same = sh[1:] == sh[:-1]
        del sh
        if not same.any():
            return none
        starts = np.flatnonzero(np.concatenate([[True], ~same]))  # run starts in sorted order
        ends = np.concatenate([starts[1:], [n]])
        dups, firsts = [], []
        for a, z in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist()):
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
_COLUMNS = {"num_tokens": np.int32, "media_tokens": np.int32, "num_media": np.int16, "kind": np.int8,
            "media_bytes": np.int64, "line": np.int64, "offset": np.int64, "rec_offset": np.int64,
            "rec_len": np.int64}


def build_manifest(cfg: PackConfig, results: list[MeasureResult],
                   store: Path | None = None) -> tuple[pa.Table, list[Rejection]]:
    """Concatenate the task results into the manifest (valid, unique samples in input order)
    and the list of rejections, duplicates included. Ids are compared as ``(id_kind, id)``
    (:data:`vlmpack.records.ID_KINDS`) by :func:`duplicate_positions`; the first occurrence in
    input order is kept.

    Flat in memory: every column is allocated once at its final size and filled task by task
    (the ids: one Arrow chunk per task); a result whose arrays were released on the driver
    (:meth:`MeasureResult.release`, done by :func:`count_stage`) is read back from its saved file
    in ``store``, one task at a time, so the per-task results and the manifest are never both
    held. Raises ``ValueError`` when a released result cannot be read back."""
    counts = [r.num_samples if r.released else len(r.ids) for r in results]
    total = int(sum(counts))
    cols = {k: np.empty(total, dt) for k, dt in _COLUMNS.items()}
    cols["id_kind"] = np.empty(total, np.int8)
    cols["label_tokens"] = np.empty(total, np.int32)
    hashes: np.ndarray | None = np.empty(total, np.uint64)
    chunks, rejections, pos = [], [], 0
    for r, n in zip(results, counts):
        full = r
        if r.released:
            full = read_pickle(result_path(store, r.index)) if store is not None else None
            if not isinstance(full, MeasureResult) or len(full.rec_len) != n:
                raise ValueError(f"the counts of task {r.index} cannot be read back from {store}")
        for k in _COLUMNS:
            cols[k][pos:pos + n] = getattr(full, k)
        kinds, labels = getattr(full, "id_kind", ()), getattr(full, "label_tokens", ())
        cols["id_kind"][pos:pos + n] = kinds if len(kinds) == n else 0
        cols["label_tokens"][pos:pos + n] = labels if len(labels) == n else -1  # -1: counted by an older vlmpack
        h = getattr(full, "id_hash", None)
        if hashes is not None and h is not None and len(h) == n:
            hashes[pos:pos + n] = h
        else:
            hashes = None  # counted by an older vlmpack: duplicates by sorting the ids themselves
        chunks.append(full.ids_array())
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
        loc = locator(cfg, file_idx[i], int(cols["line"][i]), int(cols["offset"][i]))
        first = str(locator(cfg, file_idx[f], int(cols["line"][f]), 0))
        rejections.append(Rejection(loc, "duplicate_id", f"{ID_KINDS[k]} id {sid!r} first seen at {first}", sid))
    if len(dups):
        keep = np.ones(total, dtype=bool)
        keep[dups] = False
        ids = ids.filter(pa.array(keep))
        cols = {k: v[keep] for k, v in cols.items()}
    order = ("id_kind", "num_tokens", "media_tokens", "label_tokens", "num_media", "kind", "media_bytes",
             "file_idx", "line", "offset", "part", "rec_offset", "rec_len")
    return pa.table({"id": ids, **{k: cols[k] for k in order}}), rejections


def manifest_digest(manifest: pa.Table) -> str:
    """sha256 (hex) of the manifest's content: with the plan options, the key of the plan
    (:func:`vlmpack.pack.stages.plan_key`), so a resume whose counts changed (media edited since)
    plans and writes again."""
    h = hashlib.sha256()
    for name in manifest.column_names:
        col = manifest.column(name)
        if pa.types.is_string(col.type):  # lengths + UTF-8 bytes, read from the Arrow buffers
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + len(arr) + 1]
            h.update(np.diff(offsets).astype(np.int64).tobytes())
            if len(arr):
                h.update(memoryview(arr.buffers()[2])[offsets[0]:offsets[-1]])
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
        h.update(name.encode())
    return h.hexdigest()


def locator(cfg: PackConfig, file_idx: int, number: int, offset: int) -> Locator:
    """The locator of a manifest row (its file's format decides what ``number`` counts)."""
    path = cfg.input[file_idx]
    return Locator(path, number, offset, None, _unit(path, cfg.input_format))


@functools.lru_cache(maxsize=1024)
def _unit(path: str, input_format: str) -> str:
    return get_source(resolve_format(path, input_format)).unit


def read_stats(results: list[MeasureResult]) -> ReadStats:
    """Records, lines and blank lines read over all tasks."""
    stats = ReadStats()
    for r in results:
        stats.lines += r.stats.lines
        stats.blank += r.stats.blank
        stats.records += r.stats.records
    return stats


@dataclass
class Counted:
    """What :func:`count_inputs` gives: the manifest (valid unique samples), the rejections, the
    records read, the count key, where the counts are kept (``None``: a temporary folder, gone)
    and what was reused (``count_tasks``, ``count_tasks_reused``, ``count_tasks_from_cache``)."""

    manifest: pa.Table
    rejections: list[Rejection]
    stats: ReadStats
    key: str
    store: Path | None
    reuse: dict


def count_inputs(cfg: PackConfig) -> Counted:
    """Count ``cfg``'s inputs with its model through the count stage, writing no ``OUT``: the
    counts go to (and come from) the cache store ``<cache root>/<count key>/`` under its lock, or
    to a temporary folder when the cache is off or cannot be created. The pre-flight of
    ``vlmpack plan --input``; a later ``vlmpack pack`` with the same count options reuses them.
    Raises :class:`vlmpack.errors.ConfigError` / :class:`vlmpack.errors.InputError` (model, inputs)."""
    payload = cfg.fingerprint_payload()
    ranges, _ = node_ranges(cfg, stages.TASK_BYTES)
    key = count_key(cfg, payload)
    root = count_cache_dir(cfg)
    reuse: dict = {}
    with ExitStack() as stack:
        store = None
        if root is not None:
            try:
                stack.enter_context(store_lock(root / key, wait=True))
                store = root / key
            except OSError as e:
                log.warning("count cache %s cannot be used (%s); counting into a temporary folder", root,
                            e.strerror or e)
        where = store or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vlmpack-count-")))
        results = count_stage(cfg, where, ranges, key, reuse, payload=count_payload(cfg, payload))
        manifest, rejections = build_manifest(cfg, results, where)
    return Counted(manifest, rejections, read_stats(results), key, store, reuse)
