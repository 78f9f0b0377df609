"""The main job, ``vlmpack pack``: read -> validate -> count -> plan -> write -> metadata -> report.

Every stage leaves its result in the run directory ``OUT/.vlmpack/`` (the source of truth; all
files written atomically, see :mod:`vlmpack.pack.rundir`; an unreadable one counts as missing):

- ``config.json``: the config and its fingerprint; a run with another fingerprint is refused
  (:class:`RunDirError`) unless ``overwrite`` is set. ``lock``: the lock of a running run.
- ``records/part-<task>.jsonl`` + ``part-<task>.result.pkl``: per measure task, the canonical
  accepted samples and the task's arrays/rejections, with the size and mtime of every media file
  counted (a finished task is not run again unless one of its media files changed since);
- ``manifest.parquet``: one row per valid, unique sample (id, id kind, tokens, media, locator,
  where its record is); ``plan.npz``: the :class:`vlmpack.packing.PackPlan`; ``stages.json``:
  the manifest digest they were made for;
- ``outputs.json``: the shard names this run writes (what ``--overwrite`` may delete);
  ``shards/<name>.json``: a marker per finished shard (sha256, counts, manifest digest).

So a killed run started again skips what is done and produces the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import pickle
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from vlmpack import signals
from vlmpack.config import PackConfig
from vlmpack.energon.meta import write_metadata
from vlmpack.errors import OverlongError, RunFailedError
from vlmpack.pack.count import MeasureResult, MeasureTask, media_changed, part_path, run_task
from vlmpack.pack.executors import guarded_executor
from vlmpack.pack.nodes import InputRange, check_node_output, model_fingerprint, node_ranges, node_record, shard_prefix
from vlmpack.pack.report import build_report, write_report_html
from vlmpack.pack.rundir import RUN_DIR, atomic_write, json_bytes, prepare_output, read_json, read_pickle, unlock_output
from vlmpack.pack.write import ShardResult, ShardTask, assign_shards, estimate_pack_bytes, write_shard
from vlmpack.packing import PackPlan, plan_packs
from vlmpack.records import ID_KINDS, Locator, ReadStats, Rejection
from vlmpack.sources import get_source, resolve_format

log = logging.getLogger(__name__)

TASK_BYTES = 2 << 20  # input bytes per measure task (fixed: the output must not depend on workers)
__all__ = ["RUN_DIR", "build_manifest", "make_plan", "manifest_digest", "run_pack"]


def _run_all(pool: Executor, fn, tasks: list, *, done, desc: str, weights: list[int], unit: str, show: bool) -> None:
    """Run ``fn`` over ``tasks`` with a progress bar; ``done(task, result)`` is called as each task
    finishes (so its result is saved at once and a killed run does not redo it)."""
    with tqdm(total=sum(weights), desc=desc, unit=unit, unit_scale=True, disable=not show, leave=False) as bar:

        def finish(i: int, fut) -> None:
            done(tasks[i], fut.result())
            bar.update(weights[i])

        pending = {}
        for i, t in enumerate(tasks):
            signals.check()
            fut = pool.submit(fn, t)
            if fut.done():  # the in-process executor runs the task inside submit()
                finish(i, fut)
            else:
                pending[fut] = i
        while pending:
            signals.check()
            finished, _ = wait(pending, timeout=signals.POLL_S, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=pending.__getitem__):
                finish(pending.pop(fut), fut)
        signals.check()


# ---------------------------------------------------------------------------------------- measure
def _measure(cfg: PackConfig, run: Path, pool: Executor, reuse: dict,
             ranges: list[InputRange]) -> list[MeasureResult]:
    tasks, weights = [], []
    for fi, path, fmt, start, end, first_line, nbytes in ranges:
        tasks.append(MeasureTask(len(tasks), fi, path, start, end, first_line, cfg.input_schema,
                                 str(cfg.media_root), cfg.allow_absolute_media, cfg.media_check,
                                 str(cfg.model), str(run / "records"), cfg.special_tokens, fmt,
                                 tuple(sorted(cfg.media_lmdb.items())), cfg.text_key))
        weights.append(nbytes)
    results: list[MeasureResult | None] = [None] * len(tasks)
    todo = []
    for t in tasks:
        done = read_pickle(run / "records" / f"part-{t.index:06d}.result.pkl")
        if not isinstance(done, MeasureResult) or not part_path(run / "records", t.index).is_file():
            todo.append(t)  # not run, or its result is unreadable (a crash at the wrong moment): redo
            continue
        changed = media_changed(done.media_files)
        if changed is not None:
            log.warning("media file %s changed since it was counted; counting task %d again", changed, t.index)
            todo.append(t)
            continue
        results[t.index] = done
    reuse.update(count_tasks=len(tasks), count_tasks_reused=len(tasks) - len(todo))

    def save(t: MeasureTask, r: MeasureResult) -> None:
        atomic_write(run / "records" / f"part-{t.index:06d}.result.pkl", pickle.dumps(r))
        results[t.index] = r

    _run_all(pool, run_task, todo, done=save, desc="count", weights=[weights[t.index] for t in todo], unit="B",
             show=cfg.progress)
    return results  # type: ignore[return-value]


def build_manifest(cfg: PackConfig, results: list[MeasureResult]) -> tuple[pa.Table, list[Rejection]]:
    """Concatenate the task results into the manifest (valid, unique samples in input order)
    and the list of rejections, duplicates included. Ids are compared as ``(id_kind, id)``
    (:data:`vlmpack.records.ID_KINDS`); the first occurrence in input order is kept."""
    ids = [i for r in results for i in r.ids]

    def cat(arrays: list[np.ndarray], dtype=np.int64) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    names = ("num_tokens", "media_tokens", "num_media", "kind", "media_bytes", "line", "offset",
             "rec_offset", "rec_len")
    cols = {k: cat([getattr(r, k) for r in results]) for k in names}
    id_kind = cat([r.id_kind if len(r.id_kind) == len(r.ids) else np.zeros(len(r.ids), np.int8) for r in results],
                  np.int8).astype(np.int8)
    label_tokens = cat([lt if len(lt := getattr(r, "label_tokens", ())) == len(r.ids) else np.full(len(r.ids), -1)
                        for r in results]).astype(np.int32)  # -1: counted by an older vlmpack
    file_idx = cat([np.full(len(r.ids), r.file_idx, np.int32) for r in results]).astype(np.int32)
    part = cat([np.full(len(r.ids), r.index, np.int32) for r in results]).astype(np.int32)
    rejections = [x for r in results for x in r.rejections]
    first_seen: dict[tuple[int, str], int] = {}
    dups = []
    for i, (sid, k) in enumerate(zip(ids, id_kind.tolist())):
        f = first_seen.setdefault((k, sid), i)
        if f == i:
            continue
        dups.append(i)
        loc = _locator(cfg, file_idx[i], int(cols["line"][i]), int(cols["offset"][i]))
        first = str(_locator(cfg, file_idx[f], int(cols["line"][f]), 0))
        rejections.append(Rejection(loc, "duplicate_id", f"{ID_KINDS[k]} id {sid!r} first seen at {first}", sid))
    keep = np.ones(len(ids), dtype=bool)
    keep[np.asarray(dups, dtype=np.int64)] = False
    table = pa.table({
        "id": pa.array([i for i, k in zip(ids, keep.tolist()) if k], pa.string()),
        "id_kind": id_kind[keep],
        "num_tokens": cols["num_tokens"][keep].astype(np.int32),
        "media_tokens": cols["media_tokens"][keep].astype(np.int32),
        "label_tokens": label_tokens[keep],
        "num_media": cols["num_media"][keep].astype(np.int16),
        "kind": cols["kind"][keep].astype(np.int8),
        "media_bytes": cols["media_bytes"][keep].astype(np.int64),
        "file_idx": file_idx[keep], "line": cols["line"][keep].astype(np.int64),
        "offset": cols["offset"][keep].astype(np.int64), "part": part[keep],
        "rec_offset": cols["rec_offset"][keep].astype(np.int64), "rec_len": cols["rec_len"][keep].astype(np.int64),
    })
    return table, rejections


def manifest_digest(manifest: pa.Table) -> str:
    """sha256 (hex) of the manifest's content: the key of the plan and of the shard markers, so a
    resume whose counts changed (media edited since) plans and writes again."""
    h = hashlib.sha256()
    for name in manifest.column_names:
        col = manifest.column(name)
        if pa.types.is_string(col.type):
            h.update("\n".join(col.to_pylist()).encode("utf-8", "surrogatepass"))
        else:
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
        h.update(name.encode())
    return h.hexdigest()


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


def _locator(cfg: PackConfig, file_idx: int, number: int, offset: int) -> Locator:
    """The locator of a manifest row (its file's format decides what ``number`` counts)."""
    path = cfg.input[file_idx]
    return Locator(path, number, offset, None, _unit(path, cfg.input_format))


@functools.lru_cache(maxsize=1024)
def _unit(path: str, input_format: str) -> str:
    return get_source(resolve_format(path, input_format)).unit


def _overlong_rejections(cfg: PackConfig, manifest: pa.Table, plan: PackPlan) -> list[Rejection]:
    out = []
    ids, ntok = manifest.column("id"), manifest.column("num_tokens")
    fidx, line, off = (manifest.column(c) for c in ("file_idx", "line", "offset"))
    media_n, media_tok = manifest.column("num_media"), manifest.column("media_tokens")
    for i in plan.overlong.tolist():
        n = ntok[i].as_py()
        loc = _locator(cfg, fidx[i].as_py(), line[i].as_py(), off[i].as_py())
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
        tasks.append(ShardTask(s, f"{shard_prefix(cfg)}-{s:06d}.tar", int(bounds[s]), packs, cfg.seq_len,
                               str(Path(cfg.output)), str(run / "records"),
                               str(cfg.model) if cfg.pretokenize else None))
    return tasks


def _write(cfg: PackConfig, run: Path, tasks: list[ShardTask], pool: Executor, key: str,
           reuse: dict) -> list[ShardResult]:
    """Write the shards not yet done for the manifest ``key`` (a marker of another key, or an
    unreadable one, counts as not done)."""
    out = Path(cfg.output)
    names = {t.name for t in tasks}
    for p in out.glob("*.tmp"):  # leftovers of a killed run (only vlmpack's own names)
        if p.name.removesuffix(".tmp").removesuffix(".idx") in names:
            p.unlink()
    results: list[ShardResult | None] = [None] * len(tasks)
    todo = []
    for t in tasks:
        marker = read_json(run / "shards" / (t.name + ".json"))
        try:
            ok = (isinstance(marker, dict) and marker.get("manifest") == key and (out / t.name).is_file()
                  and (out / (t.name + ".idx")).is_file())
            results[t.index] = ShardResult(**marker["result"]) if ok else None
            if ok and (out / t.name).stat().st_size != results[t.index].nbytes:  # cut or replaced since
                results[t.index] = None
        except (KeyError, TypeError):
            results[t.index] = None
        if results[t.index] is None:
            todo.append(t)
    reuse.update(shards=len(tasks), shards_reused=len(tasks) - len(todo))

    def save(t: ShardTask, r: ShardResult) -> None:
        atomic_write(run / "shards" / (t.name + ".json"), json_bytes({"manifest": key, "result": asdict(r)}))
        results[t.index] = r

    _run_all(pool, write_shard, todo, done=save, desc="write", weights=[len(t.packs) for t in todo], unit="pack",
             show=cfg.progress)
    return results  # type: ignore[return-value]


def _plan(cfg: PackConfig, run: Path, manifest: pa.Table, key: str, reuse: dict) -> PackPlan:
    """The plan of ``manifest`` (``key`` = its digest), reused from the run dir when it was made
    for the same manifest, else made and saved (manifest, plan, then the stage record)."""
    stages = read_json(run / "stages.json")
    if isinstance(stages, dict) and stages.get("manifest") == key:
        try:
            plan = PackPlan.from_npz(run / "plan.npz")
            reuse["plan_reused"] = True
            return plan
        except Exception:  # noqa: BLE001 - a damaged plan file is made again
            log.warning("plan.npz in %s cannot be read; planning again", run)
    buf = pa.BufferOutputStream()
    pq.write_table(manifest, buf)
    atomic_write(run / "manifest.parquet", buf.getvalue().to_pybytes())
    plan = make_plan(cfg, manifest)
    reuse["plan_reused"] = False
    npz = io.BytesIO()
    plan.to_npz(npz)
    atomic_write(run / "plan.npz", npz.getvalue())
    atomic_write(run / "stages.json", json_bytes({"manifest": key}))
    return plan


def _write_rejects(cfg: PackConfig, rejections: list[Rejection]) -> None:
    order = {p: i for i, p in enumerate(cfg.input)}
    rejections.sort(key=lambda r: (order.get(r.locator.file, len(order)), r.locator.line))
    atomic_write(Path(cfg.output) / "rejects.jsonl",
                 b"".join(json_bytes(r.to_dict()) + b"\n" for r in rejections))


def _read_stats(results: list[MeasureResult]) -> ReadStats:
    stats = ReadStats()
    for r in results:
        stats.lines += r.stats.lines
        stats.blank += r.stats.blank
        stats.records += r.stats.records
    return stats


def _reject_gate(cfg: PackConfig, fingerprint: str, results: list[MeasureResult], rejections: list[Rejection]) -> None:
    """Stop after counting (before planning and writing) when more than ``max_reject_fraction``
    of the records were rejected: rejects.jsonl and a report of the counting stage are written."""
    records = _read_stats(results).records
    if not records or len(rejections) <= cfg.max_reject_fraction * records:
        return
    _write_rejects(cfg, rejections)
    reasons = Counter(r.reason for r in rejections)
    report = {"status": "failed", "stage": "count", "records_read": records, "rejected": len(rejections),
              "rejected_by_reason": dict(sorted(reasons.items())), "max_reject_fraction": cfg.max_reject_fraction,
              "fingerprint": fingerprint}
    atomic_write(Path(cfg.output) / "report.json", json_bytes(report, indent=1))
    top = ", ".join(f"{k} {v:,}" for k, v in reasons.most_common(3))
    share = 100 * len(rejections) / records
    raise RunFailedError(f"{len(rejections):,} of {records:,} records rejected ({share:.1f} % "
                         f"> --max-reject-fraction {100 * cfg.max_reject_fraction:g} %): {top}; nothing was written, "
                         f"see {Path(cfg.output) / 'rejects.jsonl'} (raise --max-reject-fraction to pack anyway)")


# ---------------------------------------------------------------------------------------- main
def run_pack(cfg: PackConfig) -> dict:
    """Run the whole job for ``cfg`` and return the report (also written to ``OUT/report.json``).

    Raises :class:`RunDirError` (foreign, locked or unreadable output dir), :class:`OverlongError`
    (``overlong="error"``), :class:`RunFailedError` (more rejections than ``max_reject_fraction``,
    or no sample packed; the report and rejects.jsonl are written first),
    :class:`vlmpack.errors.ConfigError` (model directory), :class:`vlmpack.errors.InputError`
    (an unreadable or truncated input file) and ``OSError`` (disk full, read-only, ...). Bad
    records never raise: they are rejected with a reason and listed in ``OUT/rejects.jsonl``.
    A run stopped at any point (signal, kill, error) resumes with the same command.
    """
    payload = cfg.fingerprint_payload()  # hashes the model's counting files: once
    fingerprint = cfg.fingerprint(payload)
    out = Path(cfg.output)
    check_node_output(cfg)
    ranges, tasks_total = node_ranges(cfg, TASK_BYTES)  # this node's input tasks (all of them: one node)
    run = prepare_output(out, fingerprint, payload, overwrite=cfg.overwrite)
    try:
        return _run(cfg, run, fingerprint, payload, ranges, tasks_total)
    finally:
        unlock_output(out)


def _run(cfg: PackConfig, run: Path, fingerprint: str, payload: dict, ranges: list[InputRange],
         tasks_total: int) -> dict:
    timings: dict[str, float] = {}
    reuse: dict = {}  # what a resumed run took from the run directory instead of redoing it
    with guarded_executor(cfg.executor, cfg.workers, str(cfg.model), cfg.ray_address) as pool:
        t = time.perf_counter()
        results = _measure(cfg, run, pool, reuse, ranges)
        timings["measure"] = time.perf_counter() - t
        t = time.perf_counter()
        manifest, rejections = build_manifest(cfg, results)
        _reject_gate(cfg, fingerprint, results, rejections)
        key = manifest_digest(manifest)
        plan = _plan(cfg, run, manifest, key, reuse)
        rejections += _overlong_rejections(cfg, manifest, plan)
        timings["plan"] = time.perf_counter() - t
        t = time.perf_counter()
        tasks = _shard_tasks(cfg, run, manifest, plan)
        atomic_write(run / "outputs.json", json_bytes({"shards": [x.name for x in tasks]}))
        shards = _write(cfg, run, tasks, pool, key, reuse)
        timings["write"] = time.perf_counter() - t
    if shards:
        write_metadata(cfg.output, {s.name: s.num_packs for s in shards})
    _write_rejects(cfg, rejections)
    stats = _read_stats(results)
    timings["worker_read_validate"] = sum(r.seconds_read for r in results)
    timings["worker_count"] = sum(r.seconds_count for r in results)
    records_by_file = np.bincount([r.file_idx for r in results], [r.stats.records for r in results],
                                  len(cfg.input)).astype(np.int64).tolist()
    report = build_report(cfg, fingerprint, stats, manifest, plan, rejections, shards, timings, records_by_file)
    report["status"] = "ok" if report["samples_packed"] else "failed"
    report["reused"] = reuse
    report["model_fingerprint"] = model_fingerprint(payload)
    report["nodes"] = node_record(cfg, payload, tasks_total, len(ranges))
    atomic_write(Path(cfg.output) / "report.json", json_bytes(report, indent=1))
    write_report_html(cfg, manifest, plan, report)  # OUT/report.html: figures + key numbers (no shard re-read)
    if not report["samples_packed"]:
        raise RunFailedError(f"no sample was packed ({report['records_read']:,} records read, "
                             f"{report['rejected']:,} rejected, {report['dropped_overlong']:,} overlong); "
                             f"see {Path(cfg.output) / 'rejects.jsonl'}")
    return report
