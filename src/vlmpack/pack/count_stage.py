"""Count stage of ``vlmpack pack`` and ``vlmpack plan --input``: every count task runs once per count key.

A *store* is a folder holding the count tasks' outputs for one count key
(:func:`vlmpack.pack.stages.count_key`): per task ``part-<task>.jsonl`` (the canonical accepted
records, read back by the writer), ``part-<task>.arrow`` and ``part-<task>.result.json`` (its
:class:`~vlmpack.pack.count_task.MeasureResult` as data: Arrow IPC + sealed JSON with the sha256 of
the other two, :mod:`vlmpack.pack.results`), plus ``count.json`` naming the key it holds. Two
stores exist:

- the run's own, ``OUT/.vlmpack/records/`` (resume; kept by ``--overwrite``, so another
  ``--seq-len`` re-plans without counting): a store stamped with another key is emptied first;
- the shared cache ``<cache root>/<count key>/`` (:func:`vlmpack.pack.stages.count_cache_dir`),
  filled by ``vlmpack plan --input`` and by every ``pack`` (hard links when on the same file
  system, else copies), read by both: a ``pack`` into a new ``OUT`` takes its finished tasks from
  there instead of counting. Writers of a cache store hold its ``lock`` (``flock``); ``pack``
  publishes only when it gets the lock at once, ``plan`` waits for it.

A task's output is reused when its files parse and match their recorded sha256 (the part file's
text included: an edit that keeps its length is seen; :func:`vlmpack.pack.results.read_result`),
none of its media items changed since (their content sha256, :mod:`vlmpack.media.fingerprint`;
:func:`vlmpack.pack.count_task.media_changed`) and ``--seq-len`` leaves the same samples
untokenized (:meth:`~vlmpack.pack.count_task.MeasureResult.fits`: the count key holds no L, so
only a task with a sample whose text alone is about L tokens or more is counted again); otherwise
the task is counted again. Nothing read
from a store is executed (no pickle). Files are written with :func:`vlmpack.fsio.atomic_write` (the
part first: a result file marks a task done), so a kill at any point leaves stores that the next
run can use.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from vlmpack import signals
from vlmpack.config import PackConfig
from vlmpack.fsio import atomic_write, fsync_dir, read_sealed_json, sealed_json_bytes
from vlmpack.media.check_table import prepare_table
from vlmpack.models import check_processor
from vlmpack.models.load_recipe import use_cache_root
from vlmpack.pack import count_task as count_mod
from vlmpack.pack import stages
from vlmpack.pack.count_task import (
    MeasureResult,
    MeasureTask,
    arrays_path,
    media_changed,
    media_files_sha256,
    part_path,
    result_path,
)
from vlmpack.pack.executors import guarded_executor, run_tasks
from vlmpack.pack.manifest import InputFiles, build_manifest
from vlmpack.pack.media_precheck import media_precheck
from vlmpack.pack.nodes import InputRange, node_ranges
from vlmpack.pack.results import read_result, save_result
from vlmpack.pack.stages import CountOptions, Workers, count_cache_dir, count_key, count_payload
from vlmpack.records import ReadStats, Rejection

log = logging.getLogger(__name__)

STAMP = "count.json"  # the count key a store holds


def claim_store(store: Path, key: str, payload: dict | None = None) -> None:
    """Make ``store`` hold count key ``key``: create it; when its stamp (sealed JSON) names another
    key (or none, or does not match its checksum), delete its task files (``part-*``, vlmpack's own
    names) and then write the stamp (with ``payload``, for people). Raises ``OSError`` when the
    folder cannot be written."""
    store.mkdir(parents=True, exist_ok=True)
    stamp = read_sealed_json(store / STAMP)
    if stamp is not None and stamp.get("count_key") == key:
        return
    for p in store.glob("part-*"):
        p.unlink()
    atomic_write(store / STAMP, sealed_json_bytes({"count_key": key, **({"payload": payload} if payload else {})},
                                                  indent=1, sort_keys=True))


def load_result(store: Path, task: MeasureTask) -> MeasureResult | None:
    """The finished output of ``task`` in ``store``, or ``None`` when missing, unreadable, not
    matching its recorded sha256 (:func:`vlmpack.pack.results.read_result`; logged when the files
    are there) or counted from media that changed since (content sha256)."""
    r = read_result(store, task.index, task.file_idx)
    if r is None:
        if result_path(store, task.index).exists():
            log.warning("the saved counts of task %d in %s do not match their checksums or cannot be read; "
                        "counting it again", task.index, store)
        return None
    changed = media_changed(r.media_files)
    if changed is not None:
        log.warning("media file %s changed since it was counted; counting task %d again", changed, task.index)
        return None
    if not r.fits(task.token_limit):
        log.info("task %d was counted for another --seq-len that leaves other samples untokenized; counting "
                 "it again", task.index)
        return None
    return r


def copy_task(src: Path, dst: Path, index: int) -> None:
    """Put task ``index``'s files of store ``src`` into store ``dst``: a hard link (no copy) where
    both are on one file system, else a copy; each file appears atomically, the part first.
    Raises ``OSError`` (disk full, read-only, ...)."""
    for name in (part_path(src, index).name, arrays_path(src, index).name, result_path(src, index).name):
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


def _tasks(opts: CountOptions, store: Path, ranges: list[InputRange], cache: Path | None) -> list[MeasureTask]:
    return [MeasureTask(i, fi, path, start, end, first, opts.input_schema, opts.media_root,
                        opts.allow_absolute_media, opts.media_check, opts.model, str(store), opts.special_tokens,
                        fmt, opts.media_lmdb, opts.text_key, token_limit=opts.token_limit,
                        max_member_bytes=opts.max_member_bytes, max_media_bytes=opts.max_media_bytes,
                        record_map=opts.record_map, layout=opts.layout, processor=opts.processor,
                        split_limit=opts.split_limit, check_table=str(cache) if cache is not None else "")
            for i, (fi, path, fmt, start, end, first, _) in enumerate(ranges)]


def count_stage(opts: CountOptions, store: Path, ranges: list[InputRange], key: str, reuse: dict, *,
                workers: Workers = Workers(), cache: Path | None = None,
                payload: dict | None = None, check_table: Path | None = None) -> list[MeasureResult]:
    """The results of every count task of ``ranges`` for count key ``key``, in task order, counted
    with ``opts`` on ``workers``.

    Reused from ``store`` (emptied first when it holds another key), else taken from the cache
    store ``cache/<key>`` when given, else counted into ``store`` (a pool is started, and the model
    loaded, only then). With ``cache``, every task done in ``store`` is also published there when its
    lock is free, and the tasks share the media check table in ``cache``
    (:mod:`vlmpack.media.check_table`: each accepted media content is checked once across runs;
    ``check_table``: the cache root holding it when ``cache`` is not given).
    ``reuse`` gets ``count_tasks``, ``count_tasks_reused`` (not counted by this run)
    and ``count_tasks_from_cache``. The model load recipes (:mod:`vlmpack.models.load_recipe`) are
    kept in the same cache root, or not at all without one. Problems with the cache are logged and
    ignored. Raises what the tasks raise (:class:`vlmpack.errors.InputError`, :class:`vlmpack.errors.ConfigError`) and
    ``OSError`` for ``store``.
    """
    claim_store(store, key, payload)
    use_cache_root(check_table or cache)  # the model load recipes live beside the counts (load_recipe)
    tasks = _tasks(opts, store, ranges, check_table or cache)
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
            if r is None and shared is not None and result_path(shared, t.index).is_file():
                try:  # checked where it is used: a cache file swapped meanwhile is seen
                    copy_task(shared, store, t.index)
                    r = load_result(store, t)
                except OSError as e:  # a cache entry with a file missing: counted again
                    log.warning("cannot take task %d from the count cache %s (%s)", t.index, shared, e.strerror or e)
                from_cache += r is not None
            if r is None:
                todo.append(t)
            if r is not None:
                r.reused = True  # its seconds are the earlier run's: not this run's (report.json seconds)
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
            save_result(store, r)
            r.flatten().release()  # the arrays are in the saved result: build_manifest reads them back
            results[t.index] = r
            share(t.index, fresh=True)  # replaces a stale entry (media changed since)

        if todo:
            prepare_table(check_table or cache)  # before the workers open it at once
            weights = [r.nbytes for r in ranges]
            with media_precheck(todo, workers, opts.model, opts.processor) as pre, \
                    guarded_executor(workers.executor, workers.workers, opts.model, workers.ray_address,
                                     processor=opts.processor) as pool:
                pre.stop()  # the workers exist: they check the rest
                run_tasks(pool, count_mod.run_task, todo, done=save, desc="count",
                          weights=[weights[t.index] for t in todo], unit="B", show=workers.progress)
        for t in tasks:  # counted before the cache existed, or while it was busy
            share(t.index, fresh=False)
    return results  # type: ignore[return-value]


def media_digest(results: list[MeasureResult]) -> str:
    """sha256 (hex) of every task's media items as counted (reference, size, content sha256), in task order."""
    h = hashlib.sha256()
    for r in results:
        h.update((r.media_sha256 or media_files_sha256(r.media_files)).encode())
    return h.hexdigest()


def read_stats(results: list[MeasureResult]) -> ReadStats:
    """Records, lines, blank lines and skipped tar members read over all tasks."""
    stats = ReadStats()
    for r in results:
        stats.lines += r.stats.lines
        stats.blank += r.stats.blank
        stats.records += r.stats.records
        stats.members_without_key += r.stats.members_without_key
        stats.members_not_files += r.stats.members_not_files
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
    Raises :class:`vlmpack.errors.ConfigError` / :class:`vlmpack.errors.InputError` (model, processor
    options, inputs)."""
    check_processor(cfg.model, cfg.processor)
    payload = cfg.fingerprint_payload()
    ranges, _ = node_ranges(cfg, stages.task_bytes(cfg))
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
        results = count_stage(CountOptions.of(cfg), where, ranges, key, reuse, workers=Workers.of(cfg),
                              payload=count_payload(cfg, payload), check_table=root)
        manifest, rejections = build_manifest(InputFiles.of(cfg), results, where)
    return Counted(manifest, rejections, read_stats(results), key, store, reuse)


def split_totals(results: list[MeasureResult]) -> dict | None:
    """``--overlong split``'s figures summed over the tasks (:attr:`MeasureResult.split`), with
    ``entries_added_by_file`` (input file index -> pieces and dropped turns added); None when no
    sample was split."""
    if not any(r.split for r in results):
        return None
    out: dict = {}
    by_file: dict[int, int] = {}
    for r in results:
        for k, v in r.split.items():
            out[k] = out.get(k, 0) + v
        by_file[r.file_idx] = by_file.get(r.file_idx, 0) + r.split.get("entries_added", 0)
    return out | {"entries_added_by_file": by_file}
