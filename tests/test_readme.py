"""The training snippet of the docs (docs/tutorials/training.md, moved there from the README) runs as
written (CPU: tiny random Qwen2.5-VL, sdpa) on real packs."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "training.md"


def test_training_snippet_runs_as_written(tmp_path, real_data, model_dir):
    from demo_data.packs import demo_packs

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    snippet = next(b for b in blocks if "tests/test_readme.py" in b)
    (tmp_path / "train.py").write_text(snippet, encoding="utf-8")
    # L = 1024: the snippet's CPU model pays ~L x 151k logits a step (its lm_head, forward and backward)
    packs = demo_packs(real_data, model_dir, seq_len=1024, n_lines=120, out=tmp_path / "packs")
    env = {**os.environ, "MODEL_DIR": str(model_dir), "PACKS_DIR": str(packs), "STEPS": "3"}
    proc = subprocess.run([sys.executable, str(tmp_path / "train.py")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = re.findall(r"step (\d+): (\d+) tokens, loss ([\d.naninf-]+)", proc.stdout)
    assert [int(s) for s, _, _ in steps] == [0, 1, 2], proc.stdout
    assert all(0 < int(n) <= 1024 and math.isfinite(float(loss)) for _, n, loss in steps), proc.stdout
