"""The media check table: what a run pays for checking images, cold and warm (real demo set).

    python bench/bench_media_checks.py [--workers 2] [--data DIR]

Three ``vlmpack pack`` commands over the demo set (5,783 records, 2,937 image samples, 1,845
images), each a fresh process into a new OUT, all in one temporary folder, run one after the other:

1. ``--cache-dir off``: no count cache, no media check table: every image checked (PIL ``load()``
   verdict by the cheapest equivalent check, ``--media-check verify``);
2. a new cache folder: counted, and the accepted images' facts kept in
   ``<cache>/media-checks.sqlite3``;
3. the same cache with ``--max-media-bytes 100000000`` (another count key: nothing of the counts is
   reused, as with another model or dataset over the same images): the images come from the table.

Columns: wall seconds of the command; ``read/validate`` and ``count``: the workers' CPU seconds of
those steps as the report records them (the media check is in read/validate); ``table rows``: the
distinct accepted image contents in the table after the run.
Speed targets live here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from demo_set import add_data_option, build_demo_data, demo_model_dir


def _rows(table: Path) -> int:
    if not table.is_file():
        return 0
    with sqlite3.connect(table) as db:
        return db.execute("SELECT COUNT(*) FROM checks").fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    model_dir = demo_model_dir()
    with tempfile.TemporaryDirectory(prefix="vlmpack-bench-checks-") as tmp:
        cache = Path(tmp) / "cache"
        table = cache / "media-checks.sqlite3"
        runs = [("no cache (--cache-dir off)", ["--cache-dir", "off"]),
                ("cold table (new cache)", ["--cache-dir", str(cache)]),
                ("warm table (another count key)", ["--cache-dir", str(cache), "--max-media-bytes", "100000000"])]
        print("| run | wall s | read/validate CPU s | count CPU s | table rows |")
        print("|---|---:|---:|---:|---:|")
        for i, (name, extra) in enumerate(runs):
            out = Path(tmp) / f"out{i}"
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "vlmpack", "pack", "--input", str(data / "real_sft.jsonl"),
                                   "--media-root", str(data), "--model", str(model_dir), "--seq-len", "8192",
                                   "--output", str(out), "--workers", str(args.workers), "--no-progress", *extra],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - t
            if proc.returncode != 0:
                raise SystemExit(f"{name}: vlmpack pack failed: {proc.stderr[-500:]}")
            sec = json.loads((out / "report.json").read_text())["seconds"]
            print(f"| {name} | {wall:.1f} | {sec['worker_read_validate']:.1f} | {sec['worker_count']:.1f} | "
                  f"{_rows(table):,} |")


if __name__ == "__main__":
    main()
