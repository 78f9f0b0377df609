"""Report stage: ``OUT/report.json``, ``OUT/report.html`` and the one-screen summary of a run.

The report holds the identity ``records read = samples packed + rejected + dropped overlong``
(with counts per reason), tokens, tokens lost to overlong samples, packs, the utilization
``tokens / (packs * seq_len)`` next to the lower bound ``L1 = ceil(sum(tokens) / seq_len)`` packs,
samples and media tokens per pack p50/p99/max, per input file the records read, packed, rejected,
dropped overlong and tokens packed (``sources``; the identity holds per file), the tar members that
belong to no sample (``members_without_key``: e.g. a ``README``; ``members_not_files``: symbolic
links, devices; never records, so outside the identity), the sha256 of each shard, the config
fingerprint and the versions of vlmpack/transformers/tokenizers; ``sample_ratio`` when the config's
is not 1 (a NeMo meta file's, :mod:`vlmpack.sources.nemo_meta`); ``layout`` when it is not
``vlmpack`` (``--layout``); ``processor``, the processor options, when any is set; ``alignment``
(:func:`alignment_figures`) when ``--cp-size`` / ``--tp-size`` / ``--sequence-parallel`` are set;
``data_parallel`` (:func:`vlmpack.pack.data_parallel.data_parallel_record`) with ``--dp-size``.

``report.html`` is what a person reads (issue 12): one self-contained file (PNG figures embedded as
base64, see :mod:`vlmpack.pack.figures`) with the key numbers, the sources table and the figures,
made from the manifest, the plan and the report only (no shard is read again).
``label_tokens`` / ``label_token_share``: the packed tokens that carry a label (the family's
label mask, counted with the tokens; ``None`` for a run counted by a vlmpack without it).
"""

from __future__ import annotations

import base64
import html
import math
import shlex
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pyarrow as pa

from vlmpack import __version__
from vlmpack.config import PackConfig
from vlmpack.fsio import atomic_write
from vlmpack.models import family_of
from vlmpack.pack.media_tokens import token_columns, tokens_by_kind
from vlmpack.pack.report_figures import FiguresAhead, arrays_hash, cached_pngs, figures_digest, keep_pngs
from vlmpack.pack.write import ShardResult
from vlmpack.packing import PackPlan
from vlmpack.packing.alignment import aligned_lengths
from vlmpack.records import SAMPLE_KINDS, ReadStats, Rejection, display_path

#: The human-readable report written beside ``report.json``.
REPORT_HTML = "report.html"


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def _pct(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"p50": 0, "p99": 0, "max": 0}
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "max": int(values.max())}


def source_counts(cfg: PackConfig, manifest: pa.Table, plan: PackPlan, rejections: list[Rejection],
                  records_by_file: list[int], left_out: list[tuple[int, int]] = ()) -> list[dict]:
    """Per input file (in ``cfg.input`` order): ``file``, ``records_read``, ``samples_packed``,
    ``rejected`` (duplicates included, overlong not), ``dropped_overlong`` (the plan's and those
    rejected ``overlong`` by the count stage, untokenized) and ``tokens`` (tokens of
    its packed samples). ``records_by_file[i]``: records read from ``cfg.input[i]``. A rejection is
    attributed by its locator's file, which the sources set to the input path as given.
    ``left_out``: ``(input file index, tokens)`` of each planned sample the writer left out (its
    media changed after counting; also among ``rejections``), taken off the packed counts."""
    nfiles = len(cfg.input)
    fidx = manifest.column("file_idx").to_numpy()
    ntok = manifest.column("num_tokens").to_numpy()
    over_idx = np.asarray(plan.overlong, dtype=np.int64)
    over = np.bincount(fidx[over_idx], minlength=nfiles)
    # all rows minus the overlong ones: no [n] mask or int64 copies (the driver's memory is flat in n)
    packed = np.bincount(fidx, minlength=nfiles) - over
    tokens = np.bincount(fidx, weights=ntok, minlength=nfiles) - np.bincount(
        fidx[over_idx], weights=ntok[over_idx], minlength=nfiles)
    for f, n in left_out:
        if 0 <= f < nfiles:
            packed[f] -= 1
            tokens[f] -= n
    index = {p: i for i, p in enumerate(cfg.input)}
    rejected = Counter(index.get(r.locator.file, -1) for r in rejections if r.reason != "overlong")
    # the plan's overlong samples and those the count stage rejected overlong untokenized: all in rejections
    dropped = Counter(index.get(r.locator.file, -1) for r in rejections if r.reason == "overlong")
    return [{"file": display_path(str(path)), "records_read": int(records_by_file[i]),
             "samples_packed": int(packed[i]), "rejected": int(rejected.get(i, 0)),
             "dropped_overlong": int(dropped.get(i, 0)), "tokens": int(tokens[i])} for i, path in enumerate(cfg.input)]


def build_report(cfg: PackConfig, fingerprint: str, stats: ReadStats, manifest: pa.Table, plan: PackPlan,
                 rejections: list[Rejection], shards: list[ShardResult], timings: dict[str, float],
                 records_by_file: list[int] | None = None, left_out: list[tuple[int, int]] = (),
                 split: dict | None = None) -> dict:
    """The report as a JSON-ready dict (see the module docstring for its content);
    ``records_by_file``: records read per input file (``sources`` is left out when ``None``);
    ``left_out``: see :func:`source_counts`; ``split``: ``--overlong split``'s figures summed over
    the count tasks (:class:`vlmpack.pack.turn_split.SplitStats`, ``entries_added_by_file``: per input
    file index), which the identity counts: ``records read + entries_added = packed + rejected +
    dropped overlong``."""
    shown = figure_entries(cfg, manifest, plan, rejections, records_by_file, left_out, split)
    reasons, overlong = shown["rejected_by_reason"], shown["dropped_overlong"]
    rejected = sum(reasons.values())
    packed = int(sum(s.num_samples for s in shards))
    tokens = int(sum(s.num_tokens for s in shards))
    packs = int(sum(s.num_packs for s in shards))
    per_pack = np.diff(plan.offsets)
    label_sum = None
    over_idx = np.asarray(plan.overlong, dtype=np.int64)
    if "label_tokens" in manifest.column_names:
        lab = manifest.column("label_tokens").to_numpy()
        n_unknown = int(np.count_nonzero(lab < 0)) - int(np.count_nonzero(lab[over_idx] < 0))
        label_sum = int(lab.sum(dtype=np.int64)) - int(lab[over_idx].sum(dtype=np.int64)) if not n_unknown else None
    lower = math.ceil(tokens / cfg.seq_len) if tokens else 0
    util = tokens / (packs * cfg.seq_len) if packs else 0.0
    ntok, mtok, kind = (manifest.column(c).to_numpy() for c in ("num_tokens", "media_tokens", "kind"))
    order, offsets = np.asarray(plan.order), np.asarray(plan.offsets, dtype=np.int64)

    def summed_per_pack(values: np.ndarray) -> np.ndarray:  # per manifest sample -> per pack (never empty)
        return (np.add.reduceat(values[order], offsets[:-1], dtype=np.int64) if plan.num_packs
                else np.zeros(0, np.int64))

    by_kind = tokens_by_kind(mtok, kind, token_columns(manifest))
    report = {
        "records_read": stats.records,
        "blank_lines": stats.blank,
        "samples_packed": packed,
        "rejected": rejected,
        "dropped_overlong": overlong,
        "identity_holds": stats.records + (split or {}).get("entries_added", 0) == packed + rejected + overlong,
        "rejected_by_reason": reasons,
        "members_without_key": stats.members_without_key,
        "members_not_files": stats.members_not_files,
        "packs": packs,
        "shards": len(shards),
        "tokens": tokens,
        "seq_len": cfg.seq_len,
        "utilization": util,
        "lower_bound_packs": lower,
        "utilization_of_lower_bound": (lower / packs) if packs else 1.0,
        "samples_per_pack": _pct(per_pack),
        "samples_by_kind": {k: int(v) for k, v in zip(SAMPLE_KINDS,
                                                       np.bincount(manifest.column("kind").to_numpy(),
                                                                   minlength=len(SAMPLE_KINDS)))},
        "label_tokens": label_sum,
        "label_token_share": None if label_sum is None else (label_sum / tokens if tokens else 0.0),
        "overlong_tokens": int(ntok[over_idx].sum(dtype=np.int64)),
        "overlong_tokens_by_kind": {k: int(v) for k, v in zip(SAMPLE_KINDS, np.bincount(
            kind[over_idx], weights=ntok[over_idx], minlength=len(SAMPLE_KINDS)))},
        "media_tokens_per_pack": _pct(summed_per_pack(mtok)),
        "media_tokens_by_kind": {k: int(v[order].sum(dtype=np.int64)) for k, v in by_kind.items()},
        "media_tokens_per_pack_by_kind": {k: _pct(summed_per_pack(v)) for k, v in by_kind.items()},
        "algorithm": cfg.algorithm,
        "model": family_of(cfg.model),
        "shard_sha256": {s.name: s.sha256 for s in shards},
        "shard_bytes": int(sum(s.nbytes for s in shards)),
        "fingerprint": fingerprint,
        "versions": {"vlmpack": __version__, "transformers": _version("transformers"),
                     "tokenizers": _version("tokenizers")},
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    if cfg.sample_ratio != 1.0:  # a NeMo meta file's sample_ratio: vlmpack metadataset multiplies the weight
        report["sample_ratio"] = cfg.sample_ratio
    if cfg.layout != "vlmpack":  # --layout: a blend holds one layout (vlmpack metadataset)
        report["layout"] = cfg.layout
    if cfg.dedup != "off":  # --dedup exact: vlmpack check finds no two packed samples with the same content
        report["dedup"] = cfg.dedup
    if cfg.processor:  # --min-pixels, ..., --processor-kwargs: the collator needs the same (PackCollator(processor=))
        report["processor"] = cfg.processor
    if (cfg.cp_size, cfg.tp_size, cfg.sequence_parallel) != (1, 1, False):  # --cp-size ...: THD per-sample padding
        report["alignment"] = alignment_figures(cfg, ntok[order], offsets)
    if split:  # --overlong split: records cut into pieces at turns
        report["overlong_split"] = {k: v for k, v in split.items() if k != "entries_added_by_file"}
    if "sources" in shown:
        report["sources"] = shown["sources"]
    return report


def figure_entries(cfg: PackConfig, manifest: pa.Table, plan: PackPlan, rejections: list[Rejection],
                   records_by_file: list[int] | None = None, left_out: list[tuple[int, int]] = (),
                   split: dict | None = None) -> dict:
    """The entries of :func:`build_report` (same arguments) that the report's figures show, alone:
    ``rejected_by_reason`` (reason -> samples, sorted, ``overlong`` left out), ``dropped_overlong``
    (samples rejected ``overlong``) and, with ``records_by_file``, ``sources``
    (:func:`source_counts`, with ``--overlong split``'s ``entries_added`` per file). Known once the
    plan is made: the figures are drawn from them during the write stage
    (:func:`figures_ahead`) without building the whole report twice."""
    reasons = Counter(r.reason for r in rejections)
    overlong = reasons.pop("overlong", 0)
    out: dict = {"rejected_by_reason": dict(sorted(reasons.items())), "dropped_overlong": overlong}
    if records_by_file is not None:
        out["sources"] = source_counts(cfg, manifest, plan, rejections, records_by_file, left_out)
        for i, n in (split or {}).get("entries_added_by_file", {}).items():
            out["sources"][int(i)]["entries_added"] = n
    return out


def alignment_figures(cfg: PackConfig, lengths: np.ndarray, offsets: np.ndarray) -> dict:
    """``report.json``'s ``alignment``: the trainer's parallel layout, the multiple every sample is padded
    to (:func:`vlmpack.packing.alignment.sample_multiple`), the padding tokens that reserves over the packed
    samples (``lengths``: int64 tokens in pack order, ``offsets``: the plan's ``[packs+1]``) and the
    largest padded pack in tokens (at most ``seq_len``: what ``vlmpack check`` verifies)."""
    m = cfg.sample_multiple
    padded = aligned_lengths(lengths, m)
    per_pack = np.add.reduceat(padded, offsets[:-1]) if len(offsets) > 1 else np.zeros(0, np.int64)
    return {"cp_size": cfg.cp_size, "tp_size": cfg.tp_size, "sequence_parallel": cfg.sequence_parallel,
            "sample_multiple": m, "padding_tokens": int((padded - lengths).sum()),
            "padded_tokens_per_pack_max": int(per_pack.max()) if len(per_pack) else 0}


#: The stages of ``report.json``'s ``seconds`` in the user's words (``measure``: read / validate and
#: count, wall clock; ``worker_*``: the seconds the workers spent on each, summed over workers).
STAGE_WORDS = {"measure": "read / validate + count", "plan": "plan", "write": "write",
               "worker_read_validate": "read / validate (workers)", "worker_count": "count (workers)"}


def _seconds(seconds: dict) -> str:
    """``report.json``'s ``seconds`` with the stages in the user's words (:data:`STAGE_WORDS`)."""
    return ", ".join(f"{STAGE_WORDS.get(k, k)} {v:.1f}" for k, v in seconds.items())


def _reuse_rows(u: dict) -> list[tuple[str, str]]:
    """What this run took instead of doing it again: ``already packed`` (everything, from a finished
    earlier run of this output), ``resumed`` (some of it from an unfinished one: counting tasks, the
    plan, shards) and ``counts from the cache`` (the shared count cache)."""
    cached = u.get("count_tasks_from_cache", 0)
    here = u.get("count_tasks_reused", 0) - cached  # counting tasks found in OUT's own run directory
    rows = []
    everything = (here == u.get("count_tasks", 0) > 0 and u.get("plan_reused")
                  and u.get("shards_reused", 0) == u.get("shards", 0))
    if everything:  # a run of a finished output: nothing left to do
        rows.append(("already packed", "this output was complete: nothing counted, planned or written again"))
    elif here > 0 or u.get("plan_reused") or u.get("shards_reused"):
        rows.append(("resumed", f"reused {here}/{u.get('count_tasks', 0)} counting tasks, "
                                f"{'the' if u.get('plan_reused') else 'no'} plan, {u.get('shards_reused', 0)}/"
                                f"{u.get('shards', 0)} shards of the earlier run in this output"))
    if cached:
        rows.append(("counts from the cache", f"{cached}/{u.get('count_tasks', 0)} counting tasks taken from the "
                                              "count cache (--cache-dir), not counted again"))
    return rows


def next_steps(out: str | Path) -> list[tuple[str, str]]:
    """What ``vlmpack pack``'s summary ends with: the paths of the output ``out``'s ``report.html`` and
    ``rejects.jsonl``, and the command to run next, as (label, value) rows."""
    return [("report", str(Path(out) / "report.html")), ("rejects", str(Path(out) / "rejects.jsonl")),
            ("next", f"vlmpack verify {shlex.quote(str(out))}")]


def summary_lines(report: dict) -> list[tuple[str, str]]:
    """The one-screen summary as (label, value) rows."""
    r = report
    rows = [
        ("records read", f"{r['records_read']:,}"),
        ("samples packed", f"{r['samples_packed']:,}"),
        ("rejected", f"{r['rejected']:,}" + (" (" + ", ".join(f"{k} {v}" for k, v in r["rejected_by_reason"].items())
                                            + ")" if r["rejected_by_reason"] else "")),
        ("dropped overlong", f"{r['dropped_overlong']:,}"),
        *([("tar members in no sample", f"{r.get('members_without_key', 0):,} without a key (e.g. README), "
                                        f"{r.get('members_not_files', 0):,} not files (links, devices)")]
          if r.get("members_without_key") or r.get("members_not_files") else []),
        ("identity read = packed + rejected + overlong" + (" - pieces added" if r.get("overlong_split") else ""),
         "holds" if r["identity_holds"] else "BROKEN"),
        ("tokens", f"{r['tokens']:,}"),
        *([("media tokens " + " / ".join(kinds), " / ".join(f"{v:,}" for v in kinds.values()))]
          if (kinds := r.get("media_tokens_by_kind")) else []),
        ("tokens with a label (trained on)", "-" if r.get("label_token_share") is None else
         f"{r['label_tokens']:,} ({100 * r['label_token_share']:.1f} %)"),
        ("packs (lower bound)", f"{r['packs']:,} ({r['lower_bound_packs']:,})"),
        ("utilization", f"{100 * r['utilization']:.2f} % of {r['seq_len']} tokens/pack; "
                        f"{100 * r['utilization_of_lower_bound']:.2f} % of the lower bound"),
        ("samples per pack p50 / p99 / max", "{p50:g} / {p99:g} / {max}".format(**r["samples_per_pack"])),
        ("shards", f"{r['shards']} ({r['shard_bytes'] / 1e6:,.1f} MB)"),
        ("seconds", _seconds(r["seconds"])),
    ]
    if r.get("overlong_split"):  # --overlong split
        o = r["overlong_split"]
        rows.insert(-2, ("overlong split at turns", f"{o['records']:,} conversations -> {o['pieces']:,} pieces "
                                                    f"({o['tokens_kept']:,} tokens kept), {o['turns_dropped']:,} "
                                                    f"turns dropped ({o['tokens_dropped']:,} tokens)"))
    if r.get("alignment"):  # --cp-size / --sequence-parallel: THD per-sample padding
        a = r["alignment"]
        rows.insert(-2, ("THD sample alignment", f"each sample padded to a multiple of {a['sample_multiple']} tokens "
                                                 f"(CP {a['cp_size']}, TP {a['tp_size']}, SP "
                                                 f"{'on' if a['sequence_parallel'] else 'off'}): "
                                                 f"{a['padding_tokens']:,} padding tokens; the fullest padded pack "
                                                 f"{a['padded_tokens_per_pack_max']:,} of {r['seq_len']:,}"))
    if r.get("data_parallel"):  # --dp-size / --global-batch-size
        d = r["data_parallel"]
        b, a = d["before"]["vision_tokens"], d["after"]["vision_tokens"]
        rows.insert(-2, ("data parallel", f"{d['dp_size']} ranks, {d['global_batch_size']} packs per step: "
                                          f"{d['after']['steps']:,} full steps ({d['packs_added']} packs added); "
                                          f"vision tokens max - min over a step's ranks {b['spread_mean']:,.0f} -> "
                                          f"{a['spread_mean']:,.0f} (mean of steps)"))
    if r.get("splits"):  # --split: samples / packs / shards per split part
        rows.insert(-1, ("splits", "; ".join(f"{name} {v['samples']:,} samples, {v['packs']:,} packs, "
                                             f"{len(v['shards'])} shards" for name, v in r["splits"].items())))
    rows[:0] = _reuse_rows(r.get("reused") or {})
    return rows


# ---------------------------------------------------------------------------------------- html
def report_data(cfg: PackConfig, manifest: pa.Table, plan: PackPlan, report: dict):
    """The :class:`vlmpack.pack.figures.ReportData` of a run (arrays from the manifest and plan)."""
    from vlmpack.pack.figures import ReportData

    col = lambda name: manifest.column(name).to_numpy().astype(np.int64)  # noqa: E731
    reasons = dict(report.get("rejected_by_reason", {}))
    reasons["overlong"] = report.get("dropped_overlong", 0)
    return ReportData(col("num_tokens"), col("kind"), col("media_tokens"), plan.overlong, plan.offsets,
                      plan.order, plan.pack_tokens, cfg.seq_len, reasons, report.get("sources", []),
                      kind_tokens=token_columns(manifest))


def _table(rows: list[tuple[str, str]], head: tuple[str, ...] = ()) -> str:
    th = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{th}{body}</table>"


def report_html(report: dict, pngs: dict[str, bytes], title: str = "vlmpack pack report",
                captions: dict[str, str] | None = None) -> bytes:
    """``report.html`` as UTF-8 bytes: the key numbers (:func:`summary_lines` plus overlong tokens),
    the per-source table and every PNG of ``pngs`` (name -> bytes, captioned from
    :data:`vlmpack.pack.figures.REPORT_FIGURES`, or ``captions``: name -> caption) as a base64
    ``<img>``; no external resource."""
    if captions is None:
        from vlmpack.pack.figures import REPORT_FIGURES

        captions = {name: caption for name, caption, _ in REPORT_FIGURES}
    r = report
    key = summary_lines(r)
    over = r.get("overlong_tokens", 0)
    share = 100 * over / max(1, r["tokens"] + over)
    key.insert(4, ("tokens dropped overlong", f"{over:,} ({share:.2f} % of the tokens counted)"))
    key.insert(0, ("status", str(r.get("status", ""))))
    key.insert(1, ("seq_len (L)", f"{r['seq_len']:,} tokens; algorithm {r['algorithm']}"))
    src = [(s["file"], f"{s['records_read']:,}", f"{s['samples_packed']:,}", f"{s['rejected']:,}",
            f"{s['dropped_overlong']:,}", f"{s['tokens']:,}") for s in r.get("sources", [])]
    figs = "".join(
        f'<figure id="fig-{html.escape(name)}"><img alt="{html.escape(captions.get(name, name))}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{html.escape(captions.get(name, name))}</figcaption></figure>" for name, png in pngs.items())
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1600px}}
table{{border-collapse:collapse;margin:0.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}td:not(:first-child){{font-variant-numeric:tabular-nums}}
figure{{display:inline-block;margin:0.5em}}img{{max-width:100%}}figcaption{{color:#555;font-size:90%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<h2>Key numbers</h2>{_table(key)}
<h2>Input files</h2>{_table(src, ("file", "records read", "packed", "rejected", "dropped overlong", "tokens packed"))}
<h2>Figures</h2>{figs}
<p>Numbers from report.json (fingerprint {html.escape(str(r.get("fingerprint", ""))[:12])}).</p>
</body></html>
"""
    return doc.encode("utf-8")


def figures_ahead(cfg: PackConfig, manifest: pa.Table, plan: PackPlan, report: dict,
                  png_cache: Path | None = None) -> FiguresAhead | None:
    """The run's figures to draw beside the write stage (:class:`vlmpack.pack.report_figures.FiguresAhead`,
    not started) from ``report``'s entries as :func:`figure_entries` gives them before the shards are
    written, or ``None`` when ``png_cache`` or the shared PNG cache
    (:func:`~vlmpack.pack.report_figures.shared_png_cache`) already holds them."""
    arrays = arrays_hash(manifest, plan)
    digest = figures_digest(cfg.seq_len, arrays, report)
    if cached_pngs(png_cache, cfg.cache_dir, digest) is not None:
        return None

    def draw() -> dict[str, bytes]:
        from vlmpack.pack.figures import report_pngs

        return report_pngs(report_data(cfg, manifest, plan, report))

    return FiguresAhead(draw, arrays, digest)


def write_report_html(cfg: PackConfig, manifest: pa.Table, plan: PackPlan, report: dict,
                      png_cache: Path | None = None, ahead: FiguresAhead | None = None) -> Path:
    """Render the figures of the run and write ``OUT/report.html`` atomically; returns its path.

    ``png_cache``: a sealed JSON file (:func:`vlmpack.fsio.sealed_json_bytes`; data only) keeping
    the PNGs (base64) with the sha256 of the data they show (:func:`figures_digest`); while that is
    unchanged (a resume with nothing new, another shard size) and the file matches its checksum, the
    PNGs are taken from it instead of drawn again (matplotlib is not even imported), so a finished
    run started again costs no plotting; likewise from the cache root's shared PNG cache
    (:func:`~vlmpack.pack.report_figures.shared_png_cache`: the same data packed into another output),
    which gets the PNGs a run draws (a cache that cannot be written is skipped). ``ahead``: the
    figures drawn during the write stage (:func:`figures_ahead` of the same ``manifest`` and ``plan``:
    their arrays are not hashed again), taken when they show the same. Raises ``OSError`` (disk full,
    read-only, ...)."""
    path = Path(cfg.output) / REPORT_HTML
    arrays = ahead.arrays if ahead is not None else arrays_hash(manifest, plan)
    digest = figures_digest(cfg.seq_len, arrays, report)
    cached = cached_pngs(png_cache, cfg.cache_dir, digest)
    if cached is not None:
        pngs, captions = cached
    else:
        from vlmpack.pack.figures import REPORT_FIGURES, report_pngs

        pngs = ahead.take(digest) if ahead is not None else None
        if pngs is None:
            pngs = report_pngs(report_data(cfg, manifest, plan, report))
        captions = {name: caption for name, caption, _ in REPORT_FIGURES}
        keep_pngs(png_cache, cfg.cache_dir, digest, pngs, captions)
    atomic_write(path, report_html(report, pngs, f"vlmpack pack report: {display_path(str(cfg.output))}", captions))
    return path
