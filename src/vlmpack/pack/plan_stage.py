"""The plan stage of ``vlmpack pack``: the manifest -> ``plan.npz`` (bin packing with the plan options,
per split, shaped for data parallelism), reused from the run directory under its plan key; and the
rejections of the samples it left out (overlong)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlmpack.errors import OverlongError
from vlmpack.fsio import (
    atomic_write,
    atomic_write_parquet,
    atomic_write_stream,
    file_sha256,
    read_sealed_json,
    sealed_json_bytes,
)
from vlmpack.pack.data_parallel import data_parallel_record, shape_plan
from vlmpack.pack.manifest import InputFiles
from vlmpack.pack.splits import join_plans, split_of_ids
from vlmpack.pack.stages import PlanOptions
from vlmpack.packing import PackPlan, plan_packs
from vlmpack.records import Rejection

log = logging.getLogger(__name__)

#: Rows per row group of ``manifest.parquet``, and bytes per data page: written a row group at a
#: time without dictionaries (the ids are unique), the Arrow pool's free memory returned after each,
#: the writer's buffers and each read of :func:`ids_at` (one row group's ids at a time) stay a few
#: MiB whatever the number of samples (mimalloc otherwise kept ~25 bytes per sample until the end).
MANIFEST_ROW_GROUP = 65_536
MANIFEST_PAGE_BYTES = 65_536


def make_plan(opts: PlanOptions, manifest: pa.Table, split: np.ndarray | None = None) -> PackPlan:
    """Bin-pack the manifest's samples (columns ``num_tokens``, ``num_media``, ``media_tokens``,
    ``kind``: one row per sample) with the algorithm and constraints of ``opts`` (the plan stage;
    a plain table of those columns is enough); with ``split`` (int8 ``[n]``, each row's split,
    :func:`vlmpack.pack.splits.split_of_ids`) each split is planned on its own and its packs follow
    the previous split's (:func:`vlmpack.pack.splits.join_plans`). Raises
    :class:`vlmpack.errors.ConfigError` for an unknown algorithm or a bad constraint."""
    return plans(opts, manifest, split)[1]


def plans(opts: PlanOptions, manifest: pa.Table, split: np.ndarray | None = None) -> tuple[PackPlan, PackPlan]:
    """(the bin-packed plan, that plan shaped for ``--dp-size`` / ``--global-batch-size``, per split:
    :func:`vlmpack.pack.data_parallel.shape_plan`; the same object without them), as :func:`make_plan`."""
    if split is not None:
        parts = [(rows, plans(opts, manifest.take(pa.array(rows))))
                 for rows in (np.flatnonzero(split == s) for s in np.unique(split))]
        base = join_plans([(rows, b) for rows, (b, _) in parts], manifest.num_rows)
        if not opts.data_parallel:
            return base, base
        return base, join_plans([(rows, shaped) for rows, (_, shaped) in parts], manifest.num_rows)
    col = lambda name: manifest.column(name).to_numpy()  # noqa: E731
    base = plan_packs(col("num_tokens").astype(np.int64), opts.seq_len, algorithm=opts.algorithm,
                      max_samples_per_pack=opts.max_samples_per_pack, media_counts=col("num_media"),
                      media_tokens=col("media_tokens"), kinds=col("kind"),
                      max_media_per_pack=opts.max_media_per_pack,
                      max_media_tokens_per_pack=opts.max_media_tokens_per_pack, group_by_kind=opts.group_by_kind,
                      pad_to_multiple_of=opts.pad_to_multiple_of, seed=opts.seed)
    if not opts.data_parallel:
        return base, base
    return base, shape_plan(base, manifest, dp_size=opts.dp_size, global_batch_size=opts.global_batch_size,
                            seed=opts.seed, pad_to_multiple_of=opts.pad_to_multiple_of)


def ids_at(run: Path, rows: np.ndarray) -> list[str]:
    """The ids of manifest ``rows`` (sorted int positions) read from ``run/manifest.parquet``, row
    group by row group (the driver does not keep the id column while planning)."""
    if not len(rows):
        return []
    f = pq.ParquetFile(run / "manifest.parquet")
    out, start = [], 0
    for g in range(f.num_row_groups):
        n = f.metadata.row_group(g).num_rows
        inside = rows[(rows >= start) & (rows < start + n)] - start
        if len(inside):
            out += f.read_row_group(g, columns=["id"]).column("id").take(pa.array(inside)).to_pylist()
        start += n
    return out


def overlong_rejections(opts: PlanOptions, inputs: InputFiles, run: Path, manifest: pa.Table,
                         plan: PackPlan) -> list[Rejection]:
    """The rejections of the samples the plan left out (``plan.overlong``), with the options that
    decided it; raises :class:`OverlongError` instead when ``opts.overlong == "error"``."""
    out = []
    rows = np.asarray(plan.overlong, dtype=np.int64)
    ids = ids_at(run, rows)
    ntok = manifest.column("num_tokens")
    fidx, line, off = (manifest.column(c) for c in ("file_idx", "line", "offset"))
    media_n, media_tok = manifest.column("num_media"), manifest.column("media_tokens")
    for sid, i in zip(ids, rows.tolist()):
        n = ntok[i].as_py()
        loc = inputs.locator(fidx[i].as_py(), line[i].as_py(), off[i].as_py())
        if n > opts.seq_len:
            why = f"{n} tokens > --seq-len {opts.seq_len}"
        else:  # fits in tokens, but not alone in a pack under a media budget or the padding rule
            why = (f"{n} tokens, {media_n[i].as_py()} media, {media_tok[i].as_py()} media tokens do not fit one pack "
                   f"(--seq-len {opts.seq_len}, --max-media-per-pack {opts.max_media_per_pack}, "
                   f"--max-media-tokens-per-pack {opts.max_media_tokens_per_pack}, "
                   f"each sample padded to a multiple of {opts.pad_to_multiple_of or 1} tokens)")
        if opts.overlong == "error":
            raise OverlongError(f"sample {sid!r} at {loc}: {why} ({len(rows)} such samples); "
                                "use --overlong drop or a larger --seq-len")
        out.append(Rejection(loc, "overlong", why, sid))
    return out


@dataclass(frozen=True)
class StagedManifest:
    """The manifest on its way to the plan (:func:`stage_manifest`): the table without its id
    column (the ids are in ``manifest.parquet``: :func:`ids_at`), each row's split with ``--split``
    (int8 ``[n]``, else None), the plan key, and the plan and data-parallel record reused from the
    run directory (None when the plan is to be made)."""

    manifest: pa.Table
    split: np.ndarray | None
    key: str
    reused: PackPlan | None = None
    reused_record: dict | None = None


def stage_manifest(opts: PlanOptions, run: Path, manifest: pa.Table, key: str, reuse: dict) -> StagedManifest:
    """The first half of the plan stage: the plan made for ``key`` (:func:`vlmpack.pack.stages.plan_key`)
    is taken from the run dir when its files match their checksums (``reuse["plan_reused"]``), else
    ``manifest.parquet`` is written (atomically) for the plan to be made by :func:`plan_stage`. The
    result holds the manifest without its ids, so a caller that rebinds its manifest to it does not
    hold the id column while planning (the driver's peak memory)."""
    split = None
    if opts.split is not None:
        split = split_of_ids(manifest.column("id"), manifest.column("id_kind").to_numpy(), dict(opts.split))
    stages = read_sealed_json(run / "stages.json")
    if stages is not None and stages.get("plan") == key and _files_match(run, stages.get("files")):
        try:
            plan = PackPlan.from_npz(run / "plan.npz")
            reuse["plan_reused"] = True
            return StagedManifest(manifest.drop_columns(["id"]), split, key, plan, stages.get("data_parallel"))
        except Exception:  # noqa: BLE001 - a damaged plan file is made again
            log.warning("plan.npz in %s cannot be read; planning again", run)
    elif stages is not None and stages.get("plan") == key:
        log.warning("manifest.parquet / plan.npz in %s do not match their checksums; planning again", run)
    atomic_write_parquet(run / "manifest.parquet", manifest, MANIFEST_ROW_GROUP, use_dictionary=False,
                         data_page_size=MANIFEST_PAGE_BYTES, after_row_group=pa.default_memory_pool().release_unused)
    return StagedManifest(manifest.drop_columns(["id"]), split, key)


def plan_stage(opts: PlanOptions, run: Path, staged: StagedManifest, reuse: dict
               ) -> tuple[PackPlan, np.ndarray | None, dict | None]:
    """The plan of a :class:`StagedManifest`: the reused one, or one made by bin packing and saved
    (``plan.npz``, then the stage record ``stages.json`` with the checksums of both files). Returns
    the plan, with ``--split`` each pack's split (int8 ``[P]``, an index of
    :data:`vlmpack.pack.splits.SPLIT_NAMES`; else None) and with ``--dp-size`` the figures of
    :func:`vlmpack.pack.data_parallel.data_parallel_record` (else None). Raises
    :class:`vlmpack.errors.ConfigError` like :func:`make_plan`."""
    manifest, split = staged.manifest, staged.split
    pack_split = lambda plan: None if split is None else split[plan.order[plan.offsets[:-1]]]  # noqa: E731
    if staged.reused is not None:
        return staged.reused, pack_split(staged.reused), staged.reused_record
    base, plan = plans(opts, manifest, split)
    record = None
    if opts.data_parallel:  # the figures before the shape (base) and after
        record = data_parallel_record(manifest, base, plan, dp_size=opts.dp_size,
                                      global_batch_size=opts.global_batch_size, seq_len=opts.seq_len)
    reuse["plan_reused"] = False
    atomic_write_stream(run / "plan.npz", plan.to_npz)  # straight to the file: no copy of the plan in memory
    files = {name: dict(zip(("sha256", "size"), file_sha256(run / name))) for name in _PLAN_FILES}
    atomic_write(run / "stages.json", sealed_json_bytes({"plan": staged.key, "files": files,
                                                         **({"data_parallel": record} if record else {})}))
    return plan, pack_split(plan), record


_PLAN_FILES = ("manifest.parquet", "plan.npz")


def _files_match(run: Path, files) -> bool:
    """True when each of :data:`_PLAN_FILES` in ``run`` has the sha256 and size ``files`` records."""
    try:
        return all(file_sha256(run / name) == (files[name]["sha256"], files[name]["size"]) for name in _PLAN_FILES)
    except (OSError, KeyError, TypeError):
        return False
