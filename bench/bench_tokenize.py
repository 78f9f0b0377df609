"""Counting's tokenizer: transformers' call against tiktoken (vlmpack.models.tiktoken_bpe), alone and end to end.

    python bench/bench_tokenize.py [--e2e 3e4] [--rounds 3] [--data DIR]

1. The demo's rendered texts (every record of ``real_sft.jsonl`` through the demo model's chat
   template) tokenized in batches of 256 by ``tokenizer(texts)["input_ids"]`` and by
   :class:`~vlmpack.models.tiktoken_bpe.TiktokenBPE` (its short-piece memo emptied before each
   round), interleaved ``--rounds`` times in one process, ``TOKENIZERS_PARALLELISM=false`` (one
   core, as in a count worker); CPU seconds, us a token, and whether the ids are equal.
2. ``vlmpack pack`` end to end (``bench_scale.e2e``: the demo records replicated with new ids, 2
   workers, a cache root holding only the model's load recipe) with ``VLMPACK_TIKTOKEN=off`` and
   on, interleaved; CPU-ms a sample (workers included) and the shards' sha256 (equal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench_scale import e2e  # noqa: E402
from demo_set import add_data_option, build_demo_data, demo_model_dir  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def alone(data: Path, model_dir: Path, rounds: int) -> None:
    from vlmpack.layouts import to_canonical
    from vlmpack.models import FAMILIES, model_type
    from vlmpack.models.tiktoken_bpe import TiktokenBPE, full_problem

    family = FAMILIES[model_type(model_dir)](model_dir)
    tok = family.tokenizer
    texts = [family.render(to_canonical(json.loads(x))[0]) for x in (data / "real_sft.jsonl").read_text().splitlines()]
    print(f"vocabulary check: {full_problem(tok) or 'passed'}")
    fast = TiktokenBPE(tok)
    runs: dict[str, list[float]] = {"transformers": [], "tiktoken": []}
    ids: dict[str, list] = {}
    for _ in range(rounds):
        for name in runs:
            fast._memo.clear()
            t = _cpu()
            out = []
            for b in range(0, len(texts), 256):
                batch = texts[b:b + 256]
                out += tok(batch)["input_ids"] if name == "transformers" else fast(batch)
            runs[name].append(_cpu() - t)
            ids[name] = out
    n_tok = sum(map(len, ids["transformers"]))
    print(f"\n{len(texts):,} rendered demo texts, {n_tok:,} tokens, one process, {rounds} interleaved rounds\n")
    print("| tokenizer | CPU s (median, min-max) | us / token | ids equal |")
    print("|---|---:|---:|---|")
    base = statistics.median(runs["transformers"])
    for name, xs in runs.items():
        med = statistics.median(xs)
        print(f"| {name} | {med:.2f} ({min(xs):.2f}-{max(xs):.2f}) | {1e6 * med / n_tok:.2f} | "
              f"{ids[name] == ids['transformers']} |")
    print(f"\ntiktoken / transformers CPU: {statistics.median(runs['tiktoken']) / base:.2f}")


def end_to_end(n: int, data: Path, model_dir: Path, rounds: int) -> None:
    rows: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(rounds):
        for mode in rows:
            os.environ["VLMPACK_TIKTOKEN"] = mode
            t = time.perf_counter()
            r = e2e(n, data, model_dir, 8192)
            r["wall_s"] = time.perf_counter() - t
            rows[mode].append(r)
    os.environ.pop("VLMPACK_TIKTOKEN")
    print(f"\n`vlmpack pack`, {n:,} demo records replicated with new ids, 2 workers, {rounds} interleaved rounds\n")
    print("| VLMPACK_TIKTOKEN | CPU-ms / sample (median, min-max) | count stage s | packed | shards sha256 |")
    print("|---|---:|---:|---:|---|")
    for mode, rs in rows.items():
        ms = [1000 * r["cpu_s"] / n for r in rs]
        print(f"| {mode} | {statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f}) | "
              f"{statistics.median(r['count_s'] for r in rs):.1f} | {rs[0]['packed']:,} | {rs[0]['digest'][:12]} |")
    on = statistics.median(r["cpu_s"] for r in rows["on"])
    off = statistics.median(r["cpu_s"] for r in rows["off"])
    same = len({r["digest"] for rs in rows.values() for r in rs}) == 1
    print(f"\non / off CPU: {on / off:.2f}; shards equal: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--e2e", default="3e4", help="samples of the end-to-end pair ('' for none)")
    ap.add_argument("--rounds", type=int, default=3)
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    model_dir = demo_model_dir()
    alone(data, model_dir, args.rounds)
    if args.e2e:
        end_to_end(int(float(args.e2e)), data, model_dir, args.rounds)


if __name__ == "__main__":
    main()

