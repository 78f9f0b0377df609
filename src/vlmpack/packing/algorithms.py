"""Offline packing algorithms: pure functions from a length array to a :class:`PackPlan`.

Every algorithm has the signature ``algo(lengths, capacity, *, <constraints>, order=None,
seed=None) -> PackPlan`` and honours every constraint exactly:

* ``capacity`` (``seq_len``): tokens per pack, after each length is rounded up to
  ``pad_to_multiple_of`` (context/tensor-parallel layouts);
* ``max_samples_per_pack``;
* ``max_media_per_pack`` / ``max_media_tokens_per_pack`` over ``media_counts`` / ``media_tokens``;
* ``group_by_kind``: packs never mix ``kinds`` (0 text, 1 image, 2 video); each kind is packed on
  its own, as the WDS packer of the seeds does.

A sample that fits no pack (longer than the capacity, or alone over a media budget) goes to
``PackPlan.overlong``; nothing is dropped silently.

Pack order: ``"shuffle"`` (a permutation from ``numpy.random.Generator(PCG64(seed))``),
``"input"`` (by the smallest sample index of each pack), or ``"creation"`` (the order in which
the algorithm opened the packs). The same input and seed give byte-identical arrays anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from vlmpack.errors import ConfigError
from vlmpack.packing import _bfd, _fast, _kernels
from vlmpack.packing.plan import PackPlan

logger = logging.getLogger(__name__)

ORDERS = ("shuffle", "input", "creation")
DEFAULT_WINDOW = 100


def _as_int_array(a: object, name: str, n: int | None, *, widen: bool = True) -> np.ndarray:
    """``a`` checked (1-D, integer, ``n`` entries, no negative value) and, with ``widen``, as int64
    (a copy unless it is int64 already; without, as it came: an array only checked). Raises
    :class:`ConfigError`."""
    arr = np.asarray(a)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ConfigError(
            f"{name} must be a 1-D integer array, got dtype {arr.dtype} shape {arr.shape}; "
            "pass e.g. np.asarray(values, dtype=np.int64)"
        )
    if n is not None and arr.shape[0] != n:
        raise ConfigError(f"{name} has {arr.shape[0]} entries but lengths has {n}; pass one value per sample")
    if widen:
        arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ConfigError(f"{name} has a negative value at index {int(np.argmin(arr))}; counts must be >= 0")
    return arr


def _limit(value: int | None, name: str, minimum: int) -> np.int64:
    if value is None:
        return _bfd.UNSET
    if int(value) < minimum:
        raise ConfigError(f"{name}={value} is invalid; use an integer >= {minimum} or None for no limit")
    return np.int64(value)


def _window_kernel(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, window):
    k = int(window) if window is not None else DEFAULT_WINDOW
    return _kernels.window(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, k)


#: The kernels of the algorithms other than ``bfd`` (which has its own fast and constrained paths in
#: :func:`_run`): name -> (items longest first?, ``kernel(eff, media_counts, media_tokens, items,
#: cap, max_n, max_mc, max_mt, n, window) -> (pack_of int32 [n], number of packs)``, a pure
#: function, numba-compiled in :mod:`vlmpack.packing._kernels`). A new algorithm is one kernel,
#: one line here and one ``_make`` + :data:`ALGORITHMS` line below (CONTRIBUTING.md).
KERNELS: dict[str, tuple[bool, Callable]] = {
    "ffd": (True, lambda eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, window:
            _kernels.first_fit_tree(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n)),
    "greedy_knapsack": (True, lambda eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, window:
                        _kernels.greedy_knapsack(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n)),
    "next_fit": (False, lambda eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, window:
                 _kernels.next_fit(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n)),
    "first_fit": (False, lambda eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, window:
                  _kernels.next_fit(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n)),
    "window": (False, _window_kernel),
}


def _run(
    kind: str,
    lengths: object,
    capacity: int,
    *,
    max_samples_per_pack: int | None = None,
    media_counts: object | None = None,
    media_tokens: object | None = None,
    kinds: object | None = None,
    max_media_per_pack: int | None = None,
    max_media_tokens_per_pack: int | None = None,
    group_by_kind: bool = False,
    pad_to_multiple_of: int | None = None,
    order: str | None = None,
    seed: int | None = None,
    window: int | None = None,
) -> PackPlan:
    eff = _as_int_array(lengths, "lengths", None)
    n = eff.shape[0]
    if int(capacity) < 1:
        raise ConfigError(f"capacity (seq_len) = {capacity} is invalid; use a positive token count")
    cap = int(capacity)
    if pad_to_multiple_of is not None:
        if int(pad_to_multiple_of) < 1:
            raise ConfigError(f"pad_to_multiple_of={pad_to_multiple_of} is invalid; use an integer >= 1")
        m = int(pad_to_multiple_of)
        if m > 1:
            eff = -(-eff // m) * m
    max_n = _limit(max_samples_per_pack, "max_samples_per_pack", 1)
    max_mc = _limit(max_media_per_pack, "max_media_per_pack", 0)
    max_mt = _limit(max_media_tokens_per_pack, "max_media_tokens_per_pack", 0)
    # widened (an int64 copy for the kernels) only where a limit uses them
    mc = None if media_counts is None else _as_int_array(media_counts, "media_counts", n, widen=max_mc != _bfd.UNSET)
    mt = None if media_tokens is None else _as_int_array(media_tokens, "media_tokens", n, widen=max_mt != _bfd.UNSET)
    if max_mc != _bfd.UNSET and mc is None:
        raise ConfigError("max_media_per_pack needs media_counts (one media count per sample)")
    if max_mt != _bfd.UNSET and mt is None:
        raise ConfigError("max_media_tokens_per_pack needs media_tokens (one media-token count per sample)")
    if order is None:
        order = "creation" if seed is None else "shuffle"
    if order not in ORDERS:
        raise ConfigError(f"order={order!r} is unknown; use one of {ORDERS}")
    if window is not None and int(window) < 1:
        raise ConfigError(f"window={window} is invalid; use a window size >= 1")
    groups: list[np.ndarray | None] = [None]
    if group_by_kind:
        if kinds is None:
            raise ConfigError("group_by_kind=True needs kinds (int8 per sample: 0 text, 1 image, 2 video)")
        kd = _as_int_array(kinds, "kinds", n)
        groups = [kd == k for k in np.unique(kd)]

    if kind == "bfd" and max_mc == _bfd.UNSET and max_mt == _bfd.UNSET and not group_by_kind:
        arrays = _fast.plan(np.ascontiguousarray(eff), cap, max_n, order, seed)
        return PackPlan(*arrays, capacity=cap, algorithm=kind)
    packable = eff <= cap
    if mc is not None and max_mc != _bfd.UNSET:
        packable &= mc <= max_mc
    if mt is not None and max_mt != _bfd.UNSET:
        packable &= mt <= max_mt
    overlong = np.flatnonzero(~packable).astype(np.int64)
    media_limited = max_mc != _bfd.UNSET or max_mt != _bfd.UNSET
    zeros = None
    if kind != "bfd" or media_limited:
        zeros = np.zeros(n, dtype=np.int64)
    mc_k = mc if (mc is not None and max_mc != _bfd.UNSET) else zeros
    mt_k = mt if (mt is not None and max_mt != _bfd.UNSET) else zeros

    pack_of = np.full(n, -1, dtype=np.int32)
    npacks = 0
    for g in groups:
        mask = packable if g is None else (packable & g)
        if kind == "bfd" or KERNELS[kind][0]:
            items = _bfd.sort_decreasing(eff, mask, cap)
        else:
            items = np.flatnonzero(mask).astype(np.int32)
        if kind == "bfd" and max_mc == _bfd.UNSET and max_mt == _bfd.UNSET:
            po, p = _bfd.bfd_capped(eff, items, cap, max_n, n)
        elif kind == "bfd":
            po, p = _bfd.bfd_constrained(eff, mc_k, mt_k, items, cap, max_n, max_mc, max_mt, n, _bfd.DEBRUIJN_TABLE)
        else:
            po, p = KERNELS[kind][1](eff, mc_k, mt_k, items, cap, max_n, max_mc, max_mt, n, window)
        if g is None:
            pack_of = po
        else:
            sel = items
            pack_of[sel] = po[sel] + npacks
        npacks += int(p)
    return _finish(pack_of, npacks, eff, overlong, cap, kind, order, seed)


def _finish(
    pack_of: np.ndarray, npacks: int, eff: np.ndarray, overlong: np.ndarray, cap: int, name: str,
    order: str, seed: int | None,
) -> PackPlan:
    def first_member() -> np.ndarray:  # smallest sample index of each pack
        offsets, ordr = _kernels.csr(pack_of, npacks)
        return ordr[offsets[:-1]]

    new_id = _kernels.pack_renumbering(npacks, order, seed, first_member)
    pack_ids, tokens = _kernels.relabel(pack_of, new_id, eff, npacks)
    offsets, ordr = _kernels.csr(pack_ids, npacks)
    return PackPlan(pack_ids, offsets, ordr, overlong, tokens, capacity=cap, algorithm=name)


def _make(kind: str, doc: str) -> Callable[..., PackPlan]:
    def algo(lengths: object, capacity: int, **constraints: object) -> PackPlan:
        return _run(kind, lengths, capacity, **constraints)  # type: ignore[arg-type]

    algo.__name__ = algo.__qualname__ = kind
    algo.__doc__ = doc
    return algo


_COMMON = """

    Args:
        lengths: int ``[n]`` token counts (>= 0).
        capacity: tokens per pack ``L`` (> 0).
        max_samples_per_pack, max_media_per_pack, max_media_tokens_per_pack: limits per pack.
        media_counts, media_tokens: int ``[n]`` per-sample media count / media (vision) tokens.
        kinds: int8 ``[n]`` 0 text, 1 image, 2 video; with ``group_by_kind`` packs stay homogeneous.
        pad_to_multiple_of: round every length up to a multiple of this before packing.
        order: "shuffle", "input" or "creation" (default: "shuffle" when a seed is given, else
            "creation"); seed: PCG64 seed of the shuffle.
    Returns: a :class:`PackPlan`. Raises: ConfigError for invalid arrays or options.
    """

bfd = _make(
    "bfd",
    "Best-Fit-Decreasing plus a documented refinement. Exact BFD: each sample, longest first (ties by "
    "index), goes to the feasible pack with the least residual capacity; O(n + L) via a "
    "capacity-indexed bitset. Refinement (token capacity and sample cap only, not with media budgets "
    "or ``group_by_kind``): the exact-fill pass of ``_exact`` (pack-by-pack decreasing fill aiming at "
    "residual 0; with a cap it spreads the small samples), then, while above the lower bound "
    "max(L2, ceil(n/K)), the tail repair of ``_tail`` (the last packs re-packed consuming sizes "
    "evenly) and exact BFD (stopped once its dead residuals prove it cannot need fewer packs; kept "
    "when it finishes); with a cap the small-sample spreading BFD is also tried. So the result never "
    "has more packs than plain BFD and is deterministic." + _COMMON,
)
ffd = _make("ffd", "First-Fit-Decreasing: longest first, each to the lowest-numbered feasible pack "
            "(max-segment tree, O(n log n))." + _COMMON)
greedy_knapsack = _make(
    "greedy_knapsack",
    "NeMo Automodel neat packing (``neat_packing.greedy_knapsack``): longest first, each to the least-"
    "filled pack (ties by pack index) if it fits, else a new pack; a worst-fit-decreasing." + _COMMON,
)
next_fit = _make("next_fit", "Next-Fit in input order: one open pack, closed when the next sample does "
                 "not fit." + _COMMON)
first_fit = _make(
    "first_fit",
    "lmms-engine ``first_fit`` (``BaseDataset._pack_by_first_fit``): input order, the current pack is "
    "closed when the next sample does not fit; the same packs as ``next_fit``, kept under lmms-engine's "
    "name for migration." + _COMMON,
)
window = _make(
    "window",
    "lmms-engine ``window_k`` (``BaseDataset._pack_by_window``): a window of the ``window`` (default 100) "
    "earliest unconsumed samples; each pack takes, in arrival order, every window sample that still "
    "fits, then the window is refilled." + _COMMON,
)

#: Registry of the offline algorithms by name.
ALGORITHMS: dict[str, Callable[..., PackPlan]] = {
    "bfd": bfd,
    "ffd": ffd,
    "greedy_knapsack": greedy_knapsack,
    "first_fit": first_fit,
    "window": window,
    "next_fit": next_fit,
}


def plan_packs(
    lengths: object,
    capacity: int,
    *,
    algorithm: str = "bfd",
    max_samples_per_pack: int | None = None,
    media_counts: object | None = None,
    media_tokens: object | None = None,
    kinds: object | None = None,
    max_media_per_pack: int | None = None,
    max_media_tokens_per_pack: int | None = None,
    group_by_kind: bool = False,
    pad_to_multiple_of: int | None = None,
    order: str = "shuffle",
    seed: int = 0,
    window: int | None = None,
) -> PackPlan:
    """Plan the packs of a dataset with the named algorithm (see :data:`ALGORITHMS`).

    Args are those of the algorithms (module docstring); ``window`` is the window size of the
    ``window`` algorithm (ignored by the others). Defaults: ``bfd``, seeded shuffle with seed 0.

    Returns: a :class:`PackPlan` (pack_ids int64 [n], offsets int64 [P+1], order int64, overlong,
    pack_tokens int64 [P]).

    Raises:
        ConfigError: unknown algorithm or order, invalid limits, mismatched or negative arrays.
    """
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm {algorithm!r} is unknown; use one of {sorted(ALGORITHMS)}")
    plan = _run(
        algorithm, lengths, capacity, max_samples_per_pack=max_samples_per_pack,
        media_counts=media_counts, media_tokens=media_tokens, kinds=kinds,
        max_media_per_pack=max_media_per_pack, max_media_tokens_per_pack=max_media_tokens_per_pack,
        group_by_kind=group_by_kind, pad_to_multiple_of=pad_to_multiple_of, order=order, seed=seed,
        window=window,
    )
    logger.debug("%s: %d samples -> %d packs, %d overlong", algorithm, plan.num_samples, plan.num_packs,
                 plan.overlong.shape[0])
    return plan
