"""The main job, ``vlmpack pack``: read -> validate -> count -> plan -> write -> metadata -> report.

Every stage leaves its result in the run directory ``OUT/.vlmpack/`` (the source of truth):

- ``config.json``: the config and its fingerprint; a run with another fingerprint is refused
  (:class:`RunDirError`) unless ``overwrite`` is set.
- ``records/part-<task>.jsonl`` + ``part-<task>.result.pkl``: per measure task, the canonical
  accepted samples and the task's arrays/rejections (a finished task is not run again);
- ``manifest.parquet``: one row per valid, unique sample (id, tokens, media, locator, where its
  record is); ``plan.npz``: the :class:`vlmpack.packing.PackPlan`;
- ``shards/<name>.json``: a marker per finished shard (sha256, counts).

So a killed run started again skips what is done and produces the same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import time
from concurrent.futures import Executor, as_completed
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from vlmpack.config import PackConfig
from vlmpack.energon.meta import write_metadata
from vlmpack.errors import OverlongError, RunDirError
from vlmpack.executors import make_executor
from vlmpack.measure import MeasureResult, MeasureTask, run_task
from vlmpack.packing import PackPlan, plan_packs
from vlmpack.readers import split_ranges
from vlmpack.records import Locator, ReadStats, Rejection
from vlmpack.report import build_report
from vlmpack.writer import ShardResult, ShardTask, assign_shards, estimate_pack_bytes, write_shard

log = logging.getLogger(__name__)

RUN_DIR = ".vlmpack"
TASK_BYTES = 2 << 20  # input bytes per measure task (fixed: the output must not depend on workers)
_OWNED = ("rejects.jsonl", "report.json", ".nv-meta", RUN_DIR)


def _run_all(pool: Executor, fn, tasks: list, *, done, desc: str, weights: list[int], unit: str, show: bool) -> None:
    """Run ``fn`` over ``tasks`` with a progress bar; ``done(task, result)`` is called as each task
    finishes (so its result is saved at once and a killed run does not redo it)."""
    with tqdm(total=sum(weights), desc=desc, unit=unit, unit_scale=True, disable=not show, leave=False) as bar:

        def finish(i: int, fut) -> None:
            done(tasks[i], fut.result())
            bar.update(weights[i])

        pending = {}
        for i, t in enumerate(tasks):
            fut = pool.submit(fn, t)
            if fut.done():  # the in-process executor runs the task inside submit()
                finish(i, fut)
            else:
                pending[fut] = i
        for fut in as_completed(pending):
            finish(pending[fut], fut)


# ---------------------------------------------------------------------------------------- run dir
def prepare_output(cfg: PackConfig, fingerprint: str) -> Path:
    """Create ``OUT/.vlmpack`` or check that it belongs to the same fingerprint.

    Raises :class:`RunDirError` when ``OUT`` holds another config's run and ``overwrite`` is
    not set, or when ``OUT`` is a non-empty directory that vlmpack did not write.
    """
    out = Path(cfg.output)
    run = out / RUN_DIR
    cfg_file = run / "config.json"
    if cfg_file.exists():
        old = json.loads(cfg_file.read_text()).get("fingerprint")
        if old == fingerprint:
            return run
        if not cfg.overwrite:
            raise RunDirError(f"{out} holds a run of another config (fingerprint {old[:12]} != {fingerprint[:12]}); "
                              "pass --overwrite to replace it or choose another --output")
    elif out.exists() and any(out.iterdir()) and not cfg.overwrite:
        raise RunDirError(f"{out} is not empty and was not written by vlmpack; "
                          "pass --overwrite or choose another --output")
    if cfg.overwrite and out.exists():
        for p in out.iterdir():
            if p.name in _OWNED or p.name.startswith(cfg.shard_prefix + "-"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    (run / "records").mkdir(parents=True, exist_ok=True)
    (run / "shards").mkdir(exist_ok=True)
    payload = {"fingerprint": fingerprint, **cfg.fingerprint_payload()}
    cfg_file.write_text(json.dumps(payload, indent=1, sort_keys=True))
    return run


# ---------------------------------------------------------------------------------------- measure
def _measure(cfg: PackConfig, run: Path, pool: Executor) -> list[MeasureResult]:
    tasks, weights = [], []
    for fi, path in enumerate(cfg.input):
        size = os.path.getsize(path)
        for start, end, first_line in split_ranges(path, TASK_BYTES):
            tasks.append(MeasureTask(len(tasks), fi, path, start, end, first_line, cfg.input_schema,
                                     str(cfg.media_root), cfg.allow_absolute_media, cfg.media_check,
                                     str(cfg.model), str(run / "records")))
            weights.append((end if end >= 0 else size) - start)
    results: list[MeasureResult | None] = [None] * len(tasks)
    todo = []
    for t in tasks:
        done = run / "records" / f"part-{t.index:06d}.result.pkl"
        if done.exists():
            results[t.index] = pickle.loads(done.read_bytes())
        else:
            todo.append(t)

    def save(t: MeasureTask, r: MeasureResult) -> None:
        tmp = run / "records" / f"part-{t.index:06d}.result.tmp"
        tmp.write_bytes(pickle.dumps(r))
        os.replace(tmp, run / "records" / f"part-{t.index:06d}.result.pkl")
        results[t.index] = r

    _run_all(pool, run_task, todo, done=save, desc="count", weights=[weights[t.index] for t in todo], unit="B",
             show=cfg.progress)
    return results  # type: ignore[return-value]


def build_manifest(cfg: PackConfig, results: list[MeasureResult]) -> tuple[pa.Table, list[Rejection]]:
    """Concatenate the task results into the manifest (valid, unique samples in input order)
    and the list of rejections, duplicates included."""
    ids = [i for r in results for i in r.ids]

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    names = ("num_tokens", "media_tokens", "num_media", "kind", "media_bytes", "line", "offset",
             "rec_offset", "rec_len")
    cols = {k: cat([getattr(r, k) for r in results]) for k in names}
    file_idx = cat([np.full(len(r.ids), r.file_idx, np.int32) for r in results]).astype(np.int32)
    part = cat([np.full(len(r.ids), r.index, np.int32) for r in results]).astype(np.int32)
    rejections = [x for r in results for x in r.rejections]
    first_seen: dict[str, int] = {}
    dups = []
    for i, sid in enumerate(ids):  # the first occurrence (in input order) is kept
        f = first_seen.setdefault(sid, i)
        if f == i:
            continue
        dups.append(i)
        loc = Locator(cfg.input[file_idx[i]], int(cols["line"][i]), int(cols["offset"][i]))
        first = f"{cfg.input[file_idx[f]]}:{int(cols['line'][f])}"
        rejections.append(Rejection(loc, "duplicate_id", f"id {sid!r} first seen at {first}", sid))
    keep = np.ones(len(ids), dtype=bool)
    keep[np.asarray(dups, dtype=np.int64)] = False
    table = pa.table({
        "id": pa.array([i for i, k in zip(ids, keep.tolist()) if k], pa.string()),
        "num_tokens": cols["num_tokens"][keep].astype(np.int32),
        "media_tokens": cols["media_tokens"][keep].astype(np.int32),
        "num_media": cols["num_media"][keep].astype(np.int16),
        "kind": cols["kind"][keep].astype(np.int8),
        "media_bytes": cols["media_bytes"][keep].astype(np.int64),
        "file_idx": file_idx[keep], "line": cols["line"][keep].astype(np.int64),
        "offset": cols["offset"][keep].astype(np.int64), "part": part[keep],
        "rec_offset": cols["rec_offset"][keep].astype(np.int64), "rec_len": cols["rec_len"][keep].astype(np.int64),
    })
    return table, rejections


# ---------------------------------------------------------------------------------------- plan
def make_plan(cfg: PackConfig, manifest: pa.Table) -> PackPlan:
    """Bin-pack the manifest's samples with the configured algorithm and constraints."""
    col = lambda name: manifest.column(name).to_numpy()  # noqa: E731
    return plan_packs(col("num_tokens").astype(np.int64), cfg.seq_len, algorithm=cfg.algorithm,
                      max_samples_per_pack=cfg.max_samples_per_pack, media_counts=col("num_media").astype(np.int64),
                      media_tokens=col("media_tokens").astype(np.int64), kinds=col("kind"),
                      max_media_per_pack=cfg.max_media_per_pack,
                      max_media_tokens_per_pack=cfg.max_media_tokens_per_pack, group_by_kind=cfg.group_by_kind,
                      pad_to_multiple_of=cfg.pad_to_multiple_of, seed=cfg.seed)


def _overlong_rejections(cfg: PackConfig, manifest: pa.Table, plan: PackPlan) -> list[Rejection]:
    out = []
    ids, ntok = manifest.column("id"), manifest.column("num_tokens")
    fidx, line, off = (manifest.column(c) for c in ("file_idx", "line", "offset"))
    media_n, media_tok = manifest.column("num_media"), manifest.column("media_tokens")
    for i in plan.overlong.tolist():
        n = ntok[i].as_py()
        loc = Locator(cfg.input[fidx[i].as_py()], line[i].as_py(), off[i].as_py())
        if n > cfg.seq_len:
            why = f"{n} tokens > --seq-len {cfg.seq_len}"
        else:  # fits in tokens, but not alone in a pack under a media budget or the padding rule
            why = (f"{n} tokens, {media_n[i].as_py()} media, {media_tok[i].as_py()} media tokens do not fit one pack "
                   f"(--seq-len {cfg.seq_len}, --max-media-per-pack {cfg.max_media_per_pack}, "
                   f"--max-media-tokens-per-pack {cfg.max_media_tokens_per_pack}, "
                   f"--pad-to-multiple-of {cfg.pad_to_multiple_of})")
        if cfg.overlong == "error":
            raise OverlongError(f"sample {ids[i].as_py()!r} at {loc}: {why} ({len(plan.overlong)} such samples); "
                                "use --overlong drop or a larger --seq-len")
        out.append(Rejection(loc, "overlong", why, ids[i].as_py()))
    return out


# ---------------------------------------------------------------------------------------- write
def _shard_tasks(cfg: PackConfig, run: Path, manifest: pa.Table, plan: PackPlan) -> list[ShardTask]:
    col = lambda name: manifest.column(name).to_numpy()  # noqa: E731
    pack_bytes = estimate_pack_bytes(plan.offsets, plan.order, col("rec_len"), col("media_bytes"), col("num_media"))
    bounds = assign_shards(pack_bytes, cfg.max_packs_per_shard, cfg.max_shard_bytes)
    part, rec_off, rec_len = col("part"), col("rec_offset"), col("rec_len")
    tasks = []
    for s in range(len(bounds) - 1):
        packs = []
        for p in range(bounds[s], bounds[s + 1]):
            members = plan.order[plan.offsets[p]:plan.offsets[p + 1]]
            packs.append([(int(part[i]), int(rec_off[i]), int(rec_len[i])) for i in members])
        tasks.append(ShardTask(s, f"{cfg.shard_prefix}-{s:06d}.tar", int(bounds[s]), packs, cfg.seq_len,
                               str(Path(cfg.output)), str(run / "records"),
                               str(cfg.model) if cfg.pretokenize else None))
    return tasks


def _write(cfg: PackConfig, run: Path, tasks: list[ShardTask], pool: Executor) -> list[ShardResult]:
    out = Path(cfg.output)
    for p in out.glob("*.tmp"):  # leftovers of a killed run
        p.unlink()
    results: list[ShardResult | None] = [None] * len(tasks)
    todo = []
    for t in tasks:
        marker = run / "shards" / (t.name + ".json")
        if marker.exists() and (out / t.name).exists() and (out / (t.name + ".idx")).exists():
            results[t.index] = ShardResult(**json.loads(marker.read_text()))
        else:
            todo.append(t)

    def save(t: ShardTask, r: ShardResult) -> None:
        (run / "shards" / (t.name + ".json")).write_text(json.dumps(asdict(r)))
        results[t.index] = r

    _run_all(pool, write_shard, todo, done=save, desc="write", weights=[len(t.packs) for t in todo], unit="pack",
             show=cfg.progress)
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- main
def run_pack(cfg: PackConfig) -> dict:
    """Run the whole job for ``cfg`` and return the report (also written to ``OUT/report.json``).

    Raises :class:`RunDirError` (foreign output dir), :class:`OverlongError` (``overlong="error"``),
    :class:`vlmpack.errors.ConfigError` (model directory). Bad records never raise: they are
    rejected with a reason and listed in ``OUT/rejects.jsonl``.
    """
    fingerprint = cfg.fingerprint()
    run = prepare_output(cfg, fingerprint)
    timings: dict[str, float] = {}
    with make_executor(cfg.executor, cfg.workers, str(cfg.model), cfg.ray_address) as pool:
        t = time.perf_counter()
        results = _measure(cfg, run, pool)
        timings["measure"] = time.perf_counter() - t
        t = time.perf_counter()
        manifest_path = run / "manifest.parquet"
        manifest, rejections = build_manifest(cfg, results)
        if not manifest_path.exists():
            pq.write_table(manifest, manifest_path)
        plan_path = run / "plan.npz"
        plan = PackPlan.from_npz(plan_path) if plan_path.exists() else make_plan(cfg, manifest)
        rejections += _overlong_rejections(cfg, manifest, plan)
        if not plan_path.exists():
            plan.to_npz(plan_path)
        timings["plan"] = time.perf_counter() - t
        t = time.perf_counter()
        shards = _write(cfg, run, _shard_tasks(cfg, run, manifest, plan), pool)
        timings["write"] = time.perf_counter() - t
    write_metadata(cfg.output, {s.name: s.num_packs for s in shards})
    order = {p: i for i, p in enumerate(cfg.input)}
    rejections.sort(key=lambda r: (order.get(r.locator.file, len(order)), r.locator.line))
    with open(Path(cfg.output) / "rejects.jsonl", "w", encoding="utf-8") as f:
        for r in rejections:
            f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
    stats = ReadStats()
    for r in results:
        stats.lines += r.stats.lines
        stats.blank += r.stats.blank
        stats.records += r.stats.records
    timings["worker_read_validate"] = sum(r.seconds_read for r in results)
    timings["worker_count"] = sum(r.seconds_count for r in results)
    report = build_report(cfg, fingerprint, stats, manifest, plan, rejections, shards, timings)
    (Path(cfg.output) / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return report
