"""What the bench scripts run on: the real demo set and a Qwen2.5-VL model directory (tokenizer +
processor, no weights), built on first use into the one bench cache ``~/.cache/vlmpack/bench``
(``real_data/``, ``model/``) that every script shares.

Importing this module puts ``tools/`` (the demo builders, outside the wheel) on ``sys.path``;
``python bench/<script>.py`` puts this folder there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from demo_data import build_demo_data, build_qwen2_5_vl_model_dir  # noqa: E402

__all__ = ["CACHE", "add_data_option", "build_demo_data", "demo_model_dir"]

CACHE = Path.home() / ".cache" / "vlmpack" / "bench"


def add_data_option(ap: argparse.ArgumentParser) -> None:
    """``--data DIR``: the demo data folder (default ``CACHE/real_data``; built there if absent)."""
    ap.add_argument("--data", type=Path, default=CACHE / "real_data", help="demo data folder (built if absent)")


def demo_model_dir() -> Path:
    """The Qwen2.5-VL model directory of the benches (``CACHE/model``; built if absent)."""
    return build_qwen2_5_vl_model_dir(CACHE / "model")
