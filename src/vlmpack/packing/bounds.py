"""Lower bounds on the number of packs (bin-packing bounds L1 and L2 of Martello & Toth).

Source: S. Martello, P. Toth, "Lower bounds and reduction procedures for the bin packing
problem", Discrete Applied Mathematics 28 (1990) 59-70. For capacity ``L`` and
``0 <= k <= L/2`` let ``J1 = {s > L-k}``, ``J2 = {L-k >= s > L/2}``, ``J3 = {L/2 >= s >= k}``;
``L(k) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| L - sum J2)) / L))`` and ``L2 = max_k L(k)``.
Both bounds are computed over the histogram of lengths in O(n + L).
"""

from __future__ import annotations

import numpy as np


def _packable(lengths: np.ndarray, capacity: int) -> np.ndarray:
    a = np.asarray(lengths, dtype=np.int64)
    return a[a <= capacity]


def lower_bound_l1(lengths: np.ndarray, capacity: int) -> int:
    """``ceil(sum / L)`` over the samples that fit (``<= capacity``); int."""
    a = _packable(lengths, capacity)
    return int(-(-int(a.sum()) // int(capacity)))


def lower_bound_l2(lengths: np.ndarray, capacity: int) -> int:
    """Martello–Toth L2 over the samples that fit (``<= capacity``); ``>= L1``; int."""
    cap = int(capacity)
    a = _packable(lengths, cap)
    if a.size == 0:
        return 0
    cnt = np.bincount(a, minlength=cap + 1).astype(np.int64)
    c = np.cumsum(cnt)  # c[x]: number of items <= x
    s = np.cumsum(cnt * np.arange(cap + 1, dtype=np.int64))  # s[x]: sum of items <= x
    total_n = int(c[-1])
    half = cap // 2  # s <= L/2  <=>  s <= half
    k = np.arange(0, half + 1, dtype=np.int64)
    j1 = total_n - c[cap - k]
    j2c = c[cap - k] - c[half]
    j2s = s[cap - k] - s[half]
    below_k = np.where(k > 0, s[np.maximum(k - 1, 0)], 0)
    j3s = s[half] - below_k
    free = j2c * cap - j2s
    extra = np.maximum(0, -(-(j3s - free) // cap))
    l2 = int((j1 + j2c + extra).max())
    return max(l2, lower_bound_l1(a, cap))
