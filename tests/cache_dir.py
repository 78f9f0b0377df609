"""Where the suite builds its demo data and model directories once: ``$VLMPACK_TEST_CACHE``, default
``~/.cache/vlmpack/test`` (``conftest.py``'s fixtures build into it; :mod:`cli_preload` reads the
Qwen2.5-VL directory from it)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(os.environ.get("VLMPACK_TEST_CACHE", Path.home() / ".cache" / "vlmpack" / "test"))


def content_dir(builder_file: str | Path, family: str) -> Path:
    """``CACHE / "<family>-<12 hex>"``: the sha256 of a model-directory builder module and every file
    of its ``model_files/<family>/`` folder (name and bytes), so that a changed fixture is built anew
    into a new folder instead of read stale."""
    import hashlib

    builder_file = Path(builder_file)
    h = hashlib.sha256(builder_file.read_bytes())
    for f in sorted((builder_file.parent / "model_files" / family).iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return CACHE / f"{family}-{h.hexdigest()[:12]}"
