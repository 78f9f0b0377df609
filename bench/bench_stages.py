"""Count once, plan many: wall seconds of ``vlmpack`` commands that reuse the counts (real demo set).

    python bench/bench_stages.py [--workers 2] [--repeat 3] [--data DIR]

Each row is a fresh ``vlmpack`` command (interpreter start, imports included), median of
``--repeat`` runs, in a temporary folder with its own count cache (``--cache-dir``):

1. ``pack`` at L=4096 into a new OUT (counts everything; once);
2. the same command again: a finished no-op run (no model load; target < 3 s);
3. ``pack --overwrite`` at L=8192 on that OUT: planned and written again, not counted;
4. ``pack`` at L=16384 into a new OUT: counts from the cache;
5. ``plan --input ... -L 4096 -L 8192 -L 16384``: the pre-flight table from the cached counts.

The report's ``reused`` record of each pack row shows what was counted (``counted`` column: count
tasks run by that command). Speed targets are checked here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from demo_set import add_data_option, build_demo_data, demo_model_dir

NOOP_TARGET_S = 3.0


def _run(args: list[str]) -> tuple[float, str]:
    """Wall seconds and stderr of ``vlmpack ARGS``; raises ``RuntimeError`` when it fails."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "vlmpack", *args], capture_output=True, text=True)
    sec = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"vlmpack {' '.join(args[:1])} failed: {proc.stderr[-500:]}")
    return sec, proc.stderr


def _counted(out: Path) -> str:
    r = json.loads((out / "report.json").read_text())["reused"]
    return f"{r['count_tasks'] - r['count_tasks_reused']}/{r['count_tasks']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    model_dir = demo_model_dir()
    with tempfile.TemporaryDirectory(prefix="vlmpack-bench-stages-") as tmp:
        tmp = Path(tmp)
        common = ["--input", str(data / "real_sft.jsonl"), "--input", str(data / "broken.jsonl"), "--media-root",
                  str(data), "--model", str(model_dir), "--workers", str(args.workers), "--no-progress",
                  "--cache-dir", str(tmp / "cache")]
        rows = []

        def pack(name: str, out: str, seq_len: int, *extra: str, repeat: int = 1) -> None:
            cmd = ["pack", *common, "--output", str(tmp / out), "--seq-len", str(seq_len), *extra]
            secs = [_run(cmd)[0] for _ in range(repeat)]
            rows.append((name, statistics.median(secs), _counted(tmp / out)))

        pack("pack L=4096, new OUT (counts)", "a", 4096)
        pack("same command again (no-op)", "a", 4096, repeat=args.repeat)
        noop = rows[-1][1]
        pack("pack --overwrite L=8192, same OUT", "a", 8192, "--overwrite")
        pack("pack L=16384, new OUT (cache)", "b", 16384)
        runs = [_run(["plan", *common, "-L", "4096", "-L", "8192", "-L", "16384"]) for _ in range(args.repeat)]
        done, total = map(int, re.search(r"(\d+)/(\d+) count tasks reused", runs[-1][1]).groups())
        rows.append(("plan --input -L 4096/8192/16384", statistics.median(sec for sec, _ in runs),
                     f"{total - done}/{total}"))
    print(f"\n| command (workers={args.workers}) | wall s | count tasks run |")
    print("|---|---|---|")
    for name, sec, counted in rows:
        print(f"| {name} | {sec:.2f} | {counted} |")
    print(f"\nno-op resume: {noop:.2f} s (target < {NOOP_TARGET_S:g} s): {'ok' if noop < NOOP_TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
