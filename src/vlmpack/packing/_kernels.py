"""numba kernels of the other packers (FFD, greedy knapsack, next-fit, window) and of the CSR build.

Every kernel takes int64 arrays ``eff`` (token lengths after rounding), ``mc`` (media count),
``mt`` (media tokens), the items to place (int32 indices, in the order the algorithm consumes
them) and the limits ``cap``, ``max_n``, ``max_mc``, ``max_mt`` (a huge value when unset), and
returns ``(pack_of int32 [n], number of packs)`` with -1 for samples not placed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit


def pack_renumbering(npacks: int, order: str, seed: int | None, first_member: Callable[[], np.ndarray]) -> np.ndarray:
    """New id of each pack (int64 ``[npacks]``) for the pack order ``order``.

    ``"creation"``: as the algorithm opened them; ``"shuffle"``: a permutation from
    ``numpy.random.PCG64(seed or 0)`` (same on any machine); ``"input"``: by the smallest sample
    index of each pack, which ``first_member()`` returns (int ``[npacks]``; called only here).
    """
    if order == "creation" or npacks == 0:
        return np.arange(npacks, dtype=np.int64)
    if order == "shuffle":
        rng = np.random.Generator(np.random.PCG64(0 if seed is None else int(seed)))
        rank = rng.permutation(npacks)
    else:
        rank = np.argsort(first_member(), kind="stable")
    new_id = np.empty(npacks, dtype=np.int64)
    new_id[rank] = np.arange(npacks, dtype=np.int64)
    return new_id


@njit(cache=True)
def first_fit_tree(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n):
    """First-Fit over ``items`` in the given order: the lowest-numbered pack where the item fits.

    A max-segment tree over packs holds the residual tokens, the residual sample slots and the
    residual media budgets; the leftmost feasible leaf is found by a pruned descent, so a pack that
    fails only a media budget costs one extra leaf visit. O(n log n) with no constraint active.
    """
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    size = 1
    while size < max(m, 1):
        size *= 2
    t_res = np.full(2 * size, -1, dtype=np.int64)  # -1: no pack at that leaf
    t_cnt = np.full(2 * size, -1, dtype=np.int64)
    t_mc = np.full(2 * size, -1, dtype=np.int64)
    t_mt = np.full(2 * size, -1, dtype=np.int64)
    stack = np.empty(64, dtype=np.int64)
    npacks = 0
    for t in range(m):
        i = items[t]
        s = eff[i]
        ci = mc[i]
        ti = mt[i]
        leaf = -1
        # pruned depth-first search for the leftmost feasible leaf
        top = 0
        stack[0] = 1
        top = 1
        while top > 0:
            top -= 1
            node = stack[top]
            if t_res[node] < s or t_cnt[node] < 1 or t_mc[node] < ci or t_mt[node] < ti:
                continue
            if node >= size:
                leaf = node
                break
            stack[top] = 2 * node + 1
            stack[top + 1] = 2 * node
            top += 2
        if leaf < 0:
            p = npacks
            npacks += 1
            leaf = size + p
            t_res[leaf] = cap
            t_cnt[leaf] = max_n
            t_mc[leaf] = max_mc
            t_mt[leaf] = max_mt
        p = leaf - size
        t_res[leaf] -= s
        t_cnt[leaf] -= 1
        t_mc[leaf] -= ci
        t_mt[leaf] -= ti
        pack_of[i] = p
        node = leaf >> 1
        while node >= 1:
            a = 2 * node
            b = a + 1
            t_res[node] = max(t_res[a], t_res[b])
            t_cnt[node] = max(t_cnt[a], t_cnt[b])
            t_mc[node] = max(t_mc[a], t_mc[b])
            t_mt[node] = max(t_mt[a], t_mt[b])
            node >>= 1
    return pack_of, npacks


@njit(cache=True)
def min_positive(values, items):
    """Smallest positive ``values[i]`` over ``i`` in ``items`` (0 when none is positive), e.g. the
    smallest media-token count: a pack that cannot take even that many more is full for media."""
    best = 0
    for t in range(items.shape[0]):
        v = values[items[t]]
        if v > 0 and (best == 0 or v < best):
            best = v
    return best


@njit(cache=True)
def _sift_up(heap, pos, key, k):
    p = heap[k]
    while k > 0:
        par = (k - 1) >> 1
        q = heap[par]
        if key[q] <= key[p]:
            break
        heap[k] = q
        pos[q] = k
        k = par
    heap[k] = p
    pos[p] = k


@njit(cache=True)
def _sift_down(heap, pos, key, k, size):
    p = heap[k]
    while True:
        c = 2 * k + 1
        if c >= size:
            break
        if c + 1 < size and key[heap[c + 1]] < key[heap[c]]:
            c += 1
        q = heap[c]
        if key[q] >= key[p]:
            break
        heap[k] = q
        pos[q] = k
        k = c
    heap[k] = p
    pos[p] = k


@njit(cache=True)
def _heap_push(heap, pos, key, hsize, p):
    heap[hsize] = p
    _sift_up(heap, pos, key, hsize)
    return hsize + 1


@njit(cache=True)
def _heap_remove(heap, pos, key, hsize, p):
    k = pos[p]
    hsize -= 1
    if k < hsize:
        heap[k] = heap[hsize]
        pos[heap[k]] = k
        _sift_down(heap, pos, key, k, hsize)
        _sift_up(heap, pos, key, k)
    return hsize


@njit(cache=True)
def greedy_knapsack(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n):
    """NeMo Automodel "neat packing": each item goes to the least-filled pack if it fits, else to a
    new pack; a binary min-heap keyed by (fill, pack index), as in NeMo's ``heapq`` version.

    Constraints: packs that reached ``max_n`` leave the heap; packs whose media budget is spent
    move to a second heap that only media-free items look at (an item takes the smaller top of
    the two); a media item finds the least-filled pack within its budgets by a pruned heap search
    (a node with no room for the tokens, or not better than the best found, prunes its subtree).
    """
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    sz = max(m, 1)
    heaps = np.empty((2, sz), dtype=np.int32)
    hsize = np.zeros(2, dtype=np.int64)
    where = np.zeros(sz, dtype=np.int8)
    pos = np.empty(sz, dtype=np.int64)
    key = np.empty(sz, dtype=np.int64)  # fill * sz + pack: (fill, index) order
    fill = np.zeros(sz, dtype=np.int64)
    cnt = np.zeros(sz, dtype=np.int64)
    pmc = np.zeros(sz, dtype=np.int64)
    pmt = np.zeros(sz, dtype=np.int64)
    stack = np.empty(sz + 1, dtype=np.int64)
    min_mt = min_positive(mt, items)
    npacks = 0
    for t in range(m):
        i = items[t]
        s = eff[i]
        media = mc[i] > 0 or mt[i] > 0
        best = -1
        for h in range(2):
            if hsize[h] == 0 or (h == 1 and media):
                continue
            heap = heaps[h]
            q = heap[0]
            if fill[q] + s > cap or (best >= 0 and key[q] >= key[best]):
                continue
            if pmc[q] + mc[i] <= max_mc and pmt[q] + mt[i] <= max_mt:
                best = q
                continue
            top = 1
            stack[0] = 0
            while top > 0:
                top -= 1
                k = stack[top]
                q = heap[k]
                if fill[q] + s > cap or (best >= 0 and key[q] >= key[best]):
                    continue
                if pmc[q] + mc[i] <= max_mc and pmt[q] + mt[i] <= max_mt:
                    best = q
                    continue
                c = 2 * k + 1
                if c < hsize[h]:
                    stack[top] = c
                    top += 1
                if c + 1 < hsize[h]:
                    stack[top] = c + 1
                    top += 1
        if best < 0:
            p = npacks
            npacks += 1
        else:
            p = best
            h = where[p]
            hsize[h] = _heap_remove(heaps[h], pos, key, hsize[h], p)
        fill[p] += s
        cnt[p] += 1
        pmc[p] += mc[i]
        pmt[p] += mt[i]
        pack_of[i] = p
        if cnt[p] >= max_n:
            continue
        h = 1 if (pmc[p] >= max_mc or (min_mt > 0 and pmt[p] + min_mt > max_mt)) else 0
        where[p] = h
        key[p] = fill[p] * sz + p
        hsize[h] = _heap_push(heaps[h], pos, key, hsize[h], p)
    return pack_of, npacks


@njit(cache=True)
def next_fit(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n):
    """Next-Fit in the given order: one open pack, closed as soon as the next item does not fit
    (lmms-engine's ``first_fit`` and its iterable packer do exactly this)."""
    pack_of = np.full(n, -1, dtype=np.int32)
    npacks = 0
    fill = 0
    cnt = 0
    pmc = 0
    pmt = 0
    for t in range(items.shape[0]):
        i = items[t]
        if npacks == 0 or not (
            fill + eff[i] <= cap and cnt < max_n and pmc + mc[i] <= max_mc and pmt + mt[i] <= max_mt
        ):
            npacks += 1
            fill = 0
            cnt = 0
            pmc = 0
            pmt = 0
        fill += eff[i]
        cnt += 1
        pmc += mc[i]
        pmt += mt[i]
        pack_of[i] = npacks - 1
    return pack_of, npacks


@njit(cache=True)
def window(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, k):
    """lmms-engine ``window_k``: the window holds the ``k`` earliest unconsumed items (in arrival
    order); each pack scans the window once in order and takes every item that still fits, then
    the window is refilled from the stream. O(P * k)."""
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    nxt = np.empty(m + 1, dtype=np.int64)  # linked list of unconsumed positions; m is the sentinel
    prv = np.empty(m + 1, dtype=np.int64)
    for t in range(m):
        nxt[t] = t + 1
        prv[t] = t - 1
    first = 0 if m > 0 else m
    frontier = min(k, m)  # positions < frontier are in the window
    consumed = 0
    npacks = 0
    while consumed < m:
        fill = 0
        cnt = 0
        pmc = 0
        pmt = 0
        t = first
        while t < frontier:
            i = items[t]
            nt = nxt[t]
            if fill + eff[i] <= cap and cnt < max_n and pmc + mc[i] <= max_mc and pmt + mt[i] <= max_mt:
                fill += eff[i]
                cnt += 1
                pmc += mc[i]
                pmt += mt[i]
                pack_of[i] = npacks
                a = prv[t]
                if a >= 0:
                    nxt[a] = nt
                else:
                    first = nt
                if nt < m:
                    prv[nt] = a
                if cnt >= max_n:
                    break
            t = nt
        consumed += cnt
        frontier = min(k + consumed, m)
        npacks += 1
    return pack_of, npacks


@njit(cache=True)
def csr(pack_of, npacks):
    """CSR view of an assignment: (offsets int64 [P+1], order int64 [n_packed]), each pack's
    samples in ascending index order."""
    counts = np.zeros(npacks + 1, dtype=np.int64)
    for i in range(pack_of.shape[0]):
        p = pack_of[i]
        if p >= 0:
            counts[p + 1] += 1
    for p in range(npacks):
        counts[p + 1] += counts[p]
    cursor = counts[:npacks].copy()
    order = np.empty(counts[npacks], dtype=np.int64)
    for i in range(pack_of.shape[0]):
        p = pack_of[i]
        if p >= 0:
            order[cursor[p]] = i
            cursor[p] += 1
    return counts, order


@njit(cache=True)
def relabel(pack_of, new_id, eff, npacks):
    """Apply a pack renumbering; returns (pack_ids int64 [n], pack_tokens int64 [P])."""
    out = np.empty(pack_of.shape[0], dtype=np.int64)
    tokens = np.zeros(npacks, dtype=np.int64)
    for i in range(pack_of.shape[0]):
        p = pack_of[i]
        if p >= 0:
            q = new_id[p]
            out[i] = q
            tokens[q] += eff[i]
        else:
            out[i] = -1
    return out, tokens
