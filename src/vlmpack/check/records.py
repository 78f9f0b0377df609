"""What ``OUT`` records about itself, for ``vlmpack check`` (steps 1, 2 and 5 of :mod:`vlmpack.check`):
``report.json`` and ``.nv-meta/`` (:func:`load_records`, :mod:`vlmpack.check.nvmeta`), the run dir's manifest and plan
(:func:`load_run_dir`), the shard lists (:func:`shard_names`) and, once the tars are read, their
totals and sample ids against those records (:func:`check_totals`)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import numpy as np

from vlmpack.check.findings import Findings, eg, is_int, read_json
from vlmpack.check.nvmeta import check_meta
from vlmpack.energon.load import one_line
from vlmpack.fsio import LinkRefused, links_under
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.records import ID_KINDS  # manifest ``id_kind`` int8 value -> pack JSON ``"id_kind"``


def load_records(f: Findings) -> bool:
    """Read report.json and .nv-meta (:func:`vlmpack.check.nvmeta.check_meta`) into ``f``; False when
    the report says the run failed (nothing more to check)."""
    rp = f.out / "report.json"
    try:
        rep = read_json(f.out, "report.json")
        if isinstance(rep, dict) and rep.get("status") == "failed":
            f.add(f"{rp} records a failed run (stage {str(rep.get('stage'))[:40]!r}): {f.out} is no usable output")
            return False
        if not isinstance(rep, dict) or not isinstance(rep.get("shard_sha256"), dict):
            raise ValueError("not a vlmpack report (no shard_sha256 object)")
        f.report = rep
        if rep.get("dedup") == "exact":  # --dedup exact: packed samples' content keys must differ
            f.content_keys = {}
    except FileNotFoundError:
        f.add(f"{rp} is missing: shard hashes cannot be checked (not a finished vlmpack output)")
    except LinkRefused as e:
        f.add(f"{e}: shard hashes cannot be checked")
    except (OSError, ValueError) as e:
        f.add(f"{rp} is corrupt ({one_line(e)}): shard hashes cannot be checked")
    check_meta(f)
    return True


def load_run_dir(f: Findings) -> None:
    """``f.expected`` from the run dir's ``manifest.parquet`` + ``plan.npz`` (a problem when they
    are missing, unreadable or inconsistent)."""
    run = f.out / RUN_DIR
    man, plan_path = run / "manifest.parquet", run / "plan.npz"
    if links := links_under(f.out, [f"{RUN_DIR}/manifest.parquet", f"{RUN_DIR}/plan.npz"]):
        f.add(f"{LinkRefused(links[0])}: the run record is not read, completeness cannot be checked")
        return
    if not man.is_file() or not plan_path.is_file():
        f.add(f"the run record {run}/manifest.parquet + plan.npz is missing: completeness and per-sample "
              "token counts cannot be checked (pass --no-run-dir to check without it)")
        return
    if why := run_record_too_large(man, plan_path):
        f.add(f"the run record in {run} is not read: {why}; completeness cannot be checked")
        return
    try:
        from vlmpack.packing import PackPlan

        table = _read_manifest(man)
        ids = [str(x) for x in table.column("id").to_pylist()]
        tokens = table.column("num_tokens").to_numpy().astype(np.int64).tolist()
        kinds = (table.column("id_kind").to_numpy().astype(np.int64) if "id_kind" in table.column_names
                 else np.zeros(len(ids), np.int64))
        plan = PackPlan.from_npz(plan_path)
    except _TooLarge as e:
        f.add(f"the run record in {run} is not read: {e}; completeness cannot be checked")
        return
    except Exception as e:  # noqa: BLE001 - an unreadable run record is a finding, not a crash
        f.add(f"the run record in {run} is unreadable ({one_line(e)}): completeness cannot be checked")
        return
    over = plan.overlong
    if plan.num_samples != len(ids) or (len(over) and (over.min() < 0 or over.max() >= len(ids))) or (
            len(kinds) and (kinds.min() < 0 or kinds.max() >= len(ID_KINDS))):
        f.add(f"the run record in {run} is inconsistent ({plan.num_samples} samples planned, {len(ids)} in "
              "the manifest, or id_kind outside 0..2): completeness cannot be checked")
        return
    keep = np.ones(len(ids), bool)
    keep[over] = False
    f.expected = {(ID_KINDS[k], i): t for i, t, k, ok in zip(ids, tokens, kinds.tolist(), keep.tolist()) if ok}
    f.records_at = _records_at(table, ids, kinds, keep)
    for pair in _left_out(f):  # rejected by the writer (their media changed after counting): in rejects.jsonl
        f.expected.pop(pair, None)


#: The manifest columns check reads.
_COLUMNS = ("id", "num_tokens", "id_kind", "part", "rec_offset", "rec_len", "num_media")
#: A run-record file may take at most this many bytes of memory per byte on disk (plus
#: :data:`_SLACK`) once read: a compression bomb, or a header that claims a larger array than the
#: file holds, is refused before anything is decompressed or allocated.
_EXPANSION = 32
_SLACK = 64 << 20


def run_record_too_large(man: Path, plan_path: Path) -> str | None:
    """Why ``manifest.parquet`` / ``plan.npz`` cannot be read in memory bounded by their size on
    disk, or None. The manifest: the uncompressed size of the columns check reads, as its footer
    records it (``ColumnChunkMetaData.total_uncompressed_size``, the footer alone is read), at most
    :data:`_EXPANSION` times the file size plus :data:`_SLACK`. The plan (``np.savez`` writes it
    uncompressed): every member stored, not deflated, and each ``.npy`` header's shape x item size
    no more than the member's bytes (``numpy.lib.format`` header read only; ``np.load`` allocates
    what a header claims before reading). Never raises: an unreadable file is a reason too."""
    import zipfile

    import pyarrow.parquet as pq

    try:
        size = man.stat().st_size
        meta = pq.ParquetFile(man).metadata
        groups = (meta.row_group(g) for g in range(meta.num_row_groups))
        total = sum(rg.column(j).total_uncompressed_size for rg in groups for j in range(rg.num_columns)
                    if rg.column(j).path_in_schema in _COLUMNS)
        if total > _EXPANSION * size + _SLACK:
            return f"manifest.parquet's columns expand to {total:,} bytes from {size:,} on disk"
        with zipfile.ZipFile(plan_path) as z:
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    return f"plan.npz member {info.filename[:80]!r} is compressed (vlmpack stores its arrays)"
                with z.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    fmt = np.lib.format
                    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                    shape, _, dtype = read(fh)
                need = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if need > info.file_size:
                    return f"plan.npz member {info.filename[:80]!r} claims {need:,} bytes in {info.file_size:,}"
    except Exception as e:  # noqa: BLE001 - a crafted file is a reason, never a crash
        return f"it cannot be read ({one_line(e)})"
    return None


class _TooLarge(ValueError):
    """A run-record file that would take more memory than its size on disk allows."""


def _read_manifest(man: Path):
    """The columns of :data:`_COLUMNS` of ``manifest.parquet`` (``id`` kept dictionary-encoded), read
    batch by batch while the memory they will take (id bytes, 8 bytes a value, 64 bytes a row of
    Python objects) stays within :data:`_EXPANSION` x the file size + :data:`_SLACK`: run-length or
    dictionary encoding can make a small file hold many rows. Raises :class:`_TooLarge` beyond it,
    what pyarrow raises for a file it cannot read."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    size = man.stat().st_size
    budget, used, batches = _EXPANSION * size + _SLACK, 0, []
    pf = pq.ParquetFile(man, read_dictionary=["id"])
    cols = [c for c in _COLUMNS if c in pf.schema_arrow.names]
    for b in pf.iter_batches(batch_size=8192, columns=cols):
        ids = b.column(cols.index("id")) if "id" in cols else None
        if isinstance(ids, pa.DictionaryArray):
            lengths = pc.binary_length(ids.dictionary).to_numpy(zero_copy_only=False)
            id_bytes = int(lengths[ids.indices.to_numpy(zero_copy_only=False)].sum()) if len(lengths) else 0
        else:
            id_bytes = int(pc.sum(pc.binary_length(ids)).as_py() or 0) if ids is not None else 0
        used += id_bytes + b.num_rows * (8 * len(cols) + 64)
        if used > budget:
            raise _TooLarge(f"manifest.parquet holds more than {budget:,} bytes of rows once read "
                             f"({size:,} on disk)")
        batches.append(b)
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else pa.table({c: [] for c in cols})


def _records_at(table, ids: list[str], kinds: np.ndarray, keep: np.ndarray) -> dict | None:
    """``(kind, id)`` -> ``(task, rec_offset, rec_len, num_media)``: where each sample's count record
    lies (manifest columns ``part``, ``rec_offset``, ``rec_len``, ``num_media``; None without them)."""
    cols = ("part", "rec_offset", "rec_len", "num_media")
    if not all(c in table.column_names for c in cols):
        return None
    arrays = [np.maximum(table.column(c).to_numpy().astype(np.int64), 0).tolist() for c in cols]
    return {(ID_KINDS[k], i): tuple(at) for i, k, ok, *at in zip(ids, kinds.tolist(), keep.tolist(), *arrays) if ok}


def _left_out(f: Findings) -> list[tuple[str, str]]:
    """``(id_kind, id)`` of the samples the writer left out of the shards of ``.info.json`` (their
    markers' ``result.rejected``; :class:`vlmpack.pack.write.ShardResult`)."""
    out = []
    for name in f.counts or ():
        with contextlib.suppress(OSError, ValueError, AttributeError, KeyError, TypeError):
            marker = read_json(f.out, f"{RUN_DIR}/shards/{name}.json")
            out += [(str(x["id_kind"]), str(x["id"])) for x in marker["result"].get("rejected", [])]
    return out


def shard_names(f: Findings) -> list[str]:
    """The shards listed by .info.json and/or report.json that exist; problems for the rest and
    for ``<prefix>-*`` files listed by neither."""
    info, rep = set(f.counts or ()), set(f.report["shard_sha256"]) if f.report else set()
    if f.counts is not None and f.report is not None:
        for a, b, names in (("report.json", ".info.json", rep - info), (".info.json", "report.json", info - rep)):
            if names:
                f.add(f"{len(names)} shards listed in {a} but not in {b}: {eg(sorted(names))}")
    listed, good = sorted(info | rep), []
    for name in listed:
        if Path(name).is_absolute() or ".." in Path(name).parts or "/" in name or name in ("", "."):
            f.add(f"shard name {name[:200]!r} is no file name in {f.out} (vlmpack writes shards at its top)")
            f.load_ok = False
            continue
        try:
            mode = os.lstat(f.out / name).st_mode
        except FileNotFoundError:
            f.add(f"shard {name} is listed but missing from {f.out}")
            continue
        if not stat.S_ISREG(mode):
            what = ("a symbolic link; vlmpack writes none and follows none" if stat.S_ISLNK(mode)
                    else "not a regular file")
            f.add(f"shard {name} is {what}: not read")
            f.load_ok = False
        else:
            good.append(name)
    prefixes = {n.rsplit("-", 1)[0] for n in listed if "-" in n} | {"shard"}
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        prefixes.add(str(read_json(f.out, f"{RUN_DIR}/config.json")["options"]["shard_prefix"]))
    known = set(listed) | {n + ".idx" for n in listed}
    foreign = sorted({p.name for pre in prefixes for p in f.out.glob(f"{pre}-*") if p.name not in known})
    if foreign:
        f.add(f"{len(foreign)} foreign or leftover files listed by neither .info.json nor report.json: "
              f"{eg(foreign)}")
    return good


def check_totals(f: Findings) -> None:
    """The tars' findings against the records: per-sample token counts and totals vs the manifest
    and ``report.json``, ids packed twice, and (with the run dir) ids lost or injected."""
    if f.token_diffs:
        f.add(f"{len(f.token_diffs)} samples record num_tokens other than the manifest's (pack vs "
              f"manifest): {eg(f.token_diffs)}")
    rep = f.report or {}
    diff = [f"{k} {rep[k]} vs {f.totals[t]}" for k, t in (("packs", "packs"), ("samples_packed", "samples"),
            ("tokens", "tokens"), ("shard_bytes", "bytes")) if is_int(rep.get(k)) and rep[k] != f.totals[t]]
    if diff:
        f.add(f"report.json totals differ from the shards (recorded vs found): {', '.join(diff)}")
    where: dict[tuple[str, str], list[str]] = {}
    for key, (shard, ids) in f.packs.items():
        for pair in ids:
            where.setdefault(pair, []).append(f"{shard}/{key}")
    dups = [f"{p[1]!r} in {' and '.join(w[:2])}" for p, w in where.items() if len(w) > 1]
    if dups:
        f.add(f"{len(dups)} sample ids are packed more than once: {eg(dups)}")
    if f.expected is None:
        return
    missing = [repr(p[1]) for p in f.expected if p not in where]
    if missing:
        f.add(f"{len(missing)} samples of the run record's manifest are in no pack (lost): {eg(missing)}")
    extra = [f"{p[1]!r} ({p[0]}) in {w[0]}" for p, w in where.items() if p not in f.expected]
    if extra:
        f.add(f"{len(extra)} packed sample ids are not in the manifest (injected, or dropped as overlong): "
              f"{eg(extra)}")
