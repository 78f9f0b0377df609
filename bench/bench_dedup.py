"""Cost of ``--dedup exact`` (:mod:`vlmpack.pack.dedup`) at 10^6 samples, on one core of the driver.

    python bench/bench_dedup.py [--samples 1000000] [--dup-share 0.1] [--repeat 3]

Records part files as the count stage writes them (each sample's entry line and media line,
:func:`vlmpack.pack.count_task.record_lines` layout), 10 tasks, entries of real demo shape (a
two-turn conversation of ~200 characters, a third of them with one image), ``--dup-share`` of the
samples copies of earlier ones under new ids. Rows: the content keys (read + JSON parse + BLAKE2b of
every entry), the first-copy search, the manifest filter, the whole :func:`dedup_exact`; median of
``--repeat`` runs, and per sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from vlmpack.pack.count_task import part_path
from vlmpack.pack.dedup import content_keys, dedup_exact, first_copies
from vlmpack.packfmt import compact_json


class _Inputs:
    """What :func:`dedup_exact` asks of :class:`vlmpack.pack.manifest.InputFiles`: locators."""

    def locator(self, file_idx: int, line: int, offset: int) -> str:
        return f"in-{file_idx}.jsonl:{line}"


def _write(records: Path, n: int, dup_share: float, tasks: int = 10) -> pa.Table:
    rng = np.random.default_rng(0)
    uniq = int(n * (1 - dup_share))
    src = np.concatenate([np.arange(uniq), rng.integers(0, uniq, n - uniq)])  # sample i shows content src[i]
    per = -(-n // tasks)
    cols = {k: [] for k in ("id", "num_tokens", "part", "rec_offset", "rec_len", "file_idx", "line", "offset")}
    for t in range(tasks):
        blobs, pos = [], 0
        for i in range(t * per, min(n, (t + 1) * per)):
            c = int(src[i])
            img = c % 3 == 0
            entry = compact_json({
                "id": f"s{i:08d}", "id_kind": "str", "num_tokens": 60 + c % 400,
                "source": {"file": "in.jsonl", "line": i + 1, "offset": 0, "unit": "line"},
                "messages": [{"role": "user", "content": ([{"type": "image", "part": "img0.png"}] if img else [])
                              + [{"type": "text", "text": f"Question {c}: what does the picture show? " * 2}]},
                             {"role": "assistant", "content": [{"type": "text", "text": f"Answer number {c}. " * 4}]}],
                "media": [{"part": "img0.png", "kind": "image", "width": 640, "height": 480, "num_tokens": 391}]
                if img else []})
            media = json.dumps([[f"{c:064x}", "img0.png", f"images/{i}.png"]] if img else []).encode()
            blobs += [entry, b"\n", media, b"\n"]
            for k, v in (("id", f"s{i:08d}"), ("num_tokens", 60 + c % 400), ("part", t), ("rec_offset", pos),
                         ("rec_len", len(entry)), ("file_idx", 0), ("line", i + 1), ("offset", 0)):
                cols[k].append(v)
            pos += len(entry) + len(media) + 2
        part_path(records, t).write_bytes(b"".join(blobs))
    return pa.table({k: pa.array(v, pa.string() if k == "id" else pa.int64()) for k, v in cols.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--dup-share", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vlmpack-bench-dedup-") as tmp:
        records = Path(tmp)
        manifest = _write(records, args.samples, args.dup_share)
        size = sum(p.stat().st_size for p in records.iterdir())
        rows = {"content keys (read + parse + BLAKE2b)": [], "first-copy search": [], "dedup_exact (all)": []}
        for _ in range(args.repeat):
            t = time.perf_counter()
            keys = content_keys(manifest, records)
            rows["content keys (read + parse + BLAKE2b)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            dups, _ = first_copies(keys)
            rows["first-copy search"].append(time.perf_counter() - t)
            t = time.perf_counter()
            kept, rejections = dedup_exact(_Inputs(), manifest, records)
            rows["dedup_exact (all)"].append(time.perf_counter() - t)
        print(f"\n{args.samples:,} samples, {size / 1e6:,.0f} MB of records part files, "
              f"{len(dups):,} copies found ({len(rejections):,} rejected, {kept.num_rows:,} kept)\n")
        print("| step | median s | µs per sample |")
        print("|---|---|---|")
        for name, secs in rows.items():
            med = statistics.median(secs)
            print(f"| {name} | {med:.2f} | {1e6 * med / args.samples:.2f} |")


if __name__ == "__main__":
    main()
