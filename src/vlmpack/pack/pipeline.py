"""The main job, ``vlmpack pack``: read -> validate -> count -> plan -> write -> metadata -> report.

Every stage leaves its result in the run directory ``OUT/.vlmpack/`` (the source of truth; all
files written atomically, see :mod:`vlmpack.pack.rundir`; data only, JSON / Arrow / Parquet / NumPy,
never pickles; an unreadable one, or one that does not match its recorded sha256, counts as
missing), keyed by the stage's own inputs (:mod:`vlmpack.pack.stages`: count, plan and write keys):

- ``config.json``: the config and its fingerprint; a run with another fingerprint is refused
  (:class:`RunDirError`) unless ``overwrite`` is set, which keeps the stage files below (each is
  reused only under its own key). ``lock``: the lock of a running run.
- ``records/``: the count store (:mod:`vlmpack.pack.count_stage`): per count task the canonical
  accepted samples and the task's arrays/rejections, for the count key in ``records/count.json``;
  shared through the count cache (``--cache-dir``), so another ``OUT`` or ``vlmpack plan --input``
  does not count again;
- ``manifest.parquet``: one row per valid, unique sample (id, id kind, tokens, media, locator,
  where its record is); ``plan.npz``: the :class:`vlmpack.packing.PackPlan` (``allow_pickle=False``);
  ``stages.json``: the plan key they were made for (another ``--seq-len``, algorithm or
  constraint: planned again) and the sha256 of both;
- ``outputs.json``: the shard names this run writes (what ``--overwrite`` may delete);
  ``shards/<name>.json``: a marker per finished shard (sha256, counts, write key, the samples the
  writer left out because their media changed, each sample's content sha256); ``figures.json``: the
  report's PNGs and the digest of what they show; ``hashes.json``, written last: the sha256 of the
  reports, the config record, manifest, plan and every shard and ``.tar.idx`` (:mod:`vlmpack.pack.seal`).
  These JSON files are sealed (:func:`vlmpack.fsio.sealed_json_bytes`).

So a killed run started again skips what is done and produces the same bytes, and a finished run
started again loads no model (no pool is started when no task is left).
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa

from vlmpack.config import PackConfig
from vlmpack.energon.meta import write_metadata
from vlmpack.errors import OverlongError, RunFailedError
from vlmpack.fsio import (
    atomic_write,
    json_bytes,
    read_sealed_json,
    sealed_json_bytes,
)
from vlmpack.models import check_processor
from vlmpack.pack import stages
from vlmpack.pack.count_stage import count_stage, media_digest, read_stats, split_totals
from vlmpack.pack.count_task import MeasureResult
from vlmpack.pack.dedup import dedup_exact
from vlmpack.pack.driver_memory import release_free_memory
from vlmpack.pack.executors import guarded_executor, run_tasks
from vlmpack.pack.manifest import InputFiles, build_manifest, manifest_digest
from vlmpack.pack.nodes import InputRange, check_node_output, model_fingerprint, node_ranges, node_record, shard_prefix
from vlmpack.pack.plan_stage import make_plan, overlong_rejections, plan_stage, stage_manifest
from vlmpack.pack.report import build_report, figure_entries, figures_ahead, write_report_html
from vlmpack.pack.rundir import RUN_DIR, prepare_output, unlock_output
from vlmpack.pack.seal import write_hashes
from vlmpack.pack.splits import SPLIT_NAMES, split_report
from vlmpack.pack.stages import (
    CountOptions,
    PlanOptions,
    Workers,
    WriteOptions,
    count_cache_dir,
    count_key,
    count_payload,
    plan_key,
    write_key,
)
from vlmpack.pack.write import ShardResult, ShardTask, assign_shards, estimate_pack_bytes, member_rows, write_shard
from vlmpack.packing import PackPlan
from vlmpack.records import Locator, Rejection, display_path
from vlmpack.sinks import check_layout, get_sink

log = logging.getLogger(__name__)

#: Manifest columns that only the shard tasks' member rows need: dropped once the tasks are made
#: (the report and its figures read the token columns, kinds and input files).
MEMBER_ONLY_COLUMNS = ("part", "rec_offset", "rec_len", "media_bytes")

__all__ = ["RUN_DIR", "build_manifest", "make_plan", "manifest_digest", "run_pack"]


def _overlong_gate(cfg: PackConfig, rejections: list[Rejection]) -> None:
    """``--overlong error`` for the samples the count stage rejected ``overlong`` before tokenizing
    (their text alone needs more than ``--seq-len`` tokens, :func:`vlmpack.pack.count_task.skip_overlong_texts`)
    or counted above int32: the same :class:`OverlongError` as the plan stage's; with ``drop`` they stay
    rejections, reported as dropped overlong."""
    over = [r for r in rejections if r.reason == "overlong"] if cfg.overlong == "error" else []
    if over:
        r = over[0]
        raise OverlongError(f"sample {r.id!r} at {r.locator}: {r.detail} ({len(over)} such samples); "
                            "use --overlong drop or a larger --seq-len")


# ---------------------------------------------------------------------------------------- write
def _shard_tasks(opts: WriteOptions, run: Path, manifest: pa.Table, plan: PackPlan,
                 pack_split: np.ndarray | None = None) -> list[ShardTask]:
    """The write tasks of ``plan``: packs cut into shards (:func:`assign_shards`; a new shard where
    ``pack_split``, each pack's split, changes), each task with its samples' record locations
    (part, offset, length in bytes) and token counts in pack order and its pack offsets."""
    col = lambda name: manifest.column(name).to_numpy()  # noqa: E731
    pack_bytes = estimate_pack_bytes(plan.offsets, plan.order, col("rec_len"), col("media_bytes"), col("num_media"))
    breaks = () if pack_split is None else np.flatnonzero(np.diff(pack_split)) + 1
    bounds = assign_shards(pack_bytes, opts.max_packs_per_shard, opts.max_shard_bytes, breaks)
    order = np.asarray(plan.order)
    rows = member_rows(manifest, order)
    offsets = np.asarray(plan.offsets, dtype=np.int64)
    tasks = []
    for s in range(len(bounds) - 1):  # array slices: no per-sample Python object
        a, z = offsets[bounds[s]], offsets[bounds[s + 1]]
        tasks.append(ShardTask(s, f"{opts.prefix}-{s:06d}.tar", int(bounds[s]), rows[a:z],
                               offsets[bounds[s]:bounds[s + 1] + 1] - a, opts.seq_len, opts.output,
                               str(run / "records"), opts.pretokenize_model,
                               media_root=opts.media_root, allow_absolute_media=opts.allow_absolute_media,
                               layout=opts.layout, processor=opts.processor))
    return tasks


def _write(opts: WriteOptions, workers: Workers, run: Path, tasks: list[ShardTask], key: str,
           reuse: dict, pool_started: Callable[[], object] | None = None) -> list[ShardResult]:
    """Write the shards not yet done for the write ``key`` (a marker of another key, or an
    unreadable one, counts as not done); a pool is started only when a shard is left (it loads the
    model only for ``--pretokenize``). ``pool_started`` is called once its workers are all started."""
    out = Path(opts.output)
    names = {t.name for t in tasks}
    for p in out.glob("*.tmp"):  # leftovers of a killed run (only vlmpack's own names)
        if p.name.removesuffix(".tmp").removesuffix(".idx") in names:
            p.unlink()
    results: list[ShardResult | None] = [None] * len(tasks)
    todo = []
    for t in tasks:
        marker = read_sealed_json(run / "shards" / (t.name + ".json"))
        try:
            ok = (isinstance(marker, dict) and marker.get("write") == key and (out / t.name).is_file()
                  and (out / (t.name + ".idx")).is_file())
            results[t.index] = ShardResult(**marker["result"]) if ok and _left_out_ok(marker["result"]) else None
            r = results[t.index]
            if r is not None and ((out / t.name).stat().st_size != r.nbytes  # cut or replaced since
                       or not isinstance(r.content_sha256, dict) or len(r.content_sha256) != r.num_packs):
                results[t.index] = None  # (a marker of an older vlmpack has no content sha256: written again)
        except (KeyError, TypeError):
            results[t.index] = None
        if results[t.index] is None:
            todo.append(t)
    reuse.update(shards=len(tasks), shards_reused=len(tasks) - len(todo))

    def save(t: ShardTask, r: ShardResult) -> None:
        atomic_write(run / "shards" / (t.name + ".json"), sealed_json_bytes({"write": key, "result": {
            f.name: getattr(r, f.name) for f in fields(r)}}))  # its values are JSON already: no deep copy
        results[t.index] = r

    if todo:
        with guarded_executor(workers.executor, workers.workers, opts.pretokenize_model or "", workers.ray_address,
                              preload=opts.pretokenize_model is not None, processor=opts.processor) as pool:
            if pool_started is not None:
                pool_started()
            run_tasks(pool, write_shard, todo, done=save, desc="write", weights=[t.num_packs for t in todo],
                      unit="pack", show=workers.progress)
    return results  # type: ignore[return-value]


def _left_out_ok(result: dict) -> bool:
    """True when a marker's ``rejected`` list has the form :class:`ShardResult` gives it."""
    rows = result.get("rejected", [])
    return isinstance(rows, list) and all(
        isinstance(x, dict) and isinstance(x.get("source"), dict) and isinstance(x["source"].get("file"), str)
        and any(isinstance(x["source"].get(u), int) for u in ("line", "sample", "row"))
        and all(isinstance(x.get(k), str) for k in ("id", "reason", "detail")) and isinstance(x.get("num_tokens"), int)
        for x in rows)


def _write_rejections(inputs: InputFiles, shards: list[ShardResult]) -> list[tuple[Rejection, int, int]]:
    """The samples the writer left out (a media item changed after counting,
    :attr:`ShardResult.rejected`) as ``(rejection, input file index, tokens)``, in shard order."""
    files = {display_path(str(p)): i for i, p in enumerate(inputs.paths)}
    out = []
    for shard in shards:
        for x in shard.rejected:
            src = x["source"]
            unit = next(u for u in ("line", "sample", "row") if u in src)
            f = files.get(src["file"], -1)
            loc = Locator(inputs.paths[f] if f >= 0 else src["file"], src[unit],
                          src.get("offset", src.get("row_group", 0)), src.get("key"), unit)
            out.append((Rejection(loc, x["reason"], x["detail"], x["id"]), f, x["num_tokens"]))
    return out


def _write_rejects(cfg: PackConfig, rejections: list[Rejection]) -> None:
    order = {p: i for i, p in enumerate(cfg.input)}
    rejections.sort(key=lambda r: (order.get(r.locator.file, len(order)), r.locator.line))
    atomic_write(Path(cfg.output) / "rejects.jsonl",
                 b"".join(json_bytes(r.to_dict()) + b"\n" for r in rejections))


def _reject_gate(cfg: PackConfig, fingerprint: str, results: list[MeasureResult], rejections: list[Rejection]) -> None:
    """Stop after counting (before planning and writing) when more than ``max_reject_fraction``
    of the records were rejected: rejects.jsonl and a report of the counting stage are written. With
    ``--overlong split`` the turns it drops (``overlong``) are its own doing and not counted here."""
    stats = read_stats(results)
    records = stats.records
    gated = [r for r in rejections if not (cfg.overlong == "split" and r.reason == "overlong")]
    if not records or len(gated) <= cfg.max_reject_fraction * records:
        return
    _write_rejects(cfg, rejections)
    reasons = Counter(r.reason for r in rejections)
    report = {"status": "failed", "stage": "count", "records_read": records, "rejected": len(rejections),
              "rejected_by_reason": dict(sorted(reasons.items())), "members_without_key": stats.members_without_key,
              "members_not_files": stats.members_not_files, "max_reject_fraction": cfg.max_reject_fraction,
              "fingerprint": fingerprint}
    atomic_write(Path(cfg.output) / "report.json", json_bytes(report, indent=1))
    top = ", ".join(f"{k} {v:,}" for k, v in reasons.most_common(3))
    share = 100 * len(rejections) / records
    raise RunFailedError(f"{len(rejections):,} of {records:,} records rejected ({share:.1f} % "
                         f"> --max-reject-fraction {100 * cfg.max_reject_fraction:g} %): {top}; nothing was written, "
                         f"see {Path(cfg.output) / 'rejects.jsonl'}{_media_hint(cfg, rejections)}")


#: Share of the rejections, at least, that are ``media_missing`` for the failure to name ``--media-root``.
MEDIA_HINT_SHARE = 0.2


def _media_hint(cfg: PackConfig, rejections: list[Rejection]) -> str:
    """The tail of the reject gate's line: what to change. When ``media_missing`` is at least
    :data:`MEDIA_HINT_SHARE` of ``rejections`` (sorted: the first is the input's first), ``--media-root``
    and the first path not found; else the ``--max-reject-fraction`` advice."""
    missing = [r for r in rejections if r.reason == "media_missing"]
    if not missing or len(missing) < MEDIA_HINT_SHARE * len(rejections):
        return " (raise --max-reject-fraction to pack anyway)"
    found = re.search(r"(?:^|\s)(/\S+)", missing[0].detail)
    first = found.group(1) if found else missing[0].detail[:160]
    return (f"; {len(missing):,} records name media not found under --media-root {cfg.media_root} (the first: "
            f"{first}, for {missing[0].locator}): pass --media-root "
            "DIR, the folder the media paths are relative to (or raise --max-reject-fraction to pack anyway)")


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
    check_layout(cfg)
    check_processor(cfg.model, cfg.processor)
    payload = cfg.fingerprint_payload()  # hashes the model's counting files: once
    fingerprint = cfg.fingerprint(payload)
    out = Path(cfg.output)
    check_node_output(cfg)
    ranges, tasks_total = node_ranges(cfg, stages.task_bytes(cfg))  # this node's input tasks (all of them: one node)
    run = prepare_output(out, fingerprint, payload, overwrite=cfg.overwrite)
    try:
        return _run(cfg, run, fingerprint, payload, ranges, tasks_total)
    finally:
        unlock_output(out)


def _run(cfg: PackConfig, run: Path, fingerprint: str, payload: dict, ranges: list[InputRange],
         tasks_total: int) -> dict:
    timings: dict[str, float] = {}
    reuse: dict = {}  # what a resumed run took from the run directory (or the count cache) instead of redoing it
    keys = {"count": count_key(cfg, payload)}
    # each stage gets only its own options (vlmpack.pack.stages)
    inputs, plan_opts, workers = InputFiles.of(cfg), PlanOptions.of(cfg), Workers.of(cfg)
    t = time.perf_counter()
    results = count_stage(CountOptions.of(cfg), run / "records", ranges, keys["count"], reuse, workers=workers,
                          cache=count_cache_dir(cfg), payload=count_payload(cfg, payload))
    timings["measure"] = time.perf_counter() - t
    t = time.perf_counter()
    manifest, rejections = build_manifest(inputs, results, run / "records")
    release_free_memory()
    _overlong_gate(cfg, rejections)
    _reject_gate(cfg, fingerprint, results, rejections)
    if plan_opts.dedup == "exact":  # later copies of the same content: rejected duplicate_content (asked for: no gate)
        manifest, copies = dedup_exact(inputs, manifest, run / "records")
        rejections += copies
    keys["plan"] = plan_key(plan_opts, manifest_digest(manifest))
    staged = stage_manifest(plan_opts, run, manifest, keys["plan"], reuse)  # ids on disk, out of the driver
    manifest = staged.manifest
    release_free_memory()
    plan, pack_split, dp_record = plan_stage(plan_opts, run, staged, reuse)
    del staged
    rejections += overlong_rejections(plan_opts, inputs, run, manifest, plan)
    manifest = manifest.drop_columns(["line", "offset", "id_kind"])  # only locators needed them (done)
    release_free_memory()
    timings["plan"] = time.perf_counter() - t
    t = time.perf_counter()
    keys["write"] = write_key(cfg, keys["count"], keys["plan"], media_digest(results))
    write_opts = WriteOptions.of(cfg, shard_prefix(cfg))
    tasks = _shard_tasks(write_opts, run, manifest, plan, pack_split)
    manifest = manifest.drop_columns(list(MEMBER_ONLY_COLUMNS))  # in the tasks' member rows now
    release_free_memory()
    shard_splits = None if pack_split is None else {t.name: SPLIT_NAMES[pack_split[t.first_pack]] for t in tasks}
    atomic_write(run / "outputs.json", sealed_json_bytes({"shards": [x.name for x in tasks]}))
    records_by_file = np.bincount([r.file_idx for r in results], [r.stats.records for r in results],
                                  len(cfg.input)).astype(np.int64).tolist()
    split = split_totals(results)
    # the report's figures, drawn while the write workers run (taken below if the writer left nothing out)
    ahead = figures_ahead(cfg, manifest, plan, figure_entries(cfg, manifest, plan, list(rejections), records_by_file,
                                                              split=split), run / "figures.json")
    try:
        shards = _write(write_opts, workers, run, tasks, keys["write"], reuse,
                        pool_started=ahead.start if ahead is not None else None)
    finally:
        if ahead is not None:
            ahead.wait()  # before anything forks again
    left_out = _write_rejections(inputs, shards)
    rejections += [r for r, _, _ in left_out]
    timings["write"] = time.perf_counter() - t
    if shards:
        write_metadata(cfg.output, {s.name: s.num_packs for s in shards}, get_sink(cfg.layout).dataset_files(),
                       shard_splits)
    _write_rejects(cfg, rejections)
    stats = read_stats(results)
    # worker seconds of this run: a task reused from an earlier run or the count cache took none
    timings["worker_read_validate"] = sum(r.seconds_read for r in results if not r.reused)
    timings["worker_count"] = sum(r.seconds_count for r in results if not r.reused)
    report = build_report(cfg, fingerprint, stats, manifest, plan, rejections, shards, timings, records_by_file,
                          left_out=[(f, n) for _, f, n in left_out], split=split)
    report["status"] = "ok" if report["samples_packed"] else "failed"
    if shard_splits is not None:
        report["splits"] = split_report(cfg.split, shards, shard_splits)
    if dp_record is not None:  # --dp-size: full global steps, rank balance before / after
        report["data_parallel"] = dp_record
    report["reused"] = reuse
    report["model_fingerprint"] = model_fingerprint(payload)
    report["nodes"] = node_record(cfg, payload, tasks_total, len(ranges))
    report["stage_keys"] = keys
    atomic_write(Path(cfg.output) / "report.json", json_bytes(report, indent=1))
    # OUT/report.html: figures + key numbers (no shard re-read; PNGs reused while what they show is the same)
    write_report_html(cfg, manifest, plan, report, png_cache=run / "figures.json", ahead=ahead)
    write_hashes(Path(cfg.output), [s.name for s in shards])  # last: the sha256 of what check compares
    if not report["samples_packed"]:
        raise RunFailedError(f"no sample was packed ({report['records_read']:,} records read, "
                             f"{report['rejected']:,} rejected, {report['dropped_overlong']:,} overlong); "
                             f"see {Path(cfg.output) / 'rejects.jsonl'}")
    return report
