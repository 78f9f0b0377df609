"""End-to-end benchmark of ``vlmpack pack`` on the real demo set: samples/s per stage.

    python bench/bench_pack.py [--seq-len 8192] [--workers 2] [--repeat 3] [--media-only] [--data DIR]

Stages measured one by one on one core (read+validate, count, plan, write), then the whole job
with ``--workers`` processes: in-process (``run_pack``) and as a fresh ``vlmpack pack`` command
(interpreter start, imports and model load included). Median of ``--repeat`` runs. Prints one table,
then the media check levels over every distinct image of the demo set (cold cache, one core):
``header``, the old ``verify`` (PIL ``Image.verify()``: PNG chunk CRCs, no pixels; what vlmpack
did before the default check had to match the loader), the default ``verify`` (accepts exactly
what PIL's ``load()`` decodes, :func:`vlmpack.media.image.check_decodes`) and ``decode`` (full
``load()``). Target: default <= 1.5x old verify. ``--media-only`` prints only that table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # the demo builders, outside the wheel

from demo_data import build_demo_data, build_qwen2_5_vl_model_dir  # noqa: E402

from vlmpack.config import load_config
from vlmpack.media.probe import _orientation, clear_cache, probe_media
from vlmpack.models import load_model
from vlmpack.pack.count import count_samples
from vlmpack.pack.pipeline import make_plan, run_pack
from vlmpack.pack.validate import validate_sample
from vlmpack.readers import read_range, split_ranges
from vlmpack.records import ReadStats, Rejection
from vlmpack.sources import get_source

CACHE = Path.home() / ".cache" / "vlmpack" / "bench"


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
        _orientation(img, fh)
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
    ap.add_argument("--data", type=Path, default=CACHE / "real_data", help="demo data folder (built if absent)")
    args = ap.parse_args()
    data = build_demo_data(args.data)
    if args.media_only:
        media_check_table(data, args.repeat)
        return
    model_dir = build_qwen2_5_vl_model_dir(CACHE / "model")
    if args.formats_only:
        format_table(data, model_dir, args)
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
        make_plan(cfg, manifest)  # JIT warm-up outside the timing
        t_plan, _ = _median_time(lambda: make_plan(cfg, manifest), args.repeat)
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
    format_table(data, model_dir, args)


if __name__ == "__main__":
    main()
