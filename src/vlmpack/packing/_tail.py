"""numba kernel of the tail repair of ``bfd``: re-pack the last packs of the exact fill.

The exact fill (``_exact``) consumes sizes largest first, so near the end only a narrow band of
sizes is left (image, L = 4096: everything in [282, 452], the last packs twelve 316s each) and
no combination of the survivors sums to ``L``: the waste of the whole plan sits in its last few
percent of packs. This pass takes the items of those packs (the *pool*) and packs them again,
consuming the sizes *evenly* so that the band stays wide until the very end:

1. an item of exactly the residual ``R`` closes the pack;
2. when ``2*smin <= R <= 2*smax``, a pair ``c + d == R`` (at most ``tries`` candidates ``c``,
   largest first) closes it;
3. otherwise the *most abundant* size ``s`` in ``[smin, min(R - smin, smax)]`` (ties: smaller
   size, measured better than larger: image L = 4096 L2 + 1 instead of + 2 at n = 1e6, + 1
   instead of + 4 at 1e7) is taken, lowered to the most abundant ``s <= R - k*smin`` when
   ``R - s`` would fall in a gap ``((k-1)*smax, k*smin)`` of the reachable sums (as ``_exact``);
4. when ``R < 2*smin``, the largest ``s <= R`` (the pack ends with a residual below ``smin``).

Taking the most abundant size levels the size histogram, so all sizes run out together. This
is a heuristic, measured rather than proven: a greedy, pack-by-pack "pattern" choice in
cutting-stock terms, inspired by (not an implementation of) the balanced consumption of the
sum-of-squares rule (Csirik, Johnson, Kenyon, Orlin, Shor, Weber, "On the sum-of-squares
algorithm for bin packing", J. ACM 53 (2006)). "Most abundant in a range" is a query on a
max segment tree over sizes, O(log L) per pick. Deterministic (ties to the smaller size, items of
one size taken in sorted-position order). With a sample cap, a pack with one slot left takes
only an exact fit or the largest size that fits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlmpack.packing._bfd import _bit_clear, _bit_set
from vlmpack.packing._exact import _largest_le


@njit(cache=True, inline="always")
def _tree_set(tree, half, s, v):
    i = half + s
    tree[i] = v
    i >>= 1
    while i >= 1:
        a = tree[2 * i]
        b = tree[2 * i + 1]
        tree[i] = a if a > b else b
        i >>= 1


@njit(cache=True, inline="always")
def _most_abundant(tree, half, lo, hi, left_nodes, right_nodes):
    """Size in ``[lo, hi]`` with the largest count (ties: smaller size), or -1 if all are 0.

    ``left_nodes``/``right_nodes``: int64 scratch ``[64]`` for the covering nodes."""
    if lo > hi:
        return -1
    best = 0
    bnode = -1
    a = lo + half
    b = hi + half + 1
    nl = 0
    nr = 0
    while a < b:
        if a & 1:
            left_nodes[nl] = a
            nl += 1
            a += 1
        if b & 1:
            b -= 1
            right_nodes[nr] = b
            nr += 1
        a >>= 1
        b >>= 1
    # nodes in decreasing size order: right_nodes as collected, then left_nodes reversed
    for j in range(nl):
        v = tree[left_nodes[j]]
        if v > best:
            best = v
            bnode = left_nodes[j]
    for j in range(nr - 1, -1, -1):
        v = tree[right_nodes[j]]
        if v > best:
            best = v
            bnode = right_nodes[j]
    if bnode < 0:
        return -1
    while bnode < half:  # descend to the leftmost leaf holding the maximum
        if tree[2 * bnode] == best:
            bnode = 2 * bnode
        else:
            bnode = 2 * bnode + 1
    return bnode - half


@njit(cache=True)
def tail_fill(cnt, seg, cap, max_n, tries, table):
    """Pack the pool given by its size histogram, sizes consumed evenly (module docstring).

    Args:
        cnt: int64 ``[cap+1]`` pool items of each size (size 0 must be 0).
        seg: int64 ``[cap+1]`` first pool position of each size (pool sorted by decreasing size).
        cap: capacity ``L``; max_n: sample cap ``K`` (huge when unset); tries: pair candidates.

    Returns:
        (ps int32 ``[m]`` pack of each pool position, fill int64 ``[P]``, size int64 ``[P]``, P).
    """
    top = cap
    pc = cnt.copy()
    ptr = seg.copy()
    nw = ((top + 1) >> 6) + 1
    bits = np.zeros(nw, np.int64)
    summ = np.zeros((nw >> 6) + 1, np.int64)
    half = 1
    while half < top + 1:
        half <<= 1
    tree = np.zeros(2 * half, np.int64)
    lnod = np.empty(64, np.int64)
    rnod = np.empty(64, np.int64)
    left = 0
    for s in range(1, top + 1):
        if pc[s] > 0:
            _bit_set(bits, summ, top - s)
            tree[half + s] = pc[s]
            left += pc[s]
    for i in range(half - 1, 0, -1):
        a = tree[2 * i]
        b = tree[2 * i + 1]
        tree[i] = a if a > b else b
    m = left
    kcap = min(max_n, m + 1)
    ps = np.empty(m, np.int32)
    fill = np.empty(max(m, 1), np.int64)
    size = np.empty(max(m, 1), np.int64)
    smin = 1
    smax = top
    npk = 0
    while left > 0:
        p = npk
        npk += 1
        r = cap
        k_in = 0
        while r > 0 and left > 0 and k_in < kcap:
            while pc[smin] == 0:
                smin += 1
            while pc[smax] == 0:
                smax -= 1
            if r < smin:
                break
            s = -1
            if r <= smax and pc[r] > 0:
                s = r
            elif kcap - k_in == 1 or r < 2 * smin:
                s = _largest_le(bits, summ, top, r, table)
            else:
                if r <= 2 * smax:
                    x = min(r - smin, smax)
                    hf = (r + 1) // 2
                    k = 0
                    while k < tries:
                        c = _largest_le(bits, summ, top, x, table)
                        if c < hf:
                            break
                        d = r - c
                        if pc[d] > 0 and (d != c or pc[c] >= 2):
                            s = c
                            break
                        x = c - 1
                        k += 1
                if s < 0:
                    s = _most_abundant(tree, half, smin, min(r - smin, smax), lnod, rnod)
                    rem = r - s
                    k = (rem + smax - 1) // smax
                    if rem < k * smin and r - k * smin >= smin:
                        s2 = _most_abundant(tree, half, smin, min(r - k * smin, smax), lnod, rnod)
                        if s2 > 0:
                            s = s2
            if s <= 0:
                break
            ps[ptr[s]] = p
            ptr[s] += 1
            pc[s] -= 1
            _tree_set(tree, half, s, pc[s])
            if pc[s] == 0:
                _bit_clear(bits, summ, top - s)
            left -= 1
            r -= s
            k_in += 1
        fill[p] = cap - r
        size[p] = k_in
    return ps, fill[:npk].copy(), size[:npk].copy(), npk


@njit(cache=True)
def repair(cnt, seg, cap, ps, fill, size, nbig, max_n, tries, table):
    """Tail repair of a pack-by-pack plan (packs numbered in creation order).

    The pool is the items of the packs from ``t0 = tw - 64`` on, where ``tw`` is the first pack
    after the ``nbig`` packs opened by items ``> L/2`` that is not full (at most the last
    ``max(P/8, 4096)`` packs). The pool is re-packed with :func:`tail_fill`; the result is used
    only when it has strictly fewer packs.

    Args:
        cnt, seg: int64 ``[cap+1]`` histogram and first sorted position of every size.
        ps: int32 ``[m]`` pack of each sorted position (updated in place when improved).
        fill, size: int64 ``[P]`` tokens and samples per pack.

    Returns:
        (fill, size, P): the per-pack arrays and pack count after the repair.
    """
    npk = fill.shape[0]
    tw = npk
    for p in range(min(nbig, npk), npk):
        if fill[p] < cap:
            tw = p
            break
    if tw >= npk - 1:  # at most the last pack is not full: nothing to gain
        return fill, size, npk
    t0 = max(0, tw - 64, npk - max(npk // 8, 4096))
    pcnt = np.zeros(cap + 1, np.int64)
    for s in range(1, cap + 1):
        for t in range(seg[s], seg[s] + cnt[s]):
            if ps[t] >= t0:
                pcnt[s] += 1
    pseg = np.empty(cap + 1, np.int64)
    acc = 0
    for s in range(cap, -1, -1):
        pseg[s] = acc
        acc += pcnt[s]
    ps2, f2, s2, p2 = tail_fill(pcnt, pseg, cap, max_n, tries, table)
    if t0 + p2 >= npk:
        return fill, size, npk
    j = 0
    for s in range(cap, 0, -1):
        for t in range(seg[s], seg[s] + cnt[s]):
            if ps[t] >= t0:
                ps[t] = t0 + ps2[j]
                j += 1
    nf = np.empty(t0 + p2, np.int64)
    ns = np.empty(t0 + p2, np.int64)
    nf[:t0] = fill[:t0]
    ns[:t0] = size[:t0]
    nf[t0:] = f2
    ns[t0:] = s2
    return nf, ns, t0 + p2
