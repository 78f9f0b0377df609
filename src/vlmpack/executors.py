"""Where pool tasks run: in-process, a local process pool, or a Ray cluster.

All three are ``concurrent.futures.Executor`` objects, so the stages submit the same pure task
functions (:func:`vlmpack.measure.run_task`, :func:`vlmpack.writer.write_shard`) to any of them
and the output bytes do not depend on the choice. Ray is an existing engine (``ray.remote`` +
``ObjectRef.future()``); vlmpack has no scheduler of its own. With Ray, the input, media, model
directory and output must be on a file system every node sees at the same path.
"""

from __future__ import annotations

import sys
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing import get_context

from vlmpack.errors import ConfigError
from vlmpack.models import load_model


class InlineExecutor(Executor):
    """Runs tasks in the calling process (``workers=1``): same code path, easy to debug."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            fut.set_exception(e)
        return fut


class RayExecutor(Executor):
    """Runs each task as a Ray task (``ray.remote(fn).remote(...)``), on the cluster at
    ``address`` (``None``: start or join a local Ray; ``"auto"``: the running cluster).

    ``num_cpus`` limits a local Ray started here. Ray stays initialised after ``shutdown`` (it
    belongs to the user's session). Raises :class:`ConfigError` when ray is not installed.
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
            remote = self._remote[fn] = self._ray.remote(fn)
        return remote.remote(*args, **kwargs).future()


def make_executor(kind: str, workers: int, model_dir: str, ray_address: str | None = None) -> Executor:
    """The executor for a run.

    ``kind="local"``: in-process for ``workers <= 1``, else a pool of ``workers`` processes; on
    Linux the model is loaded once here and the workers are forked with it (tokenizer parallelism
    is off, so forking is safe), elsewhere they spawn. ``kind="ray"``: :class:`RayExecutor`.
    """
    if kind == "ray":
        return RayExecutor(ray_address, num_cpus=workers)
    if workers <= 1:
        return InlineExecutor()
    if sys.platform.startswith("linux"):
        load_model(model_dir)
        return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"))
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))
