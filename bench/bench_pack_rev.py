"""``vlmpack pack`` end to end: this tree against an earlier git revision, on the same records, in one run.

    python bench/bench_pack_rev.py REV [--n 3e4] [--rounds 3] [--warmup 1] [--text-only] [--data DIR]

REV's ``src/`` is exported (``git archive``) into a temporary folder and run with ``PYTHONPATH``
pointing at it (the same interpreter and installed packages); this tree runs as installed. Both run
:func:`bench_scale.e2e` (the demo records replicated to ``--n`` with new ids, ``vlmpack pack`` with 2
workers at L = 8192, a cache root holding only the model's load recipe, recorded by this tree, so every
count is redone; ``--text-only``: only the demo records without images, replicated), interleaved
``--rounds`` times so a noisy spell hits both alike, after ``--warmup`` uncounted rounds of each (the
first run of REV's export compiles its numba kernels into the export's cache: seconds of CPU that a
user's second run does not pay, and the OS file cache is filled alike). Prints CPU-ms a sample (the
command and its workers; median, min-max), wall seconds, the count stage's seconds, the samples packed and the
shards' digest, then this tree / REV and whether the shards are byte-identical.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_scale import e2e
from demo_set import add_data_option, build_demo_data, demo_model_dir

ROOT = Path(__file__).resolve().parents[1]


def export_src(rev: str, dest: Path) -> str:
    """``rev``'s ``src/`` under ``dest``; returns the commit it names (short)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", help="the git revision to compare with (e.g. a commit before a change)")
    ap.add_argument("--n", default="3e4", help="records (the demo set replicated with new ids)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds of each code first")
    ap.add_argument("--text-only", action="store_true", help="replicate only the demo records without images")
    add_data_option(ap)
    args = ap.parse_args()
    n = int(float(args.n))
    data, model_dir = build_demo_data(args.data), demo_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench-rev-") as tmp:
        commit = export_src(args.rev, Path(tmp))
        runs: dict[str, list[dict]] = {commit: [], "this tree": []}
        for r in range(args.warmup + args.rounds):
            for name in runs:
                if name == commit:
                    os.environ["PYTHONPATH"] = str(Path(tmp) / "src")
                result = e2e(n, data, model_dir, 8192, text_only=args.text_only)
                os.environ.pop("PYTHONPATH", None)
                if r >= args.warmup:
                    runs[name].append(result)
    what = "text-only demo records" if args.text_only else "demo records"
    print(f"\n`vlmpack pack`, {n:,} {what} replicated with new ids, 2 workers, {args.rounds} interleaved "
          f"rounds after {args.warmup} uncounted\n")
    print("| code | CPU-ms / sample (median, min-max) | wall s | count stage s | packed | shards digest |")
    print("|---|---:|---:|---:|---:|---|")
    for name, rs in runs.items():
        ms = [1000 * r["cpu_s"] / n for r in rs]
        print(f"| {name} | {statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f}) | "
              f"{statistics.median(r['wall_s'] for r in rs):.1f} | {statistics.median(r['count_s'] for r in rs):.1f} | "
              f"{rs[0]['packed']:,} | {rs[0]['digest'][:12]} |")
    cpu = {name: statistics.median(r["cpu_s"] for r in rs) for name, rs in runs.items()}
    ratio = cpu["this tree"] / cpu[commit]
    same = len({r["digest"] for rs in runs.values() for r in rs}) == 1
    print(f"\nthis tree / {commit} CPU: {ratio:.2f}; shards byte-identical: {same}")


if __name__ == "__main__":
    main()
