"""Media checked while the model loads: the core a first count leaves idle, put to work.

Before a local pool's count workers fork, the driver loads the model (tokenizer, chat template,
media settings, the tokenizer's encoder; 1-2 s for Qwen2.5-VL with its load recipe, 5-9 s without)
and warms up what the workers share (:func:`vlmpack.pack.executors.make_executor`), on one core, while the others wait.
The default media check (:mod:`vlmpack.media.check_table`) needs no model: its verdict and header
facts depend on an item's bytes alone. So :func:`media_precheck` forks one process first, which
reads the count tasks' records (the last task first: the workers start at the first) and probes
every media item into the media check table (:func:`vlmpack.media.probe.probe_media`, the workers'
own call and table), until the workers exist; each item it accepted is then a table hit for them
(sha256 of the bytes, then a row read) instead of a decode.

The pre-check changes no verdict and no output byte: a row holds an accepted item's facts by its
bytes' sha256 under the same rules, whoever wrote it; a rejection is never kept, so the worker that
meets a rejected item checks it again and says why. It is an aid only: it runs only where it can
gain (a fork pool of two or more workers, a check table, a model not loaded yet in this process),
every error in it is swallowed (the workers check what it did not), it ignores SIGINT (the driver
stops it), dies with the driver (``PR_SET_PDEATHSIG``) and is stopped, then reaped, when the count
ends. On the 5,783 demo records at L = 4096 with two workers it got through 2,300-3,400 of their
media references before the workers started, and the whole command took about 0.85x the wall time
(docs/benchmarks.md, ``bench/bench_peers.py``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import get_context

from vlmpack.media.check_table import open_table
from vlmpack.media.probe import probe_media
from vlmpack.models import loaded_before
from vlmpack.pack.count_task import MeasureTask, read_records
from vlmpack.pack.executors import worker_init
from vlmpack.pack.stages import Workers
from vlmpack.records import ReadStats, Rejection

__all__ = ["DRY_RECORDS", "FLUSH_EVERY", "JOIN_S", "Precheck", "media_precheck", "precheck_tasks"]

log = logging.getLogger(__name__)

#: Items probed between two writes of the table (rows become visible to the workers when written).
FLUSH_EVERY = 32
#: Records in a row without a media item after which the pre-check ends (text-only data: nothing to gain).
DRY_RECORDS = 1000
#: Seconds the count's end waits for a stopped pre-check to finish its item before killing it.
JOIN_S = 5.0


def precheck_tasks(tasks: Sequence[MeasureTask], stop=None) -> int:
    """Probe every media item of ``tasks``'s records, last task first, into the media check table
    of ``tasks[0].check_table`` at each task's ``media_check`` level, until ``stop`` (an object
    with ``is_set()``, e.g. a ``multiprocessing.Event``; ``None``: never) is set. Returns the number
    of media references probed (accepted or not; a file referenced again is answered by the
    per-process cache of :func:`vlmpack.media.probe.probe_media`, and counted again). Ends early
    after :data:`DRY_RECORDS` records in a row without media (text-only data).
    Never raises for a record, an item or the table (a record that does not parse, an item
    rejected: skipped, the workers say why); skips tasks reading ``--media-lmdb`` stores (an LMDB
    environment is not to be used across a fork)."""
    table = open_table(tasks[0].check_table or None) if tasks else None
    if table is None:
        return 0
    probed = dry = 0
    try:
        for task in reversed(tasks):
            if task.media_lmdb:
                continue
            for rec in _records(task):
                if stop is not None and stop.is_set():
                    return probed
                if isinstance(rec, Rejection):
                    continue
                dry = 0 if rec.media else dry + 1
                if dry >= DRY_RECORDS:  # text-only records: reading them gains the workers nothing
                    return probed
                for item in rec.media:
                    try:
                        probe_media(item.path, item.kind, task.media_check, media_root=task.media_root,
                                    allow_absolute_media=task.allow_absolute_media,
                                    max_bytes=task.max_media_bytes, table=table)
                    except Exception:  # noqa: BLE001,S112 - a rejection: the worker meets it and says why
                        continue
                    finally:
                        probed += 1
                        if probed % FLUSH_EVERY == 0:
                            table.flush()
    finally:
        table.flush()
    return probed


def _records(task: MeasureTask) -> Iterator:
    """The task's records, or none when its input cannot be read (the worker raises that)."""
    try:
        yield from read_records(task, ReadStats())
    except Exception:  # noqa: BLE001 - the count task reads it again and raises it there
        log.debug("media pre-check: cannot read task %d", task.index, exc_info=True)


def _child(tasks: Sequence[MeasureTask], stop, probed) -> None:
    worker_init()  # SIGINT left to the driver, dies with it
    try:
        probed.value = precheck_tasks(tasks, stop)
    except BaseException:  # noqa: BLE001 - an aid: never a traceback of its own
        pass


class Precheck:
    """A running pre-check (:func:`media_precheck`): :meth:`stop` it once the count workers exist.
    ``probed``: media items it probed (set when it has ended; 0 without a pre-check)."""

    def __init__(self, tasks: Sequence[MeasureTask] | None) -> None:
        self.probed = 0
        self._proc = self._stop = self._count = None
        if tasks:
            ctx = get_context("fork")
            self._stop, self._count = ctx.Event(), ctx.Value("q", 0)
            proc = ctx.Process(target=_child, args=(list(tasks), self._stop, self._count), daemon=True,
                               name="vlmpack-media-precheck")
            try:
                proc.start()
                self._proc = proc
            except (AssertionError, OSError) as e:  # a daemonic process may not fork one; no process left
                log.debug("media pre-check not started (%s)", e)

    def stop(self) -> None:
        """Ask the pre-check to end after its current record (returns at once)."""
        if self._stop is not None:
            self._stop.set()

    def close(self, *, kill: bool = False) -> None:
        """Stop the pre-check, wait up to :data:`JOIN_S` seconds for it to end (``kill``: not at all), else
        kill it; then take its count (0 when killed)."""
        if self._proc is None:
            return
        self.stop()
        self._proc.join(0 if kill else JOIN_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self.probed = int(self._count.value)
        self._proc = None


@contextmanager
def media_precheck(tasks: Sequence[MeasureTask], workers: Workers, model_dir: str, processor: str = ""
                   ) -> Iterator[Precheck]:
    """A :class:`Precheck` of ``tasks`` (the count tasks to run) forked now when it can gain: a
    local fork pool (Linux) of ``workers.workers >= 2``, a media check table (the tasks'
    ``check_table``) and ``model_dir`` with ``processor`` not loaded before in this process (then the
    pool starts at once); else one that does nothing. Stopped and reaped on leaving the block,
    whatever is raised."""
    useful = (workers.executor == "local" and workers.workers >= 2 and sys.platform.startswith("linux")
              and bool(tasks) and bool(tasks[0].check_table) and not loaded_before(model_dir, processor))
    pre = Precheck(tasks if useful else None)
    try:
        yield pre
    except BaseException:
        pre.close(kill=True)  # a failed or stopped count: no waiting for its item
        raise
    finally:
        pre.close()
        if pre.probed:
            log.info("media pre-check: %d media items probed while the model loaded", pre.probed)
