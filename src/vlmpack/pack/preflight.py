"""Pre-flight planning (``vlmpack plan``): how a choice of ``seq_len`` would pack, writing no shards.

Input: the counted manifest of a ``pack`` run (``OUT/.vlmpack/manifest.parquet`` with columns
``num_tokens``, ``media_tokens``, ``num_media``, ``kind``), that parquet file, or a lengths file
(``.npy`` integer array, or text with one integer per line). For each ``seq_len`` it reports
samples, overlong (count, %), packs, the lower bounds L1 = ceil(sum/L) and L2 (Martello–Toth),
utilization, samples per pack and media tokens per pack (p50/p99/max), and optionally plots the
length histogram and the pack-fill distribution.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlmpack.errors import ConfigError, InputError
from vlmpack.packing import PackPlan, lower_bound_l1, lower_bound_l2, plan_packs

logger = logging.getLogger(__name__)

MANIFEST = Path(".vlmpack") / "manifest.parquet"


@dataclass(frozen=True)
class PlanInput:
    """Per-sample counts for planning; all int64 ``[n]`` (media arrays zero when unknown)."""

    lengths: np.ndarray
    media_counts: np.ndarray
    media_tokens: np.ndarray
    kinds: np.ndarray
    source: str
    has_media: bool


def load_plan_input(source: str | Path) -> PlanInput:
    """Read counts from an OUT dir, a manifest parquet, a ``.npy`` or a text lengths file.

    Raises:
        InputError: the path does not exist, or the file cannot be read as counts.
    """
    path = Path(source)
    if path.is_dir():
        path = path / MANIFEST
        if not path.is_file():
            raise InputError(f"{source} has no {MANIFEST}; run `vlmpack pack` first or pass a lengths file")
    if not path.is_file():
        raise InputError(f"{path} does not exist; pass an OUT dir, a manifest.parquet or a lengths file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types
            raise InputError(f"{path}: cannot read parquet ({exc}); pass a manifest written by `vlmpack pack`") from exc
        if "num_tokens" not in table.column_names:
            raise InputError(f"{path} has no num_tokens column; pass the manifest of a `vlmpack pack` run")
        n = table.num_rows

        def col(name: str) -> np.ndarray:
            if name in table.column_names:
                return table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)
            return np.zeros(n, dtype=np.int64)

        has_media = "media_tokens" in table.column_names
        return PlanInput(col("num_tokens"), col("num_media"), col("media_tokens"), col("kind"), str(path), has_media)
    try:
        if path.suffix == ".npy":
            lengths = np.load(path, allow_pickle=False)
        else:
            lengths = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (ValueError, OSError) as exc:
        raise InputError(f"{path}: not a lengths file ({exc}); use .npy or one integer per line") from exc
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or (lengths.size and not np.issubdtype(lengths.dtype, np.integer)):
        raise InputError(f"{path}: expected a 1-D integer array, got {lengths.dtype} {lengths.shape}")
    z = np.zeros(lengths.size, dtype=np.int64)
    return PlanInput(lengths.astype(np.int64), z, z.copy(), z.copy(), str(path), False)


def _pct(a: np.ndarray) -> tuple[float, float, int]:
    if a.size == 0:
        return 0.0, 0.0, 0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99)), int(a.max())


def plan_row(data: PlanInput, seq_len: int, **options: Any) -> tuple[dict[str, Any], PackPlan]:
    """Plan one ``seq_len``; returns (table row, the plan). ``options`` go to ``plan_packs``."""
    t0 = time.perf_counter()
    media = {}
    if data.has_media:
        media = {"media_counts": data.media_counts, "media_tokens": data.media_tokens, "kinds": data.kinds}
    plan = plan_packs(data.lengths, seq_len, **media, **options)
    seconds = time.perf_counter() - t0
    pad = options.get("pad_to_multiple_of") or 1
    eff = -(-data.lengths // pad) * pad
    packed = np.ones(eff.size, dtype=bool)
    packed[plan.overlong] = False
    n = int(eff.size)
    seg = np.repeat(np.arange(plan.num_packs), plan.samples_per_pack())
    mt_per_pack = np.bincount(seg, weights=data.media_tokens[plan.order], minlength=plan.num_packs)
    spp = _pct(plan.samples_per_pack())
    mtp = _pct(mt_per_pack.astype(np.int64))
    l2 = lower_bound_l2(eff[packed], seq_len)
    row = {
        "seq_len": int(seq_len),
        "samples": n,
        "overlong": int(plan.overlong.size),
        "overlong_pct": 100.0 * plan.overlong.size / n if n else 0.0,
        "packs": plan.num_packs,
        "L1": lower_bound_l1(eff[packed], seq_len),
        "L2": l2,
        "packs_minus_L2": plan.num_packs - l2,
        "utilization": plan.utilization(),
        "samples_per_pack_p50": spp[0],
        "samples_per_pack_p99": spp[1],
        "samples_per_pack_max": spp[2],
        "media_tokens_per_pack_p50": mtp[0] if data.has_media else None,
        "media_tokens_per_pack_p99": mtp[1] if data.has_media else None,
        "media_tokens_per_pack_max": mtp[2] if data.has_media else None,
        "seconds": seconds,
    }
    return row, plan


def plan_table(data: PlanInput, seq_lens: list[int], **options: Any) -> tuple[list[dict[str, Any]], list[PackPlan]]:
    """One row (and plan) per ``seq_len``, in the given order.

    Raises:
        ConfigError: no ``seq_len`` given, or an invalid option.
    """
    if not seq_lens:
        raise ConfigError("no --seq-len given; pass at least one, e.g. --seq-len 8192")
    rows, plans = [], []
    for L in seq_lens:
        row, plan = plan_row(data, int(L), **options)
        rows.append(row)
        plans.append(plan)
    return rows, plans


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`plan_table` rows."""
    head = ("| seq_len | samples | overlong (%) | packs | L1 | L2 | packs-L2 | util % | "
            "samples/pack p50/p99/max | media tok/pack p50/p99/max |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        media = "-"
        if r["media_tokens_per_pack_p50"] is not None:
            media = (f"{r['media_tokens_per_pack_p50']:.0f}/{r['media_tokens_per_pack_p99']:.0f}/"
                     f"{r['media_tokens_per_pack_max']}")
        lines.append(
            f"| {r['seq_len']} | {r['samples']} | {r['overlong']} ({r['overlong_pct']:.2f}) | {r['packs']} | "
            f"{r['L1']} | {r['L2']} | {r['packs_minus_L2']} | {100 * r['utilization']:.2f} | "
            f"{r['samples_per_pack_p50']:.0f}/{r['samples_per_pack_p99']:.0f}/{r['samples_per_pack_max']} | {media} |"
        )
    return "\n".join(lines)


def plot(data: PlanInput, rows: list[dict[str, Any]], plans: list[PackPlan], path: str | Path) -> Path:
    """Write a PNG: the length histogram (with each seq_len marked) and the pack-fill histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    if data.lengths.size:
        ax1.hist(data.lengths, bins=100, color="tab:blue")
    for r in rows:
        ax1.axvline(r["seq_len"], color="tab:red", linestyle="--", linewidth=1)
    ax1.set(xlabel="tokens per sample", ylabel="samples", title="Sample lengths (dashed: seq_len)", yscale="log")
    for r, p in zip(rows, plans):
        if p.num_packs:
            ax2.hist(p.pack_tokens / r["seq_len"], bins=50, range=(0, 1), histtype="step", linewidth=1.5,
                     label=f"L={r['seq_len']}: {p.num_packs} packs, {100 * r['utilization']:.2f} %")
    ax2.set(xlabel="pack fill (tokens / seq_len)", ylabel="packs", title="Pack fill", yscale="log")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    logger.info("wrote %s", out)
    return out
