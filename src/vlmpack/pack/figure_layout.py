"""Layout and PNG output of vlmpack's matplotlib figures (:mod:`vlmpack.pack.figures`).

``tight_layout`` finds a figure's margins by drawing it once before ``savefig`` draws it again;
:func:`fit_margins` computes them from the sizes of the texts alone (matplotlib's own font
metrics, ``matplotlib.textpath.text_to_path``), which halves the drawing of a one-Axes figure.
Sizes are inches unless said; font sizes points (1/72 inch).
"""

from __future__ import annotations

import io

import matplotlib
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path
from matplotlib.ticker import LogLocator

DPI = 100

#: Set while a figure is built: titles at the top of their axes (matplotlib's default ``None``
#: places them by measuring every x tick label first, the same place when no axis has ticks on top).
FIGURE_RC = {"axes.titley": 1.0}
EDGE = 0.15  # inches between the figure's edge and its outermost text (tight_layout's pad: 1.08 x 10 pt)


def png_bytes(fig: Figure, *, tight: bool = True) -> bytes:
    """The figure as PNG bytes. Log axes get minor ticks at 2 and 5 x 10^k only (matplotlib's
    2..9 make one Tick object each: most of the drawing time). ``tight``: laid out by
    ``tight_layout`` (a second drawing pass); otherwise by :func:`fit_margins`."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log" and isinstance(axis.get_minor_locator(), LogLocator):
                axis.set_minor_locator(LogLocator(base=axis.get_transform().base, subs=(2.0, 5.0)))
    if tight:
        fig.tight_layout()
    else:
        fit_margins(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def text_inches(text: str, size: float) -> tuple[float, float]:
    """Width and height in inches of a plain (multi-line) text at ``size`` points as matplotlib's
    ``Text`` lays it out: the widest line; a line as tall as "lp" (ascender to descender), further
    lines 1.2 x that apart."""
    prop = FontProperties(size=size)
    width = max(text_to_path.get_text_width_height_descent(line, prop, ismath=False)[0] for line in text.split("\n"))
    _, lp_h, lp_d = text_to_path.get_text_width_height_descent("lp", prop, ismath=False)
    return width / 72, (lp_h + 1.2 * (lp_h - lp_d) * text.count("\n")) / 72


def _tick_labels(axis) -> list[tuple[float, float, float]]:
    """``(position, width, height)`` of each major tick label of ``axis`` in its view: the position
    as a fraction of the axis (after its scale), sizes in inches; no Tick object is made."""
    lo, hi = axis.get_view_interval()
    t = axis.get_transform()
    t_lo, t_hi = (float(v) for v in t.transform([lo, hi]))
    locs = [x for x in axis.get_majorticklocs() if min(lo, hi) <= x <= max(lo, hi)]
    size = axis.get_tick_params().get("labelsize", matplotlib.rcParams[f"{axis.axis_name}tick.labelsize"])
    size = FontProperties(size=size).get_size_in_points()
    return [((float(t.transform([x])[0]) - t_lo) / (t_hi - t_lo), *text_inches(label, size))
            for x, label in zip(locs, axis.get_major_formatter().format_ticks(locs)) if label]


def fit_margins(fig: Figure) -> None:
    """Margins of a one-Axes figure from the sizes of its title, axis labels and tick labels,
    computed from the texts alone (``tight_layout`` draws the whole figure once more to find
    them; these come within a few pixels of its margins on the report's figures)."""
    (ax,) = fig.axes
    rc = matplotlib.rcParams
    w, h = fig.get_size_inches()
    tick = {a: (rc[f"{a}tick.major.size"] + rc[f"{a}tick.major.pad"]) / 72 for a in "xy"}
    yticks, xticks = _tick_labels(ax.yaxis), _tick_labels(ax.xaxis)
    label_h = {a: text_inches(lab.get_text(), lab.get_fontsize())[1] + rc["axes.labelpad"] / 72 if lab.get_text()
               else 0.0 for a, lab in (("x", ax.xaxis.label), ("y", ax.yaxis.label))}
    title_h = (text_inches(ax.title.get_text(), ax.title.get_fontsize())[1] + rc["axes.titlepad"] / 72
               if ax.title.get_text() else 0.0)
    left = EDGE + label_h["y"] + tick["y"] + max((tw for _, tw, _ in yticks), default=0.0)
    bottom = EDGE + label_h["x"] + tick["x"] + max((th for _, _, th in xticks), default=0.0)
    span = w - left - EDGE  # the axes' width, inches, before the right edge's own overflow
    right = EDGE + max([tw / 2 - (1 - pos) * span for pos, tw, _ in xticks] + [0.0])
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - (EDGE + title_h) / h)
