"""numba kernels of the capacity-indexed Best-Fit-Decreasing packer.

Open packs are kept in buckets indexed by their residual capacity ``r`` in ``[0, L]`` (a linked
list per bucket) and a two-level bitset over ``r`` marks the non-empty buckets. Placing an item of
length ``s`` is "find the smallest set bit ``r >= s``" (a masked word, then a summary scan, then a
count-trailing-zeros by de Bruijn multiplication), so an item costs O(1 + L/4096) word operations
and the whole pass is O(n + L) after the counting sort. All kernels are ``cache=True``.

Internal arrays are int32 (sample and pack indices < 2**31); bit words are int64 with all 64 bits
used (arithmetic shifts are masked).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_DEBRUIJN = 0x03F79D71B4CA8B09


def _debruijn_table() -> np.ndarray:
    table = np.zeros(64, dtype=np.int64)
    for i in range(64):
        table[(((1 << i) * _DEBRUIJN) % (1 << 64)) >> 58] = i
    return table


DEBRUIJN_TABLE = _debruijn_table()
DEBRUIJN = np.int64(_DEBRUIJN)


@njit(cache=True, inline="always")
def _ctz(x, table):
    """Index of the lowest set bit of a non-zero int64 ``x``."""
    return table[((x & -x) * DEBRUIJN >> 58) & 63]


@njit(cache=True, inline="always")
def _bit_set(bits, summ, r):
    w = r >> 6
    bits[w] |= np.int64(1) << (r & 63)
    summ[w >> 6] |= np.int64(1) << (w & 63)


@njit(cache=True, inline="always")
def _bit_clear(bits, summ, r):
    w = r >> 6
    bits[w] &= ~(np.int64(1) << (r & 63))
    if bits[w] == 0:
        summ[w >> 6] &= ~(np.int64(1) << (w & 63))


@njit(cache=True)
def _find_ge(bits, summ, s, table):
    """Smallest set bit ``r >= s`` of the two-level bitset, or -1."""
    nwords = bits.shape[0]
    w = s >> 6
    if w >= nwords:
        return -1
    x = bits[w] & (np.int64(-1) << (s & 63))
    if x != 0:
        return (w << 6) | _ctz(x, table)
    w += 1
    sw = w >> 6
    nsum = summ.shape[0]
    if sw >= nsum:
        return -1
    y = summ[sw] & (np.int64(-1) << (w & 63))
    while True:
        if y != 0:
            ww = (sw << 6) | _ctz(y, table)
            return (ww << 6) | _ctz(bits[ww], table)
        sw += 1
        if sw >= nsum:
            return -1
        y = summ[sw]


@njit(cache=True)
def sort_decreasing(eff, packable, cap):
    """Indices of the packable samples by decreasing length, ties by ascending index (counting sort).

    eff: int64 [n] lengths; packable: bool [n]; returns int32 [m].
    """
    cnt = np.zeros(cap + 2, dtype=np.int64)
    m = 0
    for i in range(eff.shape[0]):
        if packable[i]:
            cnt[eff[i]] += 1
            m += 1
    start = np.zeros(cap + 2, dtype=np.int64)
    acc = 0
    for v in range(cap, -1, -1):
        start[v] = acc
        acc += cnt[v]
    out = np.empty(m, dtype=np.int32)
    for i in range(eff.shape[0]):
        if packable[i]:
            v = eff[i]
            out[start[v]] = i
            start[v] += 1
    return out


@njit(cache=True)
def bfd_plain(eff, items, cap, n, table):
    """Unconstrained exact BFD over ``items`` (already in decreasing order).

    Returns (pack_of int32 [n] with -1 for samples not in ``items``, number of packs).
    Ties between packs with the same residual are broken last-in-first-out (this does not change
    the multiset of pack fills, which is what BFD determines).
    """
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    nwords = (cap >> 6) + 1
    bits = np.zeros(nwords, dtype=np.int64)
    summ = np.zeros((nwords >> 6) + 1, dtype=np.int64)
    head = np.full(cap + 1, -1, dtype=np.int32)
    nxt = np.empty(max(m, 1), dtype=np.int32)
    npacks = 0
    for t in range(m):
        i = items[t]
        s = eff[i]
        r = _find_ge(bits, summ, s, table)
        if r < 0:
            p = npacks
            npacks += 1
            nr = cap - s
        else:
            p = head[r]
            head[r] = nxt[p]
            if head[r] < 0:
                _bit_clear(bits, summ, r)
            nr = r - s
        if head[nr] < 0:
            _bit_set(bits, summ, nr)
        nxt[p] = head[nr]
        head[nr] = p
        pack_of[i] = p
    return pack_of, npacks


@njit(cache=True)
def _unlink(p, r, head, nxt, prv, bits, summ):
    a = prv[p]
    b = nxt[p]
    if a >= 0:
        nxt[a] = b
    else:
        head[r] = b
        if b < 0:
            _bit_clear(bits, summ, r)
    if b >= 0:
        prv[b] = a


@njit(cache=True)
def _link(p, r, head, nxt, prv, bits, summ):
    h = head[r]
    if h < 0:
        _bit_set(bits, summ, r)
    else:
        prv[h] = p
    nxt[p] = h
    prv[p] = -1
    head[r] = p


@njit(cache=True)
def bfd_constrained(eff, mc, mt, items, cap, max_n, max_mc, max_mt, n, table):
    """Exact BFD with a sample cap and media budgets (the feasible pack with the least residual).

    eff/mc/mt: int64 [n] token lengths, media counts, media tokens; items: int32 [m] in decreasing
    order; max_n/max_mc/max_mt: limits (a huge value when unset). A pack that reached ``max_n`` is
    closed; a pack whose media budget is spent (count at ``max_mc`` or fewer than the smallest
    positive media-token count left) moves to a second, text-only structure that only media-free
    samples search. Returns (pack_of int32 [n], number of packs).
    """
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    nwords = (cap >> 6) + 1
    nsum = (nwords >> 6) + 1
    # structure 0: packs that can still take media; structure 1: text-only packs
    bits = np.zeros((2, nwords), dtype=np.int64)
    summ = np.zeros((2, nsum), dtype=np.int64)
    head = np.full((2, cap + 1), -1, dtype=np.int32)
    sz = max(m, 1)
    nxt = np.empty(sz, dtype=np.int32)
    prv = np.empty(sz, dtype=np.int32)
    resid = np.empty(sz, dtype=np.int64)
    cnt = np.zeros(sz, dtype=np.int64)
    pmc = np.zeros(sz, dtype=np.int64)
    pmt = np.zeros(sz, dtype=np.int64)
    where = np.zeros(sz, dtype=np.int8)  # 0/1 structure, -1 closed
    min_mt = 0  # smallest positive media-token count (0: none)
    for t in range(m):
        v = mt[items[t]]
        if v > 0 and (min_mt == 0 or v < min_mt):
            min_mt = v
    npacks = 0
    for t in range(m):
        i = items[t]
        s = eff[i]
        ci = mc[i]
        ti = mt[i]
        media = ci > 0 or ti > 0
        best = -1
        best_r = cap + 1
        best_k = 0
        if not media:
            r1 = _find_ge(bits[1], summ[1], s, table)
            if r1 >= 0:
                best = head[1, r1]
                best_r = r1
                best_k = 1
        r = _find_ge(bits[0], summ[0], s, table)
        while r >= 0 and r < best_r:
            p = head[0, r]
            while p >= 0:
                if pmc[p] + ci <= max_mc and pmt[p] + ti <= max_mt:
                    break
                p = nxt[p]
            if p >= 0:
                best = p
                best_r = r
                best_k = 0
                break
            if r + 1 > cap:
                break
            r = _find_ge(bits[0], summ[0], r + 1, table)
        if best < 0:
            p = npacks
            npacks += 1
            resid[p] = cap
        else:
            p = best
            _unlink(p, best_r, head[best_k], nxt, prv, bits[best_k], summ[best_k])
        resid[p] -= s
        cnt[p] += 1
        pmc[p] += ci
        pmt[p] += ti
        pack_of[i] = p
        if cnt[p] >= max_n:
            where[p] = -1
            continue
        k = 0
        if pmc[p] >= max_mc or (min_mt > 0 and pmt[p] + min_mt > max_mt):
            k = 1
        where[p] = k
        _link(p, resid[p], head[k], nxt, prv, bits[k], summ[k])
    return pack_of, npacks
