"""Where the suite builds its demo data and model directories once: ``$VLMPACK_TEST_CACHE``, default
``~/.cache/vlmpack/test`` (``conftest.py``'s fixtures build into it; :mod:`cli_preload` reads the
Qwen2.5-VL directory from it)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(os.environ.get("VLMPACK_TEST_CACHE", Path.home() / ".cache" / "vlmpack" / "test"))
