"""Session fixtures shared by the whole suite: the real model directory and the real demo data.

Both are built on first use into ``$VLMPACK_TEST_CACHE`` (default ``~/.cache/vlmpack/test``) and
reused afterwards, so a fresh machine needs only the packages named in ``pyproject.toml[test]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Run time varies on a shared machine: no hypothesis deadline anywhere (speed lives in bench/).
settings.register_profile("vlmpack", deadline=None)
settings.load_profile("vlmpack")

# the demo-data and model-directory builders live outside the wheel, in tools/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

CACHE = Path(os.environ.get("VLMPACK_TEST_CACHE", Path.home() / ".cache" / "vlmpack" / "test"))


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """A real Qwen2.5-VL model directory (tokenizer + processor + config, no weights)."""
    from demo_data import build_qwen2_5_vl_model_dir

    return build_qwen2_5_vl_model_dir(CACHE / "qwen2_5_vl")


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real demo SFT set (``real_sft.jsonl``, ``broken.jsonl``, ``images/``), built once."""
    from demo_data import build_demo_data

    return build_demo_data(CACHE / "real_data")
