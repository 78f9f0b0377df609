"""``vlmpack ARGS`` run as the console script runs it, minus the imports every fresh interpreter pays.

Each command runs in a process of its own, forked from a multiprocessing *fork server* that has
imported vlmpack's CLI and the libraries its commands load (torch, transformers, Megatron-Energon,
PyArrow, PIL: 2-3 s of a 3.5 s ``vlmpack check``), once per test worker. The child is a new process
(its own pid, signals, exit status, working directory, environment and file descriptors 1 and 2,
written to files the caller reads back), it never sees the test process's state (the server was
started before any test ran its code, and forks only from itself), and it calls the console
script's own ``vlmpack.cli.main`` with ``sys.argv`` as the shell would set it. What differs from
``subprocess.run``: modules that a command imports are already imported, so a module must read the
environment when called, not when imported (vlmpack does: ``VLMPACK_CACHE``, ``VLMPACK_DEBUG``), the
family of the suite's Qwen2.5-VL directory is already in ``load_model``'s cache (:mod:`cli_preload`),
``sys.path`` also holds the tests folder (the server's, see :func:`_server`), and
the child leaves through ``os._exit`` after flushing stdout and stderr, as the console script's own
interrupt path does.

:func:`start_cli` starts one in the background (``Popen``'s ``pid``, ``poll``, ``send_signal``, ``kill``,
``wait``, ``communicate``, ``returncode``); :func:`run_cli` runs one to its end. A caller that needs
anything else of ``subprocess`` (``preexec_fn``, another interpreter) uses it directly.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: What the fork server imports before its first fork: the CLI and what its commands import lazily,
#: the model families' transformers modules among them (``transformers`` itself imports them only on
#: first use: 1.7 s of the first ``load_model`` of a command), matplotlib with the report's figures
#: (about 2 s of every ``vlmpack pack``) and pandas (PyArrow imports it when it reads a table back: 1 s);
#: last, :mod:`cli_preload` loads the family of the suite's Qwen2.5-VL directory into ``load_model``'s cache.
PRELOAD = ["cli_runner", "vlmpack.cli", "vlmpack.check", "vlmpack.pack.pipeline", "vlmpack.verify",
           "vlmpack.pack.figures", "matplotlib.backends.backend_agg", "pandas",
           "megatron.energon", "transformers", "tokenizers", "pyarrow.parquet", "PIL.Image", "vlmpack.models.qwen2_vl",
           "vlmpack.models.qwen3_vl", "vlmpack.models.internvl", "vlmpack.models.llava_onevision",
           "transformers.models.auto.tokenization_auto", "transformers.models.auto.image_processing_auto",
           "transformers.models.qwen2.tokenization_qwen2", "transformers.models.qwen3_5.tokenization_qwen3_5",
           "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
           "transformers.models.llava_onevision.image_processing_pil_llava_onevision",
           "transformers.models.got_ocr2.image_processing_pil_got_ocr2",
           "transformers.models.internvl.processing_internvl", "cli_preload"]

_context: multiprocessing.context.BaseContext | None = None


def _server() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        from multiprocessing import forkserver

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # the server imports them once
        # Python 3.11's fork server is handed sys.path but does not apply it before importing PRELOAD:
        # the tests folder (cli_runner, cli_preload) reaches it through PYTHONPATH, set while it starts
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *([saved] if saved else [])])
        try:
            forkserver.ensure_running()
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        _context = ctx
    return _context


def _child(args: list[str], cwd: str | None, env: dict[str, str], out: str, err: str) -> None:
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    sys.argv = ["vlmpack", *args]
    from vlmpack.cli import main

    main()  # exits with the command's status (SystemExit): multiprocessing flushes and hands it over


class CliProcess:
    """A command started by :func:`start_cli`: the ``subprocess.Popen`` methods the tests use.
    ``stdout`` / ``stderr`` are text files open on what the command has written so far."""

    def __init__(self, argv: list[str], cwd: Path | str | None, env: dict[str, str] | None):
        self.args = ["vlmpack", *argv]
        self._dir = tempfile.mkdtemp(prefix="vlmpack-cli-")
        out, err = os.path.join(self._dir, "stdout"), os.path.join(self._dir, "stderr")
        for path in (out, err):
            open(path, "wb").close()
        self._proc = _server().Process(target=_child, args=(argv, None if cwd is None else str(cwd),
                                                            dict(os.environ if env is None else env), out, err))
        self._proc.start()
        self.pid = self._proc.pid
        self.stdout = open(out, encoding="utf-8", errors="replace")
        self.stderr = open(err, encoding="utf-8", errors="replace")

    @property
    def returncode(self) -> int | None:
        """The exit status (``-N`` for signal N) once ended, else None."""
        return self._proc.exitcode

    def poll(self) -> int | None:
        """:attr:`returncode` now (None while it runs)."""
        return self._proc.exitcode

    def kill(self) -> None:
        """SIGKILL the command's process (nothing once it has ended)."""
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        """Send signal ``sig`` to the command's process (nothing once it has ended)."""
        if self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._proc.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end (as :meth:`wait`) and return the rest of ``(stdout, stderr)``."""
        self.wait(timeout)
        out, err = self.stdout.read(), self.stderr.read()
        self.stdout.close()
        self.stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        return out, err


def start_cli(args: list, cwd: Path | str | None = None, env: dict[str, str] | None = None) -> CliProcess:
    """``vlmpack ARGS`` started in the background in a process of its own (as :func:`run_cli`)."""
    return CliProcess([str(a) for a in args], cwd, env)


def run_cli(args: list, cwd: Path | str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
    """``vlmpack ARGS`` in a process of its own (:func:`start_cli`), waited for, output captured as text.

    ``env`` replaces the environment as in ``subprocess.run`` (default: this process's, now);
    ``returncode`` is the exit status, or ``-N`` when signal N ended the process. Raises
    ``subprocess.TimeoutExpired`` when it runs past ``timeout`` seconds (the process is killed)."""
    proc = start_cli(args, cwd=cwd, env=env)
    try:
        out, err = proc.communicate(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
