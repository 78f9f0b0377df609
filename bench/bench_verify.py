"""``vlmpack verify`` against the count stage of the same output: wall and CPU seconds (real demo set).

    python bench/bench_verify.py [--seq-len 8192] [--workers 2] [--repeat 3] [--data DIR]

The demo set is packed once into a temporary OUT. Every command runs with ``VLMPACK_CACHE`` = a fresh
cache root holding only the model's load recipe (recorded before timing, as a machine's first load
records it; no counts reused). Then, interleaved ``--repeat`` times, each a fresh command measured as a
whole process tree (interpreter start, imports and the model load included; CPU = user + system of the
command and its workers, ``os.wait4``):

- ``count stage``: ``vlmpack plan --input ... --model ...``: read, validate (the media
  check) and count every record of the same inputs in ``--workers`` processes, then one plan at L, no
  shards: the count stage of ``pack`` as a command of its own;
- ``verify``: ``vlmpack verify OUT`` (the check gate with its Energon pass decoding each distinct media part,
  then every sample recounted from the shard bytes);
- ``check``: ``vlmpack check OUT`` (the gate alone), for reference.

Prints the medians and verify / count stage (issue target: CPU at most 1.2x). Speed targets are
checked here, never in tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from demo_set import add_data_option, build_demo_data, demo_model_dir
from measure import record_load_recipe, run_tree_measured

TARGET = 1.2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    model = demo_model_dir()
    vlmpack = [sys.executable, "-m", "vlmpack"]
    inputs = ["--input", str(data / "real_sft.jsonl"), "--input", str(data / "broken.jsonl"),
              "--media-root", str(data), "--model", str(model), "--workers", str(args.workers)]
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        out, recipes, root = Path(tmp) / "out", Path(tmp) / "recipes", Path(tmp) / "root"
        record_load_recipe(model, recipes)  # what a machine's first load of the model records
        env = {**os.environ, "VLMPACK_CACHE": str(root)}

        def fresh_root() -> None:  # a cache root holding only the recipe: no counts reused
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(recipes, root)

        fresh_root()
        packed = run_tree_measured([*vlmpack, "pack", *inputs, "--seq-len", str(args.seq_len), "--output", str(out)],
                                   env=env)
        print(f"pack (once): {packed['seconds']:.1f} s wall, {packed['cpu_seconds']:.1f} CPU-s")
        cmds = {"count stage": [*vlmpack, "plan", *inputs, "-L", str(args.seq_len)],
                "verify": [*vlmpack, "verify", str(out), "--workers", str(args.workers)],
                "check": [*vlmpack, "check", str(out)]}
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        for _ in range(args.repeat):  # interleaved: a noisy spell hits every row alike
            for name, cmd in cmds.items():
                fresh_root()
                runs[name].append(run_tree_measured(cmd, env=env))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("seconds", "cpu_seconds")} for k, v in runs.items()}
    print(f"\n{'command':<12} {'wall s':>8} {'CPU s':>8} {'CPU min-max':>13} {'CPU / count':>12}")
    for name, m in med.items():
        cpus = [r["cpu_seconds"] for r in runs[name]]
        print(f"{name:<12} {m['seconds']:8.1f} {m['cpu_seconds']:8.1f} {min(cpus):6.1f}-{max(cpus):<6.1f} "
              f"{m['cpu_seconds'] / med['count stage']['cpu_seconds']:12.2f}")
    ratio = med["verify"]["cpu_seconds"] / med["count stage"]["cpu_seconds"]
    print(f"\nverify / count stage CPU: {ratio:.2f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
