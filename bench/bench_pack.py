"""End-to-end benchmark of ``vlmpack pack`` on the real demo set: samples/s per stage.

    python bench/bench_pack.py [--seq-len 8192] [--workers 2] [--repeat 3] [--media-only] [--data DIR]

Stages measured one by one on one core (read+validate, count, plan, write), then the whole job
with ``--workers`` processes: in-process (``run_pack``) and as a fresh ``vlmpack pack`` command
(interpreter start, imports and model load included). Median of ``--repeat`` runs. Prints one table,
then the media check levels over every distinct image of the demo set (cold cache, one core):
``header``, the old ``verify`` (PIL ``Image.verify()``: PNG chunk CRCs, no pixels; what vlmpack
did before the default check had to match the loader), the default ``verify`` (accepts exactly
what PIL's ``load()`` decodes, :func:`vlmpack.media.image.check_decodes`) and ``decode`` (full
``load()``). Target: default <= 1.5x old verify. ``--media-only`` prints only that table. Then the
video counting table (``bench/bench_video.py``): video samples/s counted from the container header
against a full decode, and their ratio; ``--video-only`` prints only that table.

``--parquet-rss`` (alone): memory on a large Parquet input. Builds once, cached under
``~/.cache/vlmpack/bench/parquet/``, a ``--parquet-gb`` GB Parquet file of the demo rows repeated
with new ids, their real image bytes embedded as the HF ``Image`` struct ``{bytes, path}``, one row
group per ``--row-group-rows`` rows (written incrementally: the builder holds one row group), plus
the same rows once (1x demo) as the baseline; then runs ``vlmpack pack`` on each as a child process
(one run each) and prints wall and CPU seconds (workers included), the report's count and write
stage seconds, samples/s and peak memory: of the largest single process (``ru_maxrss``, as in the
per-format table) and of the whole process tree (command + workers: sum of PSS, and of its
anonymous part, polled from ``/proc/PID/smaps_rollup``; forked workers share pages, so PSS and not
RSS is what adds up). Target: largest process well under 1 GB for a 2 GB input, and not much
above the 1x demo's (every process holds torch and the model: ~600 MB before any input).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_video import video_count_table
from demo_set import CACHE, add_data_option, build_demo_data, demo_model_dir
from measure import run_tree_measured

from vlmpack.config import load_config
from vlmpack.media.orientation import orientation
from vlmpack.media.probe import clear_cache, probe_media
from vlmpack.models import load_model
from vlmpack.pack.count_task import count_samples
from vlmpack.pack.pipeline import make_plan, run_pack
from vlmpack.pack.stages import PlanOptions
from vlmpack.pack.validate import validate_sample
from vlmpack.readers import read_range, split_ranges
from vlmpack.records import ReadStats, Rejection
from vlmpack.sources import get_source


def _median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _demo_images(data: Path) -> list[str]:
    """Every distinct image path referenced by the demo's ``real_sft.jsonl`` (sorted)."""
    path = str(data / "real_sft.jsonl")
    out = set()
    for s, e, first in split_ranges(path):
        for rec in read_range(path, s, e, first, schema="auto", media_root=str(data), allow_absolute_media=False,
                              stats=ReadStats()):
            if not isinstance(rec, Rejection):
                out.update(m.path for m in rec.media if m.kind == "image")
    return sorted(out)


def _old_verify(path: str) -> None:
    """The ``verify`` level as it was: any PIL plugin, header + EXIF orientation + ``Image.verify()``."""
    from PIL import Image

    with open(path, "rb") as fh, Image.open(fh) as img:
        orientation(img)
        img.verify()


def media_check_table(data: Path, repeat: int) -> None:
    """Print seconds per check level over every distinct demo image, cold cache, one core."""
    images = _demo_images(data)
    mb = sum(os.path.getsize(p) for p in images) / 1e6

    def level(check):
        def run():
            clear_cache()
            for p in images:
                probe_media(p, "image", check)
        return run

    rows = [("header", level("header")), ("old verify (PIL Image.verify)", lambda: [_old_verify(p) for p in images]),
            ("verify (default: decodes like the loader)", level("verify")), ("decode (full load)", level("decode"))]
    times = {name: _median_time(fn, repeat)[0] for name, fn in rows}
    base = times["old verify (PIL Image.verify)"]
    print(f"\nmedia checks over the {len(images):,} distinct demo images ({mb:.1f} MB), cold cache, one core, "
          f"median of {repeat}\n")
    print(f"| {'check':<42} | {'seconds':>8} | {'MB/s':>7} | {'x old verify':>12} |")
    print(f"|{'-' * 44}|{'-' * 10}:|{'-' * 9}:|{'-' * 14}:|")
    for name, sec in times.items():
        print(f"| {name:<42} | {sec:>8.3f} | {mb / sec:>7.0f} | {sec / base:>12.1f} |")


def _run_measured(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB, the largest of the command and the workers it waited for)."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        sec = time.perf_counter() - t
        if status != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed: {err.read().decode()[-500:]}")
    return sec, usage.ru_maxrss / 1024


def build_big_parquet(data: Path, target_gb: float, rows_per_group: int) -> Path:
    """The demo rows repeated (ids ``<id>-r<k>``) until the file holds ``target_gb`` GB of image
    bytes, images embedded as ``{bytes, path}`` structs; cached (built under a temporary name,
    renamed when complete). ``target_gb <= 0``: the demo rows once."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in open(data / "real_sft.jsonl", encoding="utf-8")]
    per_pass = sum((data / p).stat().st_size for r in rows for p in r.get("images") or [] if (data / p).is_file())
    repeats = max(1, math.ceil(target_gb * 1e9 / per_pass))
    path = CACHE / "parquet" / f"demo_x{repeats}_rg{rows_per_group}.parquet"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    schema = pa.schema([("id", pa.string()), ("images", pa.list_(image)), ("conversations", pa.list_(turn))])
    tmp = path.with_suffix(".parquet.tmp")
    with pq.ParquetWriter(tmp, schema) as w:
        for k in range(repeats):
            for i in range(0, len(rows), rows_per_group):
                chunk = rows[i:i + rows_per_group]
                w.write_table(pa.table({
                    "id": [r["id"] if k == 0 else f"{r['id']}-r{k}" for r in chunk],
                    "images": [[{"bytes": (data / p).read_bytes() if (data / p).is_file() else None, "path": p}
                                for p in r.get("images") or []] for r in chunk],
                    "conversations": [r["conversations"] for r in chunk]}, schema=schema))
    os.replace(tmp, path)
    return path


def parquet_rss_table(data: Path, model_dir: Path, args) -> None:
    """Peak memory and speed of ``vlmpack pack`` on the 1x demo and a ``--parquet-gb`` GB Parquet file."""
    import json

    import pyarrow.parquet as pq

    inputs = [build_big_parquet(data, 0, args.row_group_rows),
              build_big_parquet(data, args.parquet_gb, args.row_group_rows)]
    cols = [("input", 34), ("rows", 7), ("row groups", 10), ("seconds", 8), ("CPU s", 7), ("count s", 7),
            ("write s", 7), ("samples/s", 9), ("largest process RSS", 19), ("tree PSS", 8), ("tree anon PSS", 13)]
    print(f"\nParquet input size vs memory: vlmpack pack CLI, {args.workers} workers, seq_len {args.seq_len}, "
          f"one run each; RSS/PSS in MB; count s / write s: the report's measure / write stage seconds\n")

    def row(cells: list[str]) -> str:
        widths = [w for _, w in cols]
        return "| " + " | ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    print(row([name for name, _ in cols]))
    print("|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, (_, w) in enumerate(cols)) + "|")
    for path in inputs:
        meta = pq.ParquetFile(path).metadata
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            out = Path(tmp) / "out"
            cmd = [sys.executable, "-m", "vlmpack", "pack", "--input", str(path), "--output", str(out),
                   "--model", str(model_dir), "--media-root", str(data), "--seq-len", str(args.seq_len),
                   "--workers", str(args.workers), "--no-progress"]
            m = run_tree_measured(cmd)
            report = json.loads((out / "report.json").read_text())
        stage, nan = report.get("seconds", {}), float("nan")
        cells = [f"{path.name} ({path.stat().st_size / 1e9:.2f} GB)", f"{meta.num_rows:,}", f"{meta.num_row_groups:,}",
                 f"{m['seconds']:.1f}", f"{m['cpu_seconds']:.1f}", f"{stage.get('measure', nan):.1f}",
                 f"{stage.get('write', nan):.1f}", f"{report['records_read'] / m['seconds']:,.0f}",
                 f"{m['max_rss_mb']:.0f}", f"{m['tree_pss_mb']:.0f}", f"{m['tree_anon_mb']:.0f}"]
        print(row(cells), flush=True)


def format_table(data: Path, model_dir: Path, args) -> None:
    """Per input format, the same samples: the demo's ``wds/`` shards read in place against the
    same records as JSONL + loose image files; ``vlmpack pack`` CLI runs, median of ``--repeat``."""
    import json

    shards = sorted((data / "wds").glob("*.tar"))
    with tempfile.TemporaryDirectory() as tmp:
        ids = set()
        for shard in shards:
            for rec in get_source("wds").read(str(shard), 0, -1, 1):
                ids.add(rec.id)
        same = Path(tmp) / "same.jsonl"
        same.write_text("".join(line for line in open(data / "real_sft.jsonl", encoding="utf-8")
                                if json.loads(line)["id"] in ids), encoding="utf-8")
        formats = {"jsonl + loose image files": [same], "wds shards, read in place": shards}
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [json.loads(line) for line in open(same, encoding="utf-8")]
        pq.write_table(pa.table({"id": [r["id"] for r in rows], "conversations": [r["conversations"] for r in rows],
                                 "images": [[{"bytes": (data / p).read_bytes(), "path": p} for p in r.get("images", [])]
                                            for r in rows]}), Path(tmp) / "same.parquet", row_group_size=500)
        formats["parquet, images in cells"] = [Path(tmp) / "same.parquet"]
        print(f"\nper input format: the same {len(ids):,} samples, vlmpack pack CLI, {args.workers} workers, "
              f"median of {args.repeat}\n")
        print(f"| {'input':<28} | {'seconds':>8} | {'samples/s':>10} | {'peak RSS MB':>11} |")
        print(f"|{'-' * 30}|{'-' * 10}:|{'-' * 12}:|{'-' * 13}:|")
        for name, inputs in formats.items():
            runs = []
            for i in range(args.repeat):
                out = Path(tmp) / f"{name[:4]}{i}"
                cmd = [sys.executable, "-m", "vlmpack", "pack", "--output", str(out), "--model", str(model_dir),
                       "--media-root", str(data), "--seq-len", str(args.seq_len), "--workers", str(args.workers),
                       "--no-progress"] + [x for p in inputs for x in ("--input", str(p))]
                runs.append(_run_measured(cmd))
            sec = statistics.median(r[0] for r in runs)
            rss = statistics.median(r[1] for r in runs)
            print(f"| {name:<28} | {sec:>8.3f} | {len(ids) / sec:>10,.0f} | {rss:>11.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats-only", action="store_true", help="print only the per-input-format table")
    ap.add_argument("--media-only", action="store_true", help="only the media check table")
    ap.add_argument("--video-only", action="store_true",
                    help="only the video counting table: header vs full decode (bench/bench_video.py)")
    ap.add_argument("--parquet-rss", action="store_true", help="only the Parquet input size vs memory table")
    ap.add_argument("--parquet-gb", type=float, default=2.0, help="size of the large Parquet input (GB)")
    ap.add_argument("--row-group-rows", type=int, default=500, help="rows per row group of the Parquet inputs")
    add_data_option(ap)
    args = ap.parse_args()
    data = build_demo_data(args.data)
    if args.media_only:
        media_check_table(data, args.repeat)
        return
    if args.video_only:
        video_count_table(data, args.repeat)
        return
    model_dir = demo_model_dir()
    if args.formats_only:
        format_table(data, model_dir, args)
        return
    if args.parquet_rss:
        parquet_rss_table(data, model_dir, args)
        return
    inputs = [str(data / "real_sft.jsonl"), str(data / "broken.jsonl")]
    family = load_model(str(model_dir))
    records = sum(1 for p in inputs for line in open(p, "rb") if line.strip())

    def read_validate():
        out = []
        for p in inputs:
            for s, e, first in split_ranges(p):
                for rec in read_range(p, s, e, first, schema="auto", media_root=str(data),
                                      allow_absolute_media=False, stats=ReadStats()):
                    if not isinstance(rec, Rejection):
                        rec = validate_sample(rec, check="verify")
                    out.append(rec)
        return [r for r in out if not isinstance(r, Rejection)]

    rows = []
    t_read, valid = _median_time(read_validate, args.repeat)
    rows.append(("read + validate (1 core)", records, t_read))
    t_count, _ = _median_time(lambda: count_samples(family, valid), args.repeat)
    rows.append(("count (1 core)", len(valid), t_count))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(input=inputs, media_root=str(data), model=str(model_dir), output=f"{tmp}/w1",
                          seq_len=args.seq_len, workers=1, progress=False)
        report = run_pack(cfg)
        import pyarrow.parquet as pq

        manifest = pq.read_table(Path(tmp) / "w1" / ".vlmpack" / "manifest.parquet")
        make_plan(PlanOptions.of(cfg), manifest)  # JIT warm-up outside the timing
        t_plan, _ = _median_time(lambda: make_plan(PlanOptions.of(cfg), manifest), args.repeat)
        rows.append(("plan (1 core)", manifest.num_rows, t_plan))
        rows.append(("write (1 core)", report["samples_packed"], report["seconds"]["write"]))
        times = []
        for i in range(args.repeat):
            cfg = load_config(input=inputs, media_root=str(data), model=str(model_dir), output=f"{tmp}/e{i}",
                              seq_len=args.seq_len, workers=args.workers, progress=False)
            t = time.perf_counter()
            run_pack(cfg)
            times.append(time.perf_counter() - t)
        rows.append((f"end to end, run_pack, {args.workers} workers", records, statistics.median(times)))
        times = []
        for i in range(args.repeat):
            cmd = [sys.executable, "-m", "vlmpack", "pack", "--output", f"{tmp}/c{i}", "--model", str(model_dir),
                   "--media-root", str(data), "--seq-len", str(args.seq_len), "--workers", str(args.workers),
                   "--no-progress"] + [x for p in inputs for x in ("--input", p)]
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        rows.append((f"end to end, CLI incl. start-up, {args.workers} workers", records, statistics.median(times)))
    print(f"\nvlmpack pack on the real demo set ({records:,} records, seq_len {args.seq_len}, "
          f"median of {args.repeat})\n")
    print(f"| {'stage':<44} | {'samples':>8} | {'seconds':>8} | {'samples/s':>10} |")
    print(f"|{'-' * 46}|{'-' * 10}:|{'-' * 10}:|{'-' * 12}:|")
    for name, n, sec in rows:
        print(f"| {name:<44} | {n:>8,} | {sec:>8.3f} | {n / sec:>10,.0f} |")
    media_check_table(data, args.repeat)
    video_count_table(data, args.repeat)
    format_table(data, model_dir, args)


if __name__ == "__main__":
    main()
