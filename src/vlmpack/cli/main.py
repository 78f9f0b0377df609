"""The ``vlmpack`` typer app and its one error boundary (:func:`main`).

Commands, one module each: ``pack`` (:mod:`vlmpack.cli.pack`, the main job), ``plan``
(:mod:`vlmpack.cli.plan`, pre-flight bin-packing table), ``check`` (:mod:`vlmpack.cli.check`, load
an output through Energon and check it), ``verify`` (:mod:`vlmpack.cli.verify`, check + recount
every sample from the shard bytes), ``inspect`` (:mod:`vlmpack.cli.inspect`, packs and label
masks), ``metadataset`` (:mod:`vlmpack.cli.metadataset`, an Energon blend of several outputs).
Every error ends the command with one line on stderr and a documented exit code. The demo data
builder lives outside the wheel: ``tools/build_demo.py``.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import signal
import sys
import threading
import traceback
from typing import NoReturn

import typer
from rich.console import Console

from vlmpack import signals
from vlmpack.cli.check import check_command
from vlmpack.cli.export import export_command
from vlmpack.cli.helptext import HelpCommand
from vlmpack.cli.inspect import inspect_command
from vlmpack.cli.metadataset import metadataset_command
from vlmpack.cli.pack import pack_command
from vlmpack.cli.plan import plan_command
from vlmpack.cli.verify import verify_command
from vlmpack.errors import VlmpackError

# rich_markup_mode=None: click's plain help, which wraps long option names instead of cutting them
# at 80 columns as rich's table does (see vlmpack.cli.helptext)
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Pack multimodal SFT data into padding-free sequences for Megatron-Energon.")
err = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from vlmpack import __version__

        typer.echo(f"vlmpack {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Pack multimodal SFT data into padding-free sequences for Megatron-Energon."""


#: Each command, its one-line summary in ``vlmpack --help`` (short enough for 80 columns) and function.
_COMMANDS = [
    ("pack", "Read, validate, count, plan and write packed shards.", pack_command),
    ("check", "Check an output and load it through Megatron-Energon.", check_command),
    ("plan", "Pre-flight: how the data would pack for each --seq-len.", plan_command),
    ("verify", "Check + recount every sample from the shard bytes.", verify_command),
    ("inspect", "Show packs as the model sees them, trained tokens marked.", inspect_command),
    ("metadataset", "Write an Energon blend YAML of several outputs.", metadataset_command),
    ("export", "Write the packs as Parquet files (Hugging Face datasets).", export_command),
]
for _name, _short, _fn in _COMMANDS:
    app.command(_name, cls=HelpCommand, short_help=_short)(_fn)


#: Exit codes of every command (also in docs/rejects.md).
EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR, EXIT_RUN_FAILED, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_SIGINT, EXIT_SIGTERM = 130, 143

_OS_HINTS = {
    errno.ENOSPC: "free some space (or choose another --output), then run the same command again to resume",
    errno.EDQUOT: "free some quota (or choose another --output), then run the same command again to resume",
    errno.EFBIG: "the file size limit (ulimit -f) was reached; raise it or lower --max-shard-bytes",
    errno.EROFS: "the file system is read-only; choose a writable --output",
    errno.EACCES: "check the permissions of this path",
    errno.EPERM: "check the permissions of this path",
    errno.ENOTDIR: "a part of this path is a file, not a directory",
    errno.EISDIR: "this path is a directory where a file was expected",
    errno.ENOENT: "check the path",
}


def _os_error_line(e: OSError) -> str:
    """One line for an ``OSError``: the path, the system's words and what to do."""
    from vlmpack.records import display_path

    path = display_path(str(e.filename)) if e.filename is not None else "(no path)"
    hint = _OS_HINTS.get(e.errno or 0, "")
    return f"{path}: {e.strerror or e}" + (f"; {hint}" if hint else "")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vlmpack`` console script: the one error boundary of every command.

    Exit codes: 0 success; 1 ``check`` found problems; 2 an error (bad option, config, input,
    output directory, disk/OS error), one line on stderr; 3 a ``pack`` run that finished but
    failed (more rejections than ``--max-reject-fraction``, or nothing packed); 70 an internal
    error (one line; the traceback with ``VLMPACK_DEBUG=1``); 130 SIGINT and 143 SIGTERM (one line:
    run the same command again to resume; worker processes are stopped at once).
    """
    from vlmpack.errors import Interrupted, RunFailedError

    # vlmpack's own warnings; the libraries' (matplotlib's font cache, transformers, PIL) only as errors
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("vlmpack").setLevel(logging.WARNING)
    signals.install()
    if hasattr(signal, "SIGXFSZ"):  # a file size limit gives EFBIG (one line), not a core dump
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resume = "interrupted; run the same command again to resume"
    try:
        rv = app(args=argv, standalone_mode=False)
        code = rv if isinstance(rv, int) else EXIT_OK
    except typer.Exit as e:
        code = e.exit_code
    except (typer.Abort, KeyboardInterrupt, Interrupted) as e:
        # everything on disk is consistent (atomic files); skip the interpreter's teardown of
        # torch / tokenizers / Energon (~2 s) so the command ends at once
        print(f"vlmpack: {resume}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + e.signum if isinstance(e, Interrupted) else EXIT_SIGINT)
    except RunFailedError as e:
        print(f"vlmpack: failed: {e}", file=sys.stderr)
        code = EXIT_RUN_FAILED
    except VlmpackError as e:
        print(f"vlmpack: error: {_oneline(e)}", file=sys.stderr)  # one line, never wrapped
        code = EXIT_ERROR
    except OSError as e:
        print(f"vlmpack: error: {_oneline(_os_error_line(e))}", file=sys.stderr)
        code = EXIT_ERROR
    except Exception as e:  # noqa: BLE001 - a bug: still one line, the traceback on request
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):  # a usage error (typer's click)
            e.show()
            sys.exit(EXIT_ERROR)
        if os.environ.get("VLMPACK_DEBUG"):
            traceback.print_exc()
        print(f"vlmpack: internal error: {type(e).__name__}: {_oneline(e)} (set VLMPACK_DEBUG=1 for the traceback "
              "and report it)", file=sys.stderr)
        code = EXIT_INTERNAL
    sys.stdout.flush()
    _leave(code)


def _leave(code: int) -> NoReturn:
    """End the process with ``code`` once a command is done. When every thread left is a daemon, the
    exit handlers run (``atexit``: logging's flush, multiprocessing's joins), stdout and stderr are
    flushed and the process ends through ``os._exit``: the interpreter's teardown (a last garbage
    collection over every object and the freeing of every module, about 0.6 s after a ``vlmpack
    pack`` of the 5,783 demo records; nothing of it reaches a file) is skipped. Otherwise, and in a
    process that multiprocessing started (its own exit path runs no ``atexit`` handler of the parent
    it was forked from), ``sys.exit``: Python joins those threads first."""
    import multiprocessing

    main_thread = threading.main_thread()
    if multiprocessing.parent_process() is not None or any(
            t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main_thread):
        sys.exit(code)
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _oneline(e: object) -> str:
    text = " ".join(str(e).split())
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
