"""Figures of ``vlmpack plan --plot`` and of ``OUT/report.html`` (matplotlib, no pyplot state).

Every public function returns PNG bytes (or draws into a given ``Axes``); nothing here reads or
writes files. Token counts are tokens of the model's tokenizer (``num_tokens`` of the manifest),
``L`` is the pack capacity in tokens (``--seq-len``). Kinds are the manifest's ``kind`` codes
0/1/2/3 = text/image/video/audio (``records.SAMPLE_KINDS``), drawn in the same colours in every figure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from vlmpack.pack.figure_layout import EDGE, FIGURE_RC, png_bytes, text_inches
from vlmpack.pack.media_tokens import tokens_by_kind
from vlmpack.records import SAMPLE_KINDS

#: One colour per sample kind of the registry (text, image, video, audio, ...: ``records.SAMPLE_KINDS``), in order.
_KIND_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
KIND_COLORS = {**{k: _KIND_PALETTE[i % len(_KIND_PALETTE)] for i, k in enumerate(SAMPLE_KINDS)}, "all": "black"}
BEST_COLOR = "tab:purple"


def tokens_label(x: float, _pos: Any = None) -> str:
    """A token count as a short tick label: 512, 1k, 1.5k, 128k, 2M."""
    for div, unit in ((1 << 20, "M"), (1024, "k")):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.4g}"


def _decimal_label(y: float, _pos: Any = None) -> str:
    """A count as a short decimal label: 200, 5000, 20k, 1M."""
    return f"{y / 1e6:g}M" if y >= 1e6 else f"{y / 1e3:g}k" if y >= 1e4 else f"{y:g}"


def _log2_x(ax, values: Sequence[int]) -> None:
    """A log2 L axis with ticks at the powers of two in ``values``' range, labelled 1k, 2k, ..."""
    ax.set_xscale("log", base=2)
    lo, hi = min(values), max(values)
    ticks = [1 << k for k in range(int(np.floor(np.log2(lo))), int(np.ceil(np.log2(hi))) + 1)]
    step = max(1, len(ticks) // 9)
    ax.set_xticks(ticks[::step])
    ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(lo / 1.15, hi * 1.15)


def _plain_log_y(ax) -> None:
    """Log y axis labelled with plain numbers at 1, 2, 5 x 10^k (no 10^k notation)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_decimal_label))
    ax.yaxis.set_minor_formatter(NullFormatter())


# ---------------------------------------------------------------------------------------- plan
def plan_figure(rows: list[dict[str, Any]], *, best: dict[str, Any] | None, max_drop: float, marked: list[int],
                kinds: list[str], has_media: bool, source: str = "") -> bytes:
    """PNG of a sweep of :func:`vlmpack.pack.preflight.plan_row` rows against L (six panels):
    packs (= optimizer steps per epoch at batch 1) with the lower bound L2; utilization; samples
    and tokens dropped as overlong, per kind; samples per pack p50/p99; media tokens per pack
    p50/p99 per kind. ``best`` (the recommended row) is marked in every panel, ``marked`` (the
    user's L) with dotted lines; ``kinds`` lists the kinds present (empty: no kind information)."""
    with matplotlib.rc_context(FIGURE_RC):
        return _plan_figure(rows, best=best, max_drop=max_drop, marked=marked, kinds=kinds, has_media=has_media,
                            source=source)


def _plan_figure(rows: list[dict[str, Any]], *, best: dict[str, Any] | None, max_drop: float, marked: list[int],
                 kinds: list[str], has_media: bool, source: str) -> bytes:
    rows = sorted(rows, key=lambda r: r["seq_len"])
    L = np.array([r["seq_len"] for r in rows], dtype=float)
    col = lambda key: np.array([r[key] for r in rows], dtype=float)  # noqa: E731
    n = rows[0]["samples"] if rows else 0
    fig = Figure(figsize=(15, 8.2))
    axes = fig.subplots(2, 3).ravel()
    ax = axes[0]
    ax.plot(L, col("packs"), "o-", color="black", ms=3, label="packs (the plan)")
    ax.plot(L, col("L2"), "--", color="tab:gray", label="lower bound L2")
    _plain_log_y(ax)
    ax.set(ylabel="packs per epoch", title="Packs = optimizer steps / epoch at batch 1")
    if best is not None:
        ax.annotate(f"{best['packs']:,} packs", xy=(best["seq_len"], best["packs"]), xytext=(10, 12),
                    textcoords="offset points", color=BEST_COLOR, fontsize=9)
    ax = axes[1]
    ax.plot(L, 100 * col("utilization"), "o-", color="black", ms=3)
    lo = float(np.min(100 * col("utilization"))) if rows else 0.0
    bottom = max(0.0, lo - 0.1 * (100 - lo) - 0.5)
    ax.set(ylabel="tokens / (packs x L)  [%]", title="Utilization", ylim=(bottom, 100 + 0.03 * (100 - bottom)))
    ax.set_yticks([t for t in ax.get_yticks() if bottom <= t <= 100])
    split = kinds if len(kinds) > 1 else []
    for ax, key, ylabel, title in (
            (axes[2], "overlong", "samples dropped [% of all samples]", "Samples lost to overlong"),
            (axes[3], "overlong_tokens", "tokens dropped [% of all tokens]", "Tokens lost to overlong")):
        total = col(key + "_pct")
        ax.plot(L, total, "o-", color="black", ms=3, label="all")
        denom = n if key == "overlong" else (rows[0]["tokens"] if rows else 0)
        for k in split:
            ax.plot(L, 100 * np.array([r[key + "_by_kind"][k] for r in rows]) / max(denom, 1), "-",
                    color=KIND_COLORS[k], label=k)
        # linear below one sample (key "overlong") or 0.001 % of the tokens, log above; ticks 0 and 10^k
        floor = 100 / max(denom, 1) if key == "overlong" else 1e-3
        top = max(float(total.max()) if rows else 1.0, 100 * max_drop if key == "overlong" else 0.0, floor) * 2
        ax.set_yscale("symlog", linthresh=floor, linscale=0.4)
        ax.set_yticks([0.0] + [10.0**k for k in range(int(np.ceil(np.log10(floor))), int(np.ceil(np.log10(top))))])
        ax.set_ylim(0, top)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set(ylabel=ylabel, title=title)
    axes[2].axhline(100 * max_drop, color=BEST_COLOR, linestyle=":", linewidth=1,
                    label=f"--max-drop {100 * max_drop:g} %")
    ax = axes[4]
    ax.plot(L, col("samples_per_pack_p50"), "o-", color="black", ms=3, label="p50")
    ax.plot(L, col("samples_per_pack_p99"), "s--", color="black", ms=3, label="p99")
    _plain_log_y(ax)
    ax.set(ylabel="samples per pack", title="Samples per pack (all kinds)")
    ax = axes[5]
    if has_media and rows:
        for k in [k for k in kinds if k != "text"] or ["image"]:
            for p, style in (("p50", "o-"), ("p99", "s--")):
                y = np.array([r["media_tokens_per_pack_by_kind"][k][p] for r in rows], dtype=float)
                ax.plot(L, np.where(y > 0, y, np.nan), style, color=KIND_COLORS[k], ms=3, label=f"{k} {p}")
        ax.plot(L, L, ":", color="tab:gray", label="L (whole pack)")
        _plain_log_y(ax)
        ax.set(ylabel="media tokens per pack", title="Media tokens per pack, by media kind")
    else:
        ax.text(0.5, 0.5, "no media counts in this input\n(a lengths file)", ha="center", va="center",
                transform=ax.transAxes)
        ax.set(title="Media tokens per pack")
        ax.set_axis_off()
    for ax in axes[:5] if not (has_media and rows) else axes:
        if rows:
            _log2_x(ax, L)
        ax.set_xlabel("L = --seq-len [tokens]")
        ax.grid(True, which="major", alpha=0.3)
        for m in marked:
            ax.axvline(m, color="tab:gray", linestyle=":", linewidth=1)
        if best is not None:
            ax.axvline(best["seq_len"], color=BEST_COLOR, linewidth=1.5, alpha=0.8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    if best is not None:
        axes[2].annotate(f"recommended\nL = {best['seq_len']:,}", xy=(best["seq_len"], 100 * max_drop),
                         xytext=(8, 30), textcoords="offset points", color=BEST_COLOR, fontsize=9,
                         arrowprops={"arrowstyle": "->", "color": BEST_COLOR})
    what = (f"recommended L = {best['seq_len']:,} (smallest L drawn with < {100 * max_drop:g} % of samples dropped)"
            if best is not None else f"no L drawn drops < {100 * max_drop:g} % of the samples")
    mark = f"; dotted grey: your --seq-len {', '.join(map(str, marked))}" if marked else ""
    fig.suptitle(f"vlmpack plan: {n:,} samples of {source}\n{what}{mark}", fontsize=11)
    return png_bytes(fig)


# ---------------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class ReportData:
    """What the report figures draw; every array int64 unless said.

    ``lengths``/``kinds``/``media_tokens`` ``[n]`` per manifest sample (tokens; kind 0/1/2);
    ``overlong`` the indices dropped as overlong; ``offsets`` ``[P+1]`` and ``order`` the plan's
    CSR; ``pack_tokens`` ``[P]`` tokens per pack; ``seq_len`` L in tokens; ``reasons`` reason code
    -> records (overlong included); ``sources`` the report's per-input-file dicts; ``kind_tokens``
    the manifest's per-kind token columns (:func:`vlmpack.pack.media_tokens.token_columns`: column
    name -> ``[n]`` the part of ``media_tokens`` of each sample's items of that kind, None for one
    a manifest lacks; see :func:`~vlmpack.pack.media_tokens.tokens_by_kind`)."""

    lengths: np.ndarray
    kinds: np.ndarray
    media_tokens: np.ndarray
    overlong: np.ndarray
    offsets: np.ndarray
    order: np.ndarray
    pack_tokens: np.ndarray
    seq_len: int
    reasons: dict[str, int] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    kind_tokens: dict[str, np.ndarray | None] = field(default_factory=dict)

    def kinds_present(self) -> list[tuple[int, str]]:
        return [(i, k) for i, k in enumerate(SAMPLE_KINDS) if (self.kinds == i).any()]

    def per_pack(self, weights: np.ndarray) -> np.ndarray:
        """Sum of per-sample ``weights`` over each pack: float64 ``[P]``."""
        seg = np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))
        return np.bincount(seg, weights=weights[self.order].astype(float), minlength=len(self.offsets) - 1)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set(xticks=[], yticks=[])


def _log_bins(values: np.ndarray, n: int = 50) -> np.ndarray:
    lo, hi = max(1.0, float(values.min())), max(2.0, float(values.max()))
    return np.geomspace(lo, hi * 1.001, n + 1)


def draw_lengths(ax, d: ReportData) -> None:
    """Sample-length histogram per kind on a log x axis, L marked, the overlong share labelled."""
    if not d.lengths.size:
        return _empty(ax, "no sample counted")
    bins = _log_bins(np.append(d.lengths, d.seq_len))
    for i, k in d.kinds_present():
        ax.hist(d.lengths[d.kinds == i], bins=bins, histtype="step", linewidth=1.5, color=KIND_COLORS[k],
                label=f"{k} ({int((d.kinds == i).sum()):,})")
    ax.axvline(d.seq_len, color="tab:red", linewidth=1.5)
    ax.axvspan(d.seq_len, bins[-1], color="tab:red", alpha=0.08)
    n, tok = d.overlong.size, int(d.lengths[d.overlong].sum())
    ax.text(d.seq_len / 1.12, 0.96, f"L = {d.seq_len:,}\noverlong: {n:,} samples ({100 * n / d.lengths.size:.2f} %)"
            f"\n{tok:,} tokens ({100 * tok / max(1, int(d.lengths.sum())):.2f} %)",
            transform=ax.get_xaxis_transform(), ha="right", va="top", color="tab:red", fontsize=9,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
    ax.set(xscale="log", xlabel="tokens per sample", ylabel="samples per bin", title="Sample lengths by kind")
    _plain_log_y(ax)
    ax.xaxis.set_major_formatter(FuncFormatter(_decimal_label))
    ax.legend(fontsize=8, loc="upper left")


def _int_bins(values: np.ndarray, n: int = 40) -> np.ndarray:
    """Log-spaced bin edges at half-integers: no integer is split and no bin falls between two."""
    return np.unique(np.round(np.geomspace(1, max(2.0, float(values.max()) + 1), n))) - 0.5


def draw_samples_per_pack(ax, d: ReportData) -> None:
    """Histogram of samples per pack (log-spaced integer bins), p50/p99 marked."""
    spp = np.diff(d.offsets)
    if not spp.size:
        return _empty(ax, "no pack")
    ax.hist(spp, bins=_int_bins(spp), color="tab:gray", edgecolor="white", linewidth=0.5)
    for p, ls in ((50, "-"), (99, "--")):
        v = float(np.percentile(spp, p))
        ax.axvline(v, color="black", linestyle=ls, linewidth=1, label=f"p{p} = {v:.0f}")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xscale="log", xlabel="samples per pack", ylabel="packs", title=f"Samples per pack ({spp.size:,} packs)")
    ax.xaxis.set_major_formatter(FuncFormatter(_decimal_label))
    ax.legend(fontsize=8)


def draw_media_per_pack(ax, d: ReportData) -> None:
    """Histogram of media tokens per pack, per media kind (a sample's image tokens as image, its
    video tokens as video), over the packs that hold that kind (0..L, linear bins); the packs
    without any media are counted in the title."""
    if len(d.offsets) < 2:
        return _empty(ax, "no media in the packs")
    bins, drawn = np.linspace(0, d.seq_len, 41), 0
    for k, tokens in tokens_by_kind(d.media_tokens, d.kinds, d.kind_tokens).items():
        per = d.per_pack(tokens)
        per = per[per > 0]
        if not per.size:  # no item of this kind in any pack
            continue
        drawn += 1
        ax.hist(per, bins=bins, histtype="step", linewidth=1.5, color=KIND_COLORS[k],
                label=f"{k}: {per.size:,} packs, p50 {np.percentile(per, 50):,.0f}, p99 {np.percentile(per, 99):,.0f}")
    if not drawn:
        return _empty(ax, "no media in the packs")
    none = int((d.per_pack(d.media_tokens) == 0).sum())
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel=f"media tokens per pack (L = {d.seq_len:,})", ylabel="packs", xlim=(0, d.seq_len),
           title=f"Media tokens per pack, over the packs holding that kind\n({none:,} packs hold no media)")
    ax.legend(fontsize=8)


def draw_fill(ax, d: ReportData) -> None:
    """Pack fill as the unused tokens ``L - tokens`` of every pack, most unused first (log rank
    axis, symlog tokens axis): readable when almost every pack is full, where a fill histogram is
    one bar at 1.0."""
    if not d.pack_tokens.size:
        return _empty(ax, "no pack")
    free = np.sort(d.seq_len - d.pack_tokens)[::-1]
    x = np.arange(1, free.size + 1)
    ax.fill_between(x, free, step="mid", color="tab:gray", alpha=0.5)
    ax.plot(x, free, color="black", drawstyle="steps-mid", linewidth=1)
    full = int((free == 0).sum())
    util = 100 * d.pack_tokens.sum() / (d.pack_tokens.size * d.seq_len)
    ax.axhline(d.seq_len, color="tab:red", linestyle=":", linewidth=1)
    ax.text(free.size, d.seq_len * 1.15, f"L = {d.seq_len:,} (an empty pack)", color="tab:red", fontsize=8,
            ha="right", va="bottom")
    ax.set_yscale("symlog", linthresh=1, linscale=0.5)
    ax.yaxis.set_major_formatter(FuncFormatter(_decimal_label))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_decimal_label))
    ax.set(xlabel="pack rank, most unused first", ylabel="unused tokens = L - pack tokens",
           title=f"Pack fill: {full:,} of {free.size:,} packs exactly full\n{int(free.sum()):,} tokens unused "
                 f"({util:.2f} % utilization)", ylim=(0, d.seq_len * 4), xlim=(0.8, free.size * 1.2))


def _barh(ax, labels: list[str], values: list[int], notes: list[str], xlabel: str, title: str) -> None:
    """Horizontal bars on a log x axis, largest first, each with ``notes`` after its end: the axis
    reaches far enough right for the longest note after the longest bar (the axes' width
    estimated from the figure's width less the labels' and the margins)."""
    y = np.arange(len(labels))[::-1]
    ax.barh(y, np.maximum(values, 0.8), color="tab:gray")  # a zero stays at the log axis' left edge
    ax.set_yticks(y, labels)
    ax.tick_params(axis="y", labelsize=8)
    for yi, v, note in zip(y, values, notes):
        ax.text(max(v, 1), yi, f" {note}", va="center", fontsize=8)
    axes_w = ax.get_figure().get_size_inches()[0] - max(text_inches(s, 8)[0] for s in labels) - 3 * EDGE - 0.1
    share = min(0.6, (max(text_inches(f" {s}", 8)[0] for s in notes) + 0.05) / max(axes_w, 1.0))
    lo, top = np.log10(0.8), np.log10(max(values + [1]))
    hi = max(top + np.log10(8), (top - share * lo) / (1 - share))  # (hi - top) / (hi - lo) >= share
    ax.set(xscale="log", xlabel=xlabel, title=title, xlim=(0.8, 10**hi), ylim=(-0.7, len(labels) - 0.3))
    ax.xaxis.set_major_formatter(FuncFormatter(_decimal_label))


def draw_rejects(ax, d: ReportData) -> None:
    """Records not packed, by reason code (overlong included), as log-scaled horizontal bars."""
    items = sorted(((k, v) for k, v in d.reasons.items() if v), key=lambda kv: (-kv[1], kv[0]))
    if not items:
        return _empty(ax, "no record rejected or dropped")
    _barh(ax, [k for k, _ in items], [v for _, v in items], [f"{v:,}" for _, v in items], "records",
          f"Records not packed, by reason ({sum(v for _, v in items):,})")


def draw_sources(ax, d: ReportData, top: int = 12) -> None:
    """Packed tokens per input file (the ``top`` largest), each labelled with its records read,
    packed, rejected and dropped overlong."""
    src = sorted(d.sources, key=lambda s: -s["tokens"])[:top]
    if not src:
        return _empty(ax, "no input")
    if len(src) <= 4:  # room for three lines per file
        labels = [f"{s['file'].rsplit('/', 1)[-1][-32:]}\nread {s['records_read']:,}, packed {s['samples_packed']:,}"
                  f"\nrejected {s['rejected']:,}, overlong {s['dropped_overlong']:,}" for s in src]
    else:
        labels = [f"{s['file'].rsplit('/', 1)[-1][-28:]} ({s['samples_packed']:,} of {s['records_read']:,} packed)"
                  for s in src]
    more = f" (top {top} of {len(d.sources)})" if len(d.sources) > top else ""
    _barh(ax, labels, [s["tokens"] for s in src], [f"{s['tokens']:,}" for s in src], "tokens packed",
          f"Tokens packed per input file{more}")


#: The report's figures in order: (name, caption, drawing function).
REPORT_FIGURES: tuple[tuple[str, str, Callable[[Any, ReportData], None]], ...] = (
    ("lengths", "Sample lengths per kind (log axes); red: L and the overlong share", draw_lengths),
    ("samples_per_pack", "Samples per pack", draw_samples_per_pack),
    ("media_tokens_per_pack", "Media tokens per pack, per media kind", draw_media_per_pack),
    ("pack_fill", "Pack fill, every pack sorted", draw_fill),
    ("rejects", "Records not packed, by reason", draw_rejects),
    ("sources", "Tokens packed per input file", draw_sources),
)


def report_pngs(d: ReportData) -> dict[str, bytes]:
    """One PNG per entry of :data:`REPORT_FIGURES`, by name."""
    out = {}
    with matplotlib.rc_context(FIGURE_RC):
        for name, _caption, draw in REPORT_FIGURES:
            fig = Figure(figsize=(7.5, 4.2))
            draw(fig.subplots(), d)
            out[name] = png_bytes(fig, tight=False)
    return out


