"""Where pool tasks run: in-process, a local process pool, or a Ray cluster.

All three are ``concurrent.futures.Executor`` objects, so the stages submit the same pure task
functions (:func:`vlmpack.pack.count_task.run_task`, :func:`vlmpack.pack.write.write_shard`) to any of them
and the output bytes do not depend on the choice. Ray is an existing engine (``ray.remote`` +
``ObjectRef.future()``); vlmpack has no scheduler of its own. With Ray, the input, media, model
directory and output must be on a file system every node sees at the same path.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from multiprocessing import get_context

from tqdm import tqdm

from vlmpack import signals
from vlmpack.errors import ConfigError
from vlmpack.models import load_model
from vlmpack.pack.validate import text_bound_of


class InlineExecutor(Executor):
    """Runs tasks in the calling process (``workers=1``): same code path, easy to debug."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            fut.set_exception(e)
        return fut


#: Ray re-runs a task whose worker process died this many times before the run fails.
MAX_RETRIES = 3


class RayExecutor(Executor):
    """Runs each task as a Ray task (``ray.remote(fn).remote(...)``), on the cluster at
    ``address`` (``None``: start or join a local Ray; ``"auto"``: the running cluster).

    ``num_cpus`` limits a local Ray started here. Ray stays initialised after ``shutdown`` (it
    belongs to the user's session). A task whose worker dies (a SIGKILL, an OOM kill, a lost node)
    is re-run by Ray up to :data:`MAX_RETRIES` times (``ray.remote(max_retries=...)``); tasks are
    pure functions of their input range and write shards through ``.tmp`` + rename, so a re-run
    gives the same bytes (``tests/test_ray_cluster.py``). Raises :class:`ConfigError` when ray
    is not installed.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'vlmpack[ray]'") from None
        if not ray.is_initialized():
            kwargs = {"num_cpus": num_cpus} if address is None and num_cpus else {}
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **kwargs)
        self._ray = ray
        self._remote: dict = {}

    def submit(self, fn, /, *args, **kwargs) -> Future:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(max_retries=MAX_RETRIES)(fn)
        return remote.remote(*args, **kwargs).future()


def make_executor(kind: str, workers: int, model_dir: str, ray_address: str | None = None, *,
                  preload: bool = True, created: Callable[[Executor], object] | None = None,
                  processor: str = "") -> Executor:
    """The executor for a run.

    ``kind="local"``: in-process for ``workers <= 1``, else a pool of ``workers`` processes; on
    Linux with ``preload`` the model (with its ``processor`` options) is loaded once here and the
    workers are forked with it (tokenizer parallelism is off, so forking is safe; ``preload=False``
    for tasks that need no model, e.g. writing shards without ``--pretokenize``), elsewhere they
    spawn. Pool workers ignore SIGINT (the parent stops them) and, on Linux, die with their parent
    (``PR_SET_PDEATHSIG``), so killing the parent, even with SIGKILL, leaves no worker behind.
    ``kind="ray"``: :class:`RayExecutor`. ``created`` is called with the executor as soon as it
    exists (before any worker starts), so a caller can stop it whatever is raised meanwhile
    (:func:`guarded_executor`).
    """
    if kind == "ray":
        ray_pool = RayExecutor(ray_address, num_cpus=workers)
        if created is not None:
            created(ray_pool)
        return ray_pool
    if workers <= 1:
        return InlineExecutor()
    if sys.platform.startswith("linux"):
        if preload:  # the workers fork with the model, its tiktoken encoder (models/tiktoken_bpe.py) built
            getattr(load_model(model_dir, processor), "fast_bpe", None)
            text_bound_of(model_dir)  # and the text bound each count task asks for (a vocabulary pass, ~0.1 s)
            _warm_up()
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"), initializer=worker_init)
    else:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=worker_init)
    if created is not None:
        created(pool)
    # Start the workers now with SIGINT/SIGTERM blocked: a signal that lands inside os.fork's
    # at-fork hooks would be printed as "Exception ignored" and lost; blocked, it waits and is
    # delivered right after, at a safe point. (A fork pool starts all its workers on the first
    # submit.)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        pool.submit(int).result()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return pool


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _warm_up() -> None:
    """Do here, once, what each forked count worker would otherwise do for itself on its first task:
    the media check's rules key (:func:`vlmpack.media.check_table.rules`: a hash of the media code,
    PIL and PyAV imported for their versions), pyarrow's import of pandas, which its first
    ``pa.array`` makes when pandas is installed (~0.5 CPU-s a process on this machine), and numba's
    first call, here of the ChatML label scan the count stage runs per sample (its dispatcher and the
    cached machine code loaded, ~0.3 CPU-s a process; the driver pays it in the plan stage anyway)."""
    import numpy as np
    import pyarrow as pa

    from vlmpack.media.check_table import rules
    from vlmpack.models.chatml import assistant_label_mask

    rules()
    pa.array([], pa.int32())
    assistant_label_mask(np.zeros(2, np.int64), im_start_id=0, assistant_id=0, im_end_id=0, newline_id=0)


#: ``gc.set_threshold`` of the pool workers (Python's default: 700, 10, 10)
WORKER_GC_THRESHOLD = (10_000, 10, 10)


def worker_init() -> None:
    """Pool worker set-up (also the media pre-check's process, :mod:`vlmpack.pack.media_precheck`):
    leave SIGINT/SIGTERM to the parent, die when the parent dies, and keep the
    objects it forked with (the model, its tokenizer and encoder) out of the cyclic garbage
    collector's passes (``gc.freeze()``: collections only walk what the worker allocates; on 30,000
    demo records the count workers spent ~1.6 CPU-s each in the collector, ~0.85 frozen, and a pass
    no longer writes to the pages shared with the parent), and collect the young generation every
    10,000 allocations instead of Python's 700 (:data:`WORKER_GC_THRESHOLD`): a sample's parsed record,
    messages and token lists mostly die before a collection sees them, so fewer survive into the old
    generations (30,000 text-only demo records: 0.90x the command's CPU, the same shards;
    docs/benchmarks.md)."""
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLD)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # blocked while the parent forked us
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
            if os.getppid() == 1:  # the parent died before prctl took effect
                os._exit(1)
        except (OSError, AttributeError):  # no prctl: workers still exit on a broken pipe
            pass


#: The most seconds :func:`abort_executor` waits for its killed workers to be gone, all together.
REAP_S = 10.0


def abort_executor(pool: Executor) -> None:
    """Stop ``pool`` now: cancel queued tasks and kill running worker processes (no waiting for
    them to finish their task), then reap them. Used on a signal or an error, so a run stops
    within a second; a killed worker is only gone once the kernel has torn it down, which for a
    forked copy of a large process on a loaded machine can take longer, so the reaping waits up
    to :data:`REAP_S` seconds in all. The pool's own manager thread joins every worker once it
    sees one die: it is waited for first, and the workers are joined here only after it, since
    two threads joining one worker race on its ``waitpid`` (the loser's ``Process`` object can
    report a reaped worker as alive)."""
    processes = getattr(pool, "_processes", None) or {}
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown() drops the pool's reference
    for p in list(processes.values()):
        try:
            p.kill()
        except (OSError, AttributeError):
            pass
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001 - a broken pool may complain; it is being thrown away
        pass
    deadline = time.monotonic() + REAP_S
    if manager is not None:
        manager.join(timeout=REAP_S)
    for p in list(processes.values()):
        try:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        except (OSError, AttributeError, AssertionError):
            pass


@contextmanager
def guarded_executor(kind: str, workers: int, model_dir: str, ray_address: str | None = None, *,
                     preload: bool = True, processor: str = ""):
    """:func:`make_executor` as a context manager that waits for the pool on success and kills it
    (:func:`abort_executor`) on any exception, ``KeyboardInterrupt`` and SIGTERM included.

    A SIGINT / SIGTERM that comes while the pool is made (the model loaded, the workers forked;
    another thread of the process may take the signal, so blocking it in this one does not hold
    it back) is caught by the same guard: :func:`make_executor` hands the pool over as soon as it
    exists, before its first worker forks. Left unguarded, the pool died with its parent
    (``PR_SET_PDEATHSIG``) just after the command had exited, and a rerun started at once could
    find the output's lock (a ``flock`` the forked workers share) still held by a dying worker."""
    made: list[Executor] = []
    try:
        pool = make_executor(kind, workers, model_dir, ray_address, preload=preload, created=made.append,
                             processor=processor)
        yield pool
    except BaseException:
        for p in made:
            abort_executor(p)
        raise
    pool.shutdown(wait=True)


def run_tasks(pool: Executor, fn: Callable, tasks: list, *, done: Callable, desc: str, weights: list[int], unit: str,
              show: bool) -> None:
    """Run ``fn`` over ``tasks`` on ``pool`` with a progress bar on a terminal (``weights[i]``: the progress of
    task i, in ``unit``); ``done(task, result)`` is called in the calling process as each task
    finishes, in submission order among tasks finished together (so its result is saved at once and
    a killed run does not redo it). Checks :func:`vlmpack.signals.check` at least every
    :data:`vlmpack.signals.POLL_S` seconds; a task's exception is raised here."""
    # disable=None: no bar when stderr is not a terminal (a log file, CI), as every command's bars
    with tqdm(total=sum(weights), desc=desc, unit=unit, unit_scale=True, disable=None if show else True,
              leave=False) as bar:

        def finish(i: int, fut) -> None:
            done(tasks[i], fut.result())
            bar.update(weights[i])

        pending = {}
        for i, t in enumerate(tasks):
            signals.check()
            fut = pool.submit(fn, t)
            if fut.done():  # the in-process executor runs the task inside submit()
                finish(i, fut)
            else:
                pending[fut] = i
        while pending:
            signals.check()
            finished, _ = wait(pending, timeout=signals.POLL_S, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=pending.__getitem__):
                finish(pending.pop(fut), fut)
        signals.check()
