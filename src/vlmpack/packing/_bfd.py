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

from vlmpack.packing._kernels import min_positive

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
def bfd_plain(eff, items, cap, max_n, n, table, seeds, nseed):
    """Exact BFD over ``items`` (already in decreasing order) with at most ``max_n`` samples per
    pack (a pack that reaches it is closed).

    ``seeds`` (int32, may be empty) are spread round-robin over ``nseed`` packs opened first,
    before the BFD pass (used to keep small samples from forming count-capped tail packs).

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
    cnt = np.zeros(max(m + seeds.shape[0], 1) if max_n < m + seeds.shape[0] else 1, dtype=np.int32)
    npacks = 0
    if seeds.shape[0] > 0:
        nxt = np.empty(m + seeds.shape[0], dtype=np.int32)
        fill = np.zeros(nseed, dtype=np.int64)
        for j in range(seeds.shape[0]):
            p = j % nseed
            fill[p] += eff[seeds[j]]
            pack_of[seeds[j]] = p
            if max_n < m + seeds.shape[0]:
                cnt[p] += 1
        npacks = nseed
        for p in range(nseed):
            if max_n < m + seeds.shape[0] and cnt[p] >= max_n:
                continue
            nr = cap - fill[p]
            if head[nr] < 0:
                _bit_set(bits, summ, nr)
            nxt[p] = head[nr]
            head[nr] = p
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
        pack_of[i] = p
        if max_n < m + seeds.shape[0]:
            cnt[p] += 1
            if cnt[p] >= max_n:
                continue
        if head[nr] < 0:
            _bit_set(bits, summ, nr)
        nxt[p] = head[nr]
        head[nr] = p
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
    closed. Open packs are split into classes, each with its own residual buckets and bitset:
    class = (media slots left, with ``max_mc <= 64``, else "slots left or not") x (media-token
    budget left, in 16 ranges of ``max_mt``); a pack whose media budget is spent is in class 0,
    where only media-free samples look. A media sample looks only at classes that can hold it and
    checks the budgets per pack while walking a bucket; so the result is exact BFD and the walk
    only meets packs in the boundary ranges. Ties on the residual go to the lowest class.
    Returns (pack_of int32 [n], number of packs).
    """
    m = items.shape[0]
    pack_of = np.full(n, -1, dtype=np.int32)
    by_count = max_mc <= 64
    na = max_mc + 1 if by_count else 2
    nb = 16 if max_mt < (1 << 40) else 1
    q = max(1, (max_mt + nb) // nb)  # media-token range width: class b holds budgets in [b*q, (b+1)*q)
    ncls = na * nb
    nwords = (cap >> 6) + 1
    nsum = (nwords >> 6) + 1
    bits = np.zeros((ncls, nwords), dtype=np.int64)
    summ = np.zeros((ncls, nsum), dtype=np.int64)
    head = np.full((ncls, cap + 1), -1, dtype=np.int32)
    sz = max(m, 1)
    nxt = np.empty(sz, dtype=np.int32)
    prv = np.empty(sz, dtype=np.int32)
    resid = np.empty(sz, dtype=np.int64)
    cnt = np.zeros(sz, dtype=np.int64)
    pmc = np.zeros(sz, dtype=np.int64)
    pmt = np.zeros(sz, dtype=np.int64)
    min_mt = min_positive(mt, items)  # smallest positive media-token count (0: none)
    npacks = 0
    for t in range(m):
        i = items[t]
        s = eff[i]
        ci = mc[i]
        ti = mt[i]
        best = -1
        best_r = cap + 1
        best_c = 0
        if ci == 0 and ti == 0:
            for c in range(ncls):
                r = _find_ge(bits[c], summ[c], s, table)
                if r >= 0 and r < best_r:
                    best = head[c, r]
                    best_r = r
                    best_c = c
        else:
            a0 = max(ci, 1) if by_count else 1
            b0 = min(nb - 1, ti // q)
            for c in range(a0 * nb, ncls):
                if c % nb < b0:
                    continue
                r = _find_ge(bits[c], summ[c], s, table)
                while r >= 0 and r < best_r:
                    p = head[c, r]
                    while p >= 0:
                        if pmc[p] + ci <= max_mc and pmt[p] + ti <= max_mt:
                            break
                        p = nxt[p]
                    if p >= 0:
                        best = p
                        best_r = r
                        best_c = c
                        break
                    if r + 1 > cap:
                        break
                    r = _find_ge(bits[c], summ[c], r + 1, table)
        if best < 0:
            p = npacks
            npacks += 1
            resid[p] = cap
        else:
            p = best
            _unlink(p, best_r, head[best_c], nxt, prv, bits[best_c], summ[best_c])
        resid[p] -= s
        cnt[p] += 1
        pmc[p] += ci
        pmt[p] += ti
        pack_of[i] = p
        if cnt[p] >= max_n:
            continue
        spent = min_mt > 0 and pmt[p] + min_mt > max_mt
        if spent or pmc[p] >= max_mc:
            k = 0
        else:
            a = max_mc - pmc[p] if by_count else 1
            k = a * nb + min(nb - 1, (max_mt - pmt[p]) // q)
        _link(p, resid[p], head[k], nxt, prv, bits[k], summ[k])
    return pack_of, npacks


#: the value of an unset per-pack limit (samples, media, media tokens)
UNSET = np.int64(2**62)


def bfd_capped(eff: np.ndarray, items: np.ndarray, cap: int, max_n: np.int64, n: int) -> tuple[np.ndarray, int]:
    """BFD with a sample cap. When the cap leaves a tail of under-filled packs made of the smallest
    samples, those samples are spread round-robin over the packs first and BFD re-run; the better
    of the two plans is kept (both honour every constraint)."""
    none = np.empty(0, dtype=np.int32)
    table = DEBRUIJN_TABLE
    po, p = bfd_plain(eff, items, cap, max_n, n, table, none, 0)
    if max_n == UNSET or p == 0:
        return po, int(p)
    sizes = np.bincount(po[items], minlength=p)
    tokens = np.bincount(po[items], weights=eff[items], minlength=p)
    tail = (sizes >= max_n) & (tokens < 0.98 * cap)
    if not tail.any():
        return po, int(p)
    n_tail = int(sizes[tail].sum())
    base, _ = bfd_plain(eff, items, cap, UNSET, n, table, none, 0)
    p_free = int(base.max()) + 1 if items.size else 0
    for spread in (n_tail, 2 * n_tail, 4 * n_tail, 8 * n_tail, 16 * n_tail):
        k = min(spread, items.size)
        if k == 0 or -(-k // max(p_free, 1)) > max_n // 2:
            break
        seeds = items[-k:][::-1].copy()
        if np.bincount(np.arange(k) % p_free, weights=eff[seeds], minlength=p_free).max() > cap:
            break
        po2, p2 = bfd_plain(eff, items[:-k], cap, max_n, n, table, seeds, p_free)
        if p2 < p:
            po, p = po2, p2
    return po, int(p)
