"""The model load of a fresh process, with and without its load recipe (vlmpack.models.load_recipe).

    python bench/bench_load.py [--repeat 3] [--model DIR ...] [--pack 200] [--data DIR]

For each model directory (default: the demo's Qwen2.5-VL), interleaved ``--repeat`` times, each a
fresh ``python -c`` process measured as a whole (interpreter start and imports included; CPU =
user + system, ``os.wait4``) that imports vlmpack and calls ``load_model(DIR)``:

- ``no recipe``: ``VLMPACK_CACHE=off`` (no cache root: transformers' ``AutoTokenizer`` and the
  family's image processor, as before recipes);
- ``records``: an empty cache root (the same load, then the recipe written: one more tokenizer build);
- ``recipe``: a cache root holding that recipe only (the tokenizer class built directly, the image
  rule's settings read from the recipe; no torch for the Qwen-VL families).

With ``--pack N`` (default 200; 0: off) the same for a whole ``vlmpack pack`` CLI run of the first
N demo records (2 workers, L = 8192): ``--cache-dir off`` against a fresh cache root holding only
the recipe (so the counts are not reused, only the load). Prints the medians (min-max) and the
ratios. Speed lives here, never in tests.
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
from measure import run_tree_measured

LOAD = ("import sys; from vlmpack.models import load_model; f = load_model(sys.argv[1]); "
        "print('torch' in sys.modules)")


def _runs(tmp: Path, model: Path, repeat: int, pack_cmd: list[str] | None) -> dict[str, list[dict]]:
    root = tmp / "root"
    load = [sys.executable, "-c", LOAD, str(model)]
    runs: dict[str, list[dict]] = {}
    for i in range(repeat):
        shutil.rmtree(root, ignore_errors=True)
        env = dict(os.environ)
        for name, value in (("no recipe", "off"), ("records", str(root)), ("recipe", str(root))):
            log = str(tmp / f"{name}.log")
            r = run_tree_measured(load, env={**env, "VLMPACK_CACHE": value}, log=log)
            r["torch"] = Path(log).read_text().split()[-1] == "True"
            runs.setdefault(name, []).append(r)
        if pack_cmd is not None:
            for name, cache in (("pack, no recipe", "off"), ("pack, recipe", str(tmp / f"pack-root-{i}"))):
                if cache != "off":  # a fresh count cache that holds only the recipes: the counts are redone
                    shutil.copytree(root / "load", Path(cache) / "load")
                out = tmp / f"out-{name}-{i}"
                runs.setdefault(name, []).append(
                    run_tree_measured([*pack_cmd, "--output", str(out), "--cache-dir", cache]))
                shutil.rmtree(out, ignore_errors=True)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", action="append", help="model directory (repeatable; default: the demo's)")
    ap.add_argument("--pack", type=int, default=200, help="records of the vlmpack pack rows (0: none)")
    add_data_option(ap)
    args = ap.parse_args()
    models = [Path(m) for m in args.model] if args.model else [demo_model_dir()]
    print(f"{'model':<24} {'load':<16} {'wall s':>14} {'CPU s':>14} {'torch':>6} {'CPU / no recipe':>16}")
    for model in models:
        with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp_name:
            tmp = Path(tmp_name)
            pack_cmd = None
            if args.pack and model == models[0]:
                data = build_demo_data(args.data)
                lines = (data / "real_sft.jsonl").read_text().splitlines()[:args.pack]
                (tmp / "in.jsonl").write_text("\n".join(lines) + "\n")
                pack_cmd = [sys.executable, "-m", "vlmpack", "pack", "--input", str(tmp / "in.jsonl"), "--media-root",
                            str(data), "--model", str(model), "--seq-len", "8192", "--workers", "2", "--no-progress"]
            runs = _runs(tmp, model, args.repeat, pack_cmd)
        base = {"load": statistics.median(r["cpu_seconds"] for r in runs["no recipe"])}
        if "pack, no recipe" in runs:
            base["pack"] = statistics.median(r["cpu_seconds"] for r in runs["pack, no recipe"])
        for name, rs in runs.items():
            wall, cpu = [r["seconds"] for r in rs], [r["cpu_seconds"] for r in rs]
            torch = {r.get("torch") for r in rs} - {None}
            ref = base["pack" if name.startswith("pack") else "load"]
            print(f"{model.name:<24} {name:<16} {statistics.median(wall):5.2f} ({min(wall):.2f}-{max(wall):.2f}) "
                  f"{statistics.median(cpu):5.2f} ({min(cpu):.2f}-{max(cpu):.2f}) "
                  f"{'/'.join(map(str, sorted(torch))) if torch else '':>6} {statistics.median(cpu) / ref:16.2f}")


if __name__ == "__main__":
    main()
