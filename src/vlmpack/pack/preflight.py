"""Pre-flight planning (``vlmpack plan``): how a choice of ``seq_len`` would pack, writing no shards.

Input: the counted manifest of a ``pack`` run (``OUT/.vlmpack/manifest.parquet`` with columns
``num_tokens``, ``media_tokens``, the per-kind token columns ``video_tokens`` / ``audio_tokens``
(:data:`vlmpack.pack.media_tokens.TOKEN_COLUMNS`), ``num_media``, ``kind``), that parquet file, a lengths file
(``.npy`` integer array, or text with one integer per line), or the inputs and model themselves
(``vlmpack plan --input ... --model ...``: counted through the count stage and its cache,
:func:`vlmpack.pack.count_stage.count_inputs`, so a later ``pack`` does not count again). For each
``seq_len`` it reports samples, overlong (count, %, tokens lost, per kind), packs, the lower bounds
L1 = ceil(sum/L) and L2 (Martello–Toth), utilization, samples per pack and media tokens per pack (p50/p99/max,
media tokens also per media kind of the registry: a sample's image tokens count as image, its video
tokens as video, its audio tokens as audio; and their totals). :func:`sweep_lengths` adds a
geometric grid of L so that :func:`plot` draws curves against L, and :func:`recommend_seq_len` picks
the smallest L that drops fewer than ``max_drop`` of the samples (issue 12: "the smallest L with
< 0.1 % samples dropped").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlmpack.errors import ConfigError, InputError
from vlmpack.pack.media_tokens import MEDIA_KINDS, token_columns, tokens_by_kind
from vlmpack.packing import PackPlan, lower_bound_l1, lower_bound_l2, plan_packs
from vlmpack.records import SAMPLE_KINDS

logger = logging.getLogger(__name__)

MANIFEST = Path(".vlmpack") / "manifest.parquet"
#: Names of the manifest's ``kind`` codes 0/1/2/3 (``vlmpack.pack.count_task``).
KINDS = SAMPLE_KINDS
#: Default share of samples that the recommended L may drop as overlong (issue 12: < 0.1 %).
MAX_DROP = 0.001


@dataclass(frozen=True)
class PlanInput:
    """Per-sample counts for planning; all int64 ``[n]`` (media arrays zero when unknown).
    ``kind_tokens``: column name of :data:`vlmpack.pack.media_tokens.TOKEN_COLUMNS` -> the part of
    ``media_tokens`` of the sample's items of that kind (None or absent: unknown, see
    :func:`vlmpack.pack.media_tokens.tokens_by_kind`)."""

    lengths: np.ndarray
    media_counts: np.ndarray
    media_tokens: np.ndarray
    kinds: np.ndarray
    source: str
    has_media: bool
    kind_tokens: dict[str, np.ndarray | None] = field(default_factory=dict)


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
        return plan_input_from_table(table, str(path))
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


def plan_input_from_table(table: Any, source: str) -> PlanInput:
    """The :class:`PlanInput` of a manifest table (``pyarrow.Table`` with int ``num_tokens`` and
    optionally ``media_tokens``, the per-kind token columns (``video_tokens``, ``audio_tokens``),
    ``num_media``, ``kind``; missing media columns read as zeros):
    a parquet file's, or the one :func:`vlmpack.pack.count_stage.count_inputs` builds. ``source`` names
    it in the plot. Raises :class:`InputError` when ``num_tokens`` is missing."""
    if "num_tokens" not in table.column_names:
        raise InputError(f"{source} has no num_tokens column; pass the manifest of a `vlmpack pack` run")
    n = table.num_rows

    def col(name: str) -> np.ndarray:
        if name in table.column_names:
            return table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)
        return np.zeros(n, dtype=np.int64)

    has_media = "media_tokens" in table.column_names
    return PlanInput(col("num_tokens"), col("num_media"), col("media_tokens"), col("kind"), source, has_media,
                     token_columns(table))


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
    over_tokens = data.lengths[plan.overlong]
    over_kinds = data.kinds[plan.overlong]
    total_tokens = int(data.lengths.sum())
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
        "tokens": total_tokens,
        "overlong_tokens": int(over_tokens.sum()),
        "overlong_tokens_pct": 100.0 * float(over_tokens.sum()) / total_tokens if total_tokens else 0.0,
        "overlong_by_kind": {k: int((over_kinds == i).sum()) for i, k in enumerate(KINDS)},
        "overlong_tokens_by_kind": {k: int(over_tokens[over_kinds == i].sum()) for i, k in enumerate(KINDS)},
        "media_tokens_per_pack_by_kind": None,
        "media_tokens_by_kind": None,
        "seconds": seconds,
    }
    if data.has_media:  # per media kind: a sample's image tokens count as image, its video tokens as video, ...
        per_kind, totals = {}, {}
        for k, tokens in tokens_by_kind(data.media_tokens, data.kinds, data.kind_tokens).items():
            w = tokens[plan.order]
            per_pack = np.bincount(seg, weights=w, minlength=plan.num_packs).astype(np.int64)
            per_kind[k] = dict(zip(("p50", "p99", "max"), _pct(per_pack)))
            totals[k] = int(w.sum())
        row["media_tokens_per_pack_by_kind"] = per_kind
        row["media_tokens_by_kind"] = totals
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
            f"samples/pack p50/p99/max | media tok/pack p50/p99/max | media tok {' / '.join(MEDIA_KINDS)} |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        media = by_kind = "-"
        if r["media_tokens_per_pack_p50"] is not None:
            media = (f"{r['media_tokens_per_pack_p50']:.0f}/{r['media_tokens_per_pack_p99']:.0f}/"
                     f"{r['media_tokens_per_pack_max']}")
            by_kind = " / ".join(f"{r['media_tokens_by_kind'][k]:,}" for k in MEDIA_KINDS)
        lines.append(
            f"| {r['seq_len']} | {r['samples']} | {r['overlong']} ({r['overlong_pct']:.2f}) | {r['packs']} | "
            f"{r['L1']} | {r['L2']} | {r['packs_minus_L2']} | {100 * r['utilization']:.2f} | "
            f"{r['samples_per_pack_p50']:.0f}/{r['samples_per_pack_p99']:.0f}/{r['samples_per_pack_max']} | {media} | "
            f"{by_kind} |"
        )
    return "\n".join(lines)


#: The largest L of the default sweep grid (tokens) below the longest sample.
GRID_MAX = 131072


def default_grid(max_length: int = 0, lo: int = 1024, hi: int = GRID_MAX) -> list[int]:
    """The default sweep of L in tokens: ``2**k`` and ``1.5 * 2**k`` from ``lo`` to ``hi`` (half-octave
    steps of common sequence lengths: 1024, 1536, 2048, 3072, ...), extended by whole octaves up to
    the first power of two >= ``max_length`` (tokens of the longest sample) so that the last L
    drops nothing."""
    grid, k = [lo], lo
    while True:
        for g in (3 * k // 2, 2 * k):
            if g > hi and grid[-1] >= max_length:
                return grid
            grid.append(g)
        k *= 2


def sweep_lengths(data: PlanInput, seq_lens: list[int], grid: bool) -> list[int]:
    """The L to plan, ascending: the user's ``seq_lens`` plus, when ``grid``, :func:`default_grid`."""
    extra = default_grid(int(data.lengths.max()) if data.lengths.size else 0) if grid else []
    return sorted({int(x) for x in list(seq_lens) + extra})


def recommend_seq_len(rows: list[dict[str, Any]], max_drop: float = MAX_DROP) -> dict[str, Any] | None:
    """The row of the smallest ``seq_len`` whose overlong share is below ``max_drop`` (a fraction of
    the samples, 0 <= max_drop < 1; ``overlong / samples < max_drop``, or no sample dropped at all,
    so ``max_drop=0`` asks for zero drops), or ``None`` when no row qualifies. Rule of issue 12:
    "the smallest L with < 0.1 % samples dropped" (default ``max_drop`` :data:`MAX_DROP`).

    Raises:
        ConfigError: ``max_drop`` outside [0, 1).
    """
    if not 0.0 <= max_drop < 1.0:
        raise ConfigError(f"--max-drop {max_drop} is not a fraction in [0, 1); e.g. 0.001 for 0.1 %")
    ok = [r for r in rows if r["overlong"] == 0 or r["overlong"] < max_drop * r["samples"]]
    return min(ok, key=lambda r: r["seq_len"]) if ok else None


def recommendation_line(best: dict[str, Any] | None, rows: list[dict[str, Any]], max_drop: float) -> str:
    """One line naming the recommended L and what it drops (or that none of ``rows`` qualifies)."""
    share = f"{100 * max_drop:g} %"
    if best is None:
        top = max(r["seq_len"] for r in rows)
        return (f"recommended L: none of the L planned (up to {top}) drops < {share} of the samples; "
                "pass a larger --seq-len, --sweep (or --plot) to plan a grid of L, or a larger --max-drop")
    return (f"recommended L: {best['seq_len']} (smallest L planned that drops < {share} of the samples: "
            f"{best['overlong']} of {best['samples']:,} = {best['overlong_pct']:.3f} %, "
            f"{best['overlong_tokens']:,} tokens; {best['packs']:,} packs, "
            f"{100 * best['utilization']:.2f} % utilization)")


def plot(data: PlanInput, rows: list[dict[str, Any]], path: str | Path, *, best: dict[str, Any] | None,
         max_drop: float = MAX_DROP, marked: list[int] | None = None) -> Path:
    """Write the PNG of the sweep ``rows`` against L (see :func:`vlmpack.pack.figures.plan_figure`):
    ``best`` is the recommended row, ``marked`` the user's L. Raises ``OSError`` when unwritable."""
    from vlmpack.pack.figures import plan_figure

    kinds = [k for i, k in enumerate(KINDS) if (data.kinds == i).any()] if data.has_media else []
    out = Path(path)
    out.write_bytes(plan_figure(rows, best=best, max_drop=max_drop, marked=marked or [], kinds=kinds,
                                has_media=data.has_media, source=data.source))
    logger.info("wrote %s", out)
    return out
