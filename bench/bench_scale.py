"""Scale of ``vlmpack pack``'s driver: wall time, samples/s and peak RSS per stage, 10^4 ... 10^7 samples.

    python bench/bench_scale.py [--sizes 1e4,1e5,1e6,1e7] [--seq-len 8192] [--e2e 1e4] [--data DIR] [--plot PNG]

Counting runs in the workers and is measured end to end (``--e2e`` sizes: a real ``vlmpack pack``
CLI run, 2 workers, on the demo records replicated with new ids; media shared; a cache root holding
only the model's load recipe, so every count is redone but the load follows it). What grows with n
on the driver is what this measures for the larger sizes, where counting every sample on this
2-core machine would take hours (about 80 samples/s here): the real demo set is counted once
(cached), and its per-task count results are replicated with unique ids into the
``MeasureResult`` objects that workers hand the driver (tasks of the demo's own size, each owning
its arrays, media shared), in a fresh child process per size. The child then runs the driver's
own code, stage by stage, as ``run_pack`` does: each result saved and released as
``count_stage`` does; ``build_manifest`` (columns filled task by task from the saved results +
hash-sort duplicate detection); ``manifest_digest`` + ``stage_manifest`` (``manifest.parquet`` written, the
id column dropped) + ``plan_stage`` (BFD) + overlong rejections (ids read back from ``manifest.parquet``);
``_shard_tasks`` (array slices); ``build_report``; freed memory returned to the OS between stages
(``release_free_memory``) as ``run_pack`` does. Writing (workers, bounded by shard size) and
the HTML figures are left out. RSS is sampled every millisecond; bytes per sample = (peak - RSS
after the model-free set-up) / n; driver CPU-ms per sample: the process's CPU time over those stages
/ n; end to end: the command's CPU time, workers included / n. ``--plot`` draws both against n.
The reference workflow (LLaVA-OneVision-2's offline packing) publishes about 390k samples per
node in 40-45 min at L = 4096 (~150 samples/s per node), with no global plan.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from demo_set import CACHE, add_data_option, build_demo_data, demo_model_dir
from measure import record_load_recipe

BYTES_TARGET = 150  # driver bytes per sample (issue 24)
CPU_TARGET_MS = 1.0  # CPU-ms per sample end to end on the image/text mix (issue 24)


def _rss_now_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Peak:
    """Samples the current RSS every millisecond in a thread; ``peak()`` = the highest seen so far
    (``ru_maxrss`` would include the import-time peak, which hides the growth with n)."""

    def __init__(self) -> None:
        self.value = _rss_now_mb()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.value = max(self.value, _rss_now_mb())
            time.sleep(0.001)

    def peak(self) -> float:
        self.value = max(self.value, _rss_now_mb())
        return self.value

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def base_results(data: Path, model_dir: Path) -> Path:
    """Count the demo set once into a count store of the bench cache (data only: Arrow + sealed
    JSON, :mod:`vlmpack.pack.results`) and return that folder; counted again when it cannot be read."""
    from vlmpack.config import load_config
    from vlmpack.pack import stages
    from vlmpack.pack.count_stage import count_stage
    from vlmpack.pack.nodes import node_ranges

    dest = CACHE / "scale_base"
    cfg = load_config(input=[str(data / "real_sft.jsonl")], media_root=str(data), model=str(model_dir),
                      output=str(CACHE / "scale_unused"), seq_len=8192, workers=2, progress=False)
    payload = cfg.fingerprint_payload()
    ranges, _ = node_ranges(cfg, stages.TASK_BYTES)
    count_stage(stages.CountOptions.of(cfg), dest, ranges, stages.count_key(cfg, payload), {},
                workers=stages.Workers.of(cfg), payload=stages.count_payload(cfg, payload))
    return dest


def _load_base(store: Path) -> list:
    """The task results of the base store, with their arrays (task index = position, one input)."""
    from vlmpack.pack.results import read_result

    out = []
    while (r := read_result(store, len(out), 0, check_part=False)) is not None:
        out.append(r.flatten())
    return out


def replicate(base: list, n: int):
    """Yield ``MeasureResult`` objects for ``n`` samples: the base tasks repeated (arrays as they are,
    ids made unique with a ``#<copy>`` suffix, task index and record offsets as in a real run)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from vlmpack.pack.count_task import MeasureResult, id_key_hashes

    left, copy, index = n, 0, 0
    while left > 0:
        for r in base:
            if left <= 0:
                break
            k = min(left, len(r.ids))
            suffix = pa.scalar(f"#{copy}")
            ids = pc.binary_join_element_wise(r.ids.slice(0, k), suffix, "")
            cp = lambda a: a[:k].copy()  # noqa: E731 - each task owns its arrays, as a worker's result does
            index += 1
            yield (MeasureResult(
                index=index - 1, file_idx=0, ids=ids.cast(pa.string()),
                num_tokens=cp(r.num_tokens), media_tokens=cp(r.media_tokens), num_media=cp(r.num_media),
                kind=cp(r.kind), media_bytes=cp(r.media_bytes), line=cp(r.line), offset=cp(r.offset),
                rec_offset=cp(r.rec_offset), rec_len=cp(r.rec_len), id_kind=cp(r.id_kind),
                label_tokens=cp(r.label_tokens), media_sha256=r.media_sha256,
                kind_tokens={c: cp(a) for c, a in r.kind_tokens.items()},
                stats=r.stats, bound_counted_max=r.bound_counted_max, bound_skipped_min=r.bound_skipped_min,
                id_hash=id_key_hashes(ids.to_pylist(), r.id_kind[:k].tolist())))
            left -= k
        copy += 1


def driver_child(n: int, seq_len: int, base_store: str, model_dir: str) -> dict:
    """In a fresh process: the driver stages on ``n`` replicated samples; seconds and peak RSS."""
    import numpy as np

    from vlmpack.config import load_config
    from vlmpack.pack.count_stage import media_digest, read_stats
    from vlmpack.pack.driver_memory import release_free_memory
    from vlmpack.pack.manifest import InputFiles, build_manifest, manifest_digest
    from vlmpack.pack.pipeline import MEMBER_ONLY_COLUMNS, _shard_tasks
    from vlmpack.pack.plan_stage import overlong_rejections, plan_stage, stage_manifest
    from vlmpack.pack.report import build_report
    from vlmpack.pack.results import save_result
    from vlmpack.pack.stages import PlanOptions, WriteOptions, plan_key
    from vlmpack.packing import plan_packs

    plan_packs(np.array([1, 2, 3]), 8, algorithm="bfd")  # JIT warm-up outside the timing
    base = _load_base(Path(base_store))
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "in.jsonl"
        inp.write_text("{}\n")
        cfg = load_config(input=[str(inp)], model=model_dir, output=str(Path(tmp) / "out"), seq_len=seq_len,
                          progress=False)
        gc.collect()
        rss0 = _rss_now_mb()
        peak = _Peak()
        _rss_mb = peak.peak
        row = {"n": n, "rss_base_mb": rss0}
        t = time.perf_counter()
        store = Path(tmp) / "records"
        store.mkdir()
        results = []
        for r in replicate(base, n):  # as count_stage does with each finished task: save, keep scalars
            save_result(store, r)
            r.flatten().release()
            results.append(r)
        row["results_s"], row["rss_results_mb"] = time.perf_counter() - t, _rss_mb()
        cpu = time.process_time()  # the driver's own stages from here (the replication above is the bench's)
        t = time.perf_counter()
        manifest, rejections = build_manifest(InputFiles.of(cfg), results, store)
        release_free_memory()
        row["manifest_s"], row["rss_manifest_mb"] = time.perf_counter() - t, _rss_mb()
        t = time.perf_counter()
        run = Path(tmp) / "run"
        run.mkdir()
        opts = PlanOptions.of(cfg)
        staged = stage_manifest(opts, run, manifest, plan_key(opts, manifest_digest(manifest)), {})
        manifest = staged.manifest  # as run_pack does: the ids leave the driver before planning
        release_free_memory()
        plan, _, _ = plan_stage(opts, run, staged, {})
        del staged
        rejections += overlong_rejections(opts, InputFiles.of(cfg), run, manifest, plan)
        manifest = manifest.drop_columns(["line", "offset", "id_kind"])
        release_free_memory()
        row["plan_s"], row["rss_plan_mb"] = time.perf_counter() - t, _rss_mb()
        t = time.perf_counter()
        media_digest(results)
        tasks = _shard_tasks(WriteOptions.of(cfg, cfg.shard_prefix), run, manifest, plan)
        manifest = manifest.drop_columns(list(MEMBER_ONLY_COLUMNS))
        release_free_memory()
        row["shard_tasks_s"], row["rss_shard_tasks_mb"] = time.perf_counter() - t, _rss_mb()
        t = time.perf_counter()
        report = build_report(cfg, "x", read_stats(results), manifest, plan, rejections, [], {}, None)
        row["report_s"], row["rss_peak_mb"] = time.perf_counter() - t, _rss_mb()
        row["cpu_s"] = time.process_time() - cpu
        peak.stop()
        row.update(samples=int(len(manifest)), packs=int(plan.num_packs), shards=len(tasks),
                   utilization=report.get("utilization"))
    return row


def e2e(n: int, data: Path, model_dir: Path, seq_len: int, *, text_only: bool = False) -> dict:
    """A real ``vlmpack pack`` CLI run (2 workers) on the demo records replicated to ``n`` with
    new ids (``text_only``: only the 2,846 records without images), its cache root holding only the
    model's load recipe (no counts reused); wall seconds,
    CPU seconds (workers included), the driver's peak RSS (``ru_maxrss`` of the command's process)
    and ``digest``: sha256 over the shards' names and sha256s (the run's folder is always
    ``CACHE/e2e_run``, emptied before and removed after, so the locators in the shards, and so the
    digests of two runs, are comparable)."""
    tmp = CACHE / "e2e_run"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        lines = [json.loads(x) for x in (data / "real_sft.jsonl").read_text().splitlines()]
        if text_only:
            lines = [r for r in lines if not r.get("images")]
        with open(Path(tmp) / "in.jsonl", "w") as f:
            for i in range(n):
                rec = dict(lines[i % len(lines)])
                rec["id"] = f"{rec.get('id', i)}#{i // len(lines)}"
                f.write(json.dumps(rec) + "\n")
        cmd = [sys.executable, "-c", "import resource,sys,runpy; sys.argv=['vlmpack']+sys.argv[1:]; "
               "exec('try:\\n runpy.run_module(\"vlmpack\", run_name=\"__main__\")\\nfinally:\\n "
               "print(\"RSS\", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)')",
               "pack", "--input", f"{tmp}/in.jsonl", "--media-root", str(data), "--model", str(model_dir),
               "--output", f"{tmp}/out", "--seq-len", str(seq_len), "--workers", "2", "--no-progress",
               "--cache-dir", f"{tmp}/cache"]
        # a cache root that holds only the model's load recipe (vlmpack.models.load_recipe), recorded
        # before timing as a machine's first load records it: the counts are all redone
        record_load_recipe(model_dir, f"{tmp}/cache")
        t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
        rss = [int(x.split()[1]) for x in r.stderr.splitlines() if x.startswith("RSS ")]
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        report = json.loads((Path(tmp) / "out" / "report.json").read_text())
        digest = hashlib.sha256()
        for shard in sorted((Path(tmp) / "out").glob("*.tar")):
            digest.update(f"{shard.name}\0{hashlib.sha256(shard.read_bytes()).hexdigest()}\0".encode())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"n": n, "digest": digest.hexdigest(),
            "wall_s": wall, "samples_s": n / wall, "driver_rss_mb": rss[-1] / 1024 if rss else float("nan"),
            "packed": report["samples_packed"], "count_s": report["seconds"].get("measure"),
            "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="driver-stage sizes (samples)")
    ap.add_argument("--e2e", default="1e4", help="end-to-end CLI sizes (samples; '' for none)")
    ap.add_argument("--seq-len", type=int, default=8192)
    add_data_option(ap)
    ap.add_argument("--plot", type=Path, default=None, help="write the per-sample figure (PNG) here")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        n, seq_len, base_store, model = args.child
        print(json.dumps(driver_child(int(float(n)), int(seq_len), base_store, model)))
        return
    data = build_demo_data(args.data)
    model_dir = demo_model_dir()
    base_store = base_results(data, model_dir)
    rows = []
    for s in [x for x in args.sizes.split(",") if x]:
        r = subprocess.run([sys.executable, __file__, "--child", s, str(args.seq_len), str(base_store), str(model_dir)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"\ndriver stages on n replicated real count results (seq_len {args.seq_len}; one process, one run)\n")
    print("| samples | manifest s | plan s | shard tasks s | report s | driver samples/s | driver CPU-ms/sample | "
          "peak RSS MB | RSS over base MB | bytes/sample |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        secs = r["manifest_s"] + r["plan_s"] + r["shard_tasks_s"] + r["report_s"]
        grow = r["rss_peak_mb"] - r["rss_base_mb"]
        print(f"| {r['n']:,} | {r['manifest_s']:.2f} | {r['plan_s']:.2f} | {r['shard_tasks_s']:.2f} | "
              f"{r['report_s']:.2f} | {r['n'] / secs:,.0f} | {1000 * r['cpu_s'] / r['n']:.4f} | "
              f"{r['rss_peak_mb']:,.0f} | {grow:,.0f} | "
              f"{grow * 2**20 / r['n']:,.0f} |")
    print("\ndriver RSS over the base after each stage, bytes per sample (the peak so far, sampled every ms)\n")
    stages = ("results", "manifest", "plan", "shard_tasks", "peak")
    print("| samples | " + " | ".join(stages) + " |")
    print("|---:|" + "---:|" * len(stages))
    for r in rows:
        print(f"| {r['n']:,} | " + " | ".join(f"{(r[f'rss_{k}_mb'] - r['rss_base_mb']) * 2**20 / r['n']:,.0f}"
                                              for k in stages) + " |")
    sizes = [int(float(x)) for x in args.e2e.split(",") if x]
    e2e_rows: list[dict] = []
    if sizes:
        print("\nend to end, `vlmpack pack` CLI, 2 workers (demo records replicated, media shared)\n")
        print("| samples | wall s | samples/s | count stage s | CPU-ms/sample | driver peak RSS MB | packed |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in sizes:
            r = e2e(n, data, model_dir, args.seq_len)
            e2e_rows.append(r)
            print(f"| {n:,} | {r['wall_s']:.1f} | {r['samples_s']:.0f} | {r['count_s']:.1f} | "
                  f"{1000 * r['cpu_s'] / n:.2f} | {r['driver_rss_mb']:,.0f} | {r['packed']:,} |")
        print("\nreference workflow (LLaVA-OneVision-2 offline packing, published): ~390k samples per node in "
              "40-45 min at L = 4096 (~150 samples/s per node)")
    if args.plot is not None:
        plot(rows, e2e_rows, args.plot)


def plot(rows: list[dict], e2e_rows: list[dict], path: Path) -> None:
    """PNG at ``path``: driver bytes per sample (RSS over the base / n) and CPU-ms per sample
    (the driver's stages; end to end, workers included, for the ``--e2e`` sizes) against n."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(11, 4.2))
    mem, cpu = fig.subplots(1, 2)
    n = [r["n"] for r in rows]
    per = [(r["rss_peak_mb"] - r["rss_base_mb"]) * 2**20 / r["n"] for r in rows]
    mem.plot(n, per, "o-", color="black", label="driver: peak RSS over its set-up, / n")
    for i, (x, y) in enumerate(zip(n, per)):  # the last label left of its point: inside the axes
        last = i == len(n) - 1
        mem.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(-6, 6) if last else (6, 6),
                     ha="right" if last else "left", fontsize=8)
    mem.axhline(BYTES_TARGET, color="tab:red", linestyle=":", label=f"target: {BYTES_TARGET} bytes / sample")
    mem.set(xscale="log", yscale="log", xlabel="samples n", ylabel="bytes per sample", ylim=(80, max(per) * 2),
            title="Driver memory per sample (replicated real counts)")
    cpu.plot(n, [1000 * r["cpu_s"] / r["n"] for r in rows], "o-", color="black",
             label="driver stages: manifest, plan, shard tasks, report")
    if e2e_rows:
        cpu.plot([r["n"] for r in e2e_rows], [1000 * r["cpu_s"] / r["n"] for r in e2e_rows], "s--",
                 color="tab:blue", label="vlmpack pack end to end, workers, start and model load included")
    cpu.axhline(CPU_TARGET_MS, color="tab:red", linestyle=":", label=f"target: {CPU_TARGET_MS:g} CPU-ms / sample (mix)")
    cpu.set(xscale="log", yscale="log", xlabel="samples n", ylabel="CPU-ms per sample", title="CPU time per sample")
    for ax in (mem, cpu):
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _p: ""))
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right" if ax is mem else "center right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
