"""Write time of each output layout on the demo set (real data): the layouts share the writer.

    python bench/bench_layouts.py [--repeat 5] [--seq-len 8192] [--data DIR]

The demo set is packed once per layout of :data:`vlmpack.sinks.SINKS` (``--group-by-kind``, which
``loongforge-mix-qa`` needs, for all; count cache under ``~/.cache/vlmpack/bench``); then each
layout writes all its packs as one shard (:func:`vlmpack.pack.write.write_shard`, the write stage's
own function: media read and checked, members made by the layout's sink, tar, ``.tar.idx`` and
hashes) from its run's records and plan (the same packs: the demo set has no sample the trainers'
layouts reject), ``--repeat`` times each, interleaved. The table gives each layout's min / median
seconds and its median over the ``vlmpack`` layout's; the target is within 10 % (ratio <= 1.10).
Speed targets are checked here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from demo_set import CACHE, add_data_option, build_demo_data, demo_model_dir

TARGET = 1.10


def main() -> None:
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack
    from vlmpack.pack.rundir import RUN_DIR
    from vlmpack.pack.write import ShardTask, member_rows, write_shard
    from vlmpack.packing import PackPlan
    from vlmpack.sinks import SINKS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=8192)
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    model_dir = demo_model_dir()
    with tempfile.TemporaryDirectory(prefix="vlmpack-bench-layouts-") as tmp:
        tasks = {}
        for name in SINKS:
            out = Path(tmp) / f"out-{name}"
            run_pack(load_config(input=[str(data / "real_sft.jsonl")], media_root=str(data), model=str(model_dir),
                                 output=str(out), seq_len=args.seq_len, progress=False, workers=2, layout=name,
                                 group_by_kind=True, cache_dir=str(CACHE / "counts")))
            run = out / RUN_DIR
            plan, man = PackPlan.from_npz(run / "plan.npz"), pq.read_table(run / "manifest.parquet")
            rows, offsets = member_rows(man, np.asarray(plan.order)), np.asarray(plan.offsets, np.int64)
            tasks[name] = (rows, offsets, str(run / "records"))
        report = json.loads((Path(tmp) / "out-vlmpack" / "report.json").read_text())
        times: dict[str, list[float]] = {name: [] for name in SINKS}
        sizes: dict[str, int] = {}
        for r in range(args.repeat):
            for name in SINKS:
                dest = Path(tmp) / f"{name}-{r}"
                dest.mkdir()
                rows, offsets, records = tasks[name]
                task = ShardTask(0, "bench-000000.tar", 0, rows, offsets, args.seq_len, str(dest), records,
                                 media_root=str(data), layout=name)
                t = time.perf_counter()
                res = write_shard(task)
                times[name].append(time.perf_counter() - t)
                sizes[name] = res.nbytes
                for p in dest.iterdir():
                    p.unlink()
    base = statistics.median(times["vlmpack"])
    print(f"demo set: {report['samples_packed']:,} samples, {report['packs']} packs of L={args.seq_len}, "
          f"{args.repeat} runs per layout")
    print(f"{'layout':<22} {'MB':>8} {'min s':>7} {'median s':>9} {'vs vlmpack':>11}  target <= {TARGET:.2f}")
    for name, ts in times.items():
        ratio = statistics.median(ts) / base
        print(f"{name:<22} {sizes[name] / 1e6:>8.1f} {min(ts):>7.3f} {statistics.median(ts):>9.3f} {ratio:>11.3f}  "
              f"{'ok' if ratio <= TARGET else 'SLOWER'}")


if __name__ == "__main__":
    main()
