"""The fast path of ``bfd`` (token capacity and optional sample cap only; no media budgets, no
kind groups): histogram sort, exact BFD, the exact-fill refinement, and a fused output build.

Memory traffic is what costs at n = 1e7, so:

* the counting sort reads ``lengths`` once to count and once to scatter (int32 indices);
* BFD walks the size histogram (the length of the t-th sorted item is implied, never re-read)
  and records the pack of each *sorted position* sequentially (int32);
* the output is built in two passes: a scatter ``pack_ids[items[t]] = new_id[ps[t]]`` and one
  pass in sample order that fills the CSR ``order`` (so each pack lists ascending indices);
  offsets and ``pack_tokens`` come from the per-pack counters of the kernels (no bincount).

Peak extra memory: items, ps (int32, 4 B each per sample, plus 4 B for the refinement's ps),
and the two int64 outputs: < 30 bytes per sample.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlmpack.packing import _bfd, _exact

PAIR_TRIES = 32  # candidates of the pair completion of the exact fill (see _exact)


@njit(cache=True)
def hist_sort(eff, cap, pack_ids):
    """Counting sort by decreasing length, ties by ascending index.

    eff: int64 ``[n]``; pack_ids: int64 ``[n]`` output, set to -1 for overlong samples.
    Returns (items int32 ``[m]``, cnt int64 ``[cap+1]`` histogram, overlong int64 ascending).
    """
    n = eff.shape[0]
    cnt = np.zeros(cap + 1, np.int64)
    nover = 0
    for i in range(n):
        v = eff[i]
        if v <= cap:
            cnt[v] += 1
        else:
            nover += 1
    start = np.empty(cap + 1, np.int64)
    acc = 0
    for v in range(cap, -1, -1):
        start[v] = acc
        acc += cnt[v]
    items = np.empty(acc, np.int32)
    over = np.empty(nover, np.int64)
    k = 0
    for i in range(n):
        v = eff[i]
        if v <= cap:
            items[start[v]] = i
            start[v] += 1
        else:
            over[k] = i
            k += 1
            pack_ids[i] = -1
    return items, cnt, over


@njit(cache=True)
def bfd_hist(cnt, cap, max_n, table):
    """Exact BFD over a size histogram (largest size first); a pack at ``max_n`` samples closes.

    Same rule and tie-breaking as ``_bfd.bfd_plain``. Returns (ps int32 ``[m]`` pack of each
    sorted position, fill int64 ``[P]``, size int64 ``[P]``, P).
    """
    m = 0
    for v in range(cap + 1):
        m += cnt[v]
    ps = np.empty(m, np.int32)
    nwords = (cap >> 6) + 1
    bits = np.zeros(nwords, np.int64)
    summ = np.zeros((nwords >> 6) + 1, np.int64)
    head = np.full(cap + 1, -1, np.int32)
    sz = max(m, 1)
    nxt = np.empty(sz, np.int32)
    fill = np.empty(sz, np.int64)
    size = np.empty(sz, np.int64)
    npacks = 0
    t = 0
    for s in range(cap, -1, -1):
        for _ in range(cnt[s]):
            r = _bfd._find_ge(bits, summ, s, table)
            if r < 0:
                p = npacks
                npacks += 1
                nr = cap - s
                fill[p] = s
                size[p] = 1
            else:
                p = head[r]
                head[r] = nxt[p]
                if head[r] < 0:
                    _bfd._bit_clear(bits, summ, r)
                nr = r - s
                fill[p] += s
                size[p] += 1
            ps[t] = p
            t += 1
            if size[p] >= max_n:
                continue
            if head[nr] < 0:
                _bfd._bit_set(bits, summ, nr)
            nxt[p] = head[nr]
            head[nr] = p
    return ps, fill[:npacks].copy(), size[:npacks].copy(), npacks


@njit(cache=True)
def add_zeros(ps, fill, size, zstart, nzero, max_n):
    """Place the ``nzero`` zero-length items (sorted positions ``zstart..``) into packs with a free
    slot, lowest pack first, opening packs of ``max_n`` zeros when none is left. Returns
    (fill, size, P) with new packs appended."""
    npk = fill.shape[0]
    extra = 0
    free = 0
    for p in range(npk):
        free += max(0, min(max_n - size[p], nzero))
        if free >= nzero:
            break
    if free < nzero:
        extra = (nzero - free + max_n - 1) // max_n
    f2 = np.zeros(npk + extra, np.int64)
    s2 = np.zeros(npk + extra, np.int64)
    f2[:npk] = fill
    s2[:npk] = size
    p = 0
    for j in range(nzero):
        while s2[p] >= max_n:
            p += 1
        ps[zstart + j] = p
        s2[p] += 1
    return f2, s2, npk + extra


@njit(cache=True)
def l2_hist(cnt, cap):
    """Martello-Toth L2 (see ``bounds``) from a size histogram ``cnt`` int64 ``[cap+1]``; int."""
    c = np.cumsum(cnt)
    s = np.cumsum(cnt * np.arange(cap + 1))
    total_n = c[cap]
    l1 = (s[cap] + cap - 1) // cap
    half = cap // 2
    best = l1
    for k in range(half + 1):
        j1 = total_n - c[cap - k]
        j2c = c[cap - k] - c[half]
        j2s = s[cap - k] - s[half]
        below = s[k - 1] if k > 0 else 0
        j3s = s[half] - below
        free = j2c * cap - j2s
        extra = max(0, (j3s - free + cap - 1) // cap)
        best = max(best, j1 + j2c + extra)
    return best


@njit(cache=True)
def build(items, ps, fill, size, new_id, pack_ids):
    """Fused output build: ``pack_ids[items[t]] = new_id[ps[t]]``, then the CSR.

    Returns (offsets int64 ``[P+1]``, order int64 ``[m]`` ascending within each pack,
    pack_tokens int64 ``[P]``); ``pack_ids`` (int64 ``[n]``, overlong already -1) is filled.
    """
    npk = fill.shape[0]
    offsets = np.empty(npk + 1, np.int64)
    tokens = np.empty(npk, np.int64)
    cur = np.empty(npk, np.int32)  # int32 (m < 2**31): half the cache footprint of the cursors
    nid = new_id.astype(np.int32)
    for p in range(npk):
        q = nid[p]
        cur[q] = size[p]
        tokens[q] = fill[p]
    acc = 0
    offsets[0] = 0
    for q in range(npk):
        c = cur[q]
        cur[q] = acc
        acc += c
        offsets[q + 1] = acc
    m = items.shape[0]
    for t in range(m):
        pack_ids[items[t]] = nid[ps[t]]
    order = np.empty(m, np.int64)
    for i in range(pack_ids.shape[0]):
        q = pack_ids[i]
        if q >= 0:
            order[cur[q]] = i
            cur[q] += 1
    return offsets, order, tokens


@njit(cache=True)
def first_seen(items, ps, npk, n):
    """Pack renumbering by the smallest sample index of each pack (order="input")."""
    first = np.full(npk, n, np.int64)
    for t in range(items.shape[0]):
        p = ps[t]
        i = items[t]
        if i < first[p]:
            first[p] = i
    return first


def plan(eff: np.ndarray, cap: int, max_n: int, order: str, seed: int | None) -> tuple:
    """The ``bfd`` fast path. eff: int64 ``[n]`` rounded lengths; max_n: sample cap (huge if
    unset). Returns (pack_ids, offsets, order, overlong, pack_tokens), all int64.

    Result: the exact-fill refinement when it meets the lower bound ``max(L2, ceil(m / K))`` (then
    no plan has fewer packs, plain BFD included); otherwise exact BFD is run too and the
    refinement is kept only when it has strictly fewer packs. With a sample cap the small-sample
    spreading BFD (``algorithms._bfd_capped``) is tried last when still above the bound.
    """
    from vlmpack.packing.algorithms import _UNSET, _bfd_capped

    n = eff.shape[0]
    pack_ids = np.empty(n, np.int64)
    items, cnt, overlong = hist_sort(eff, cap, pack_ids)
    m = items.shape[0]
    nzero = int(cnt[0])
    lb = max(int(l2_hist(cnt, cap)), -(-m // int(min(max_n, m + 1)))) if m else 0
    best = None
    if m > nzero:
        seg = np.empty(cap + 1, np.int64)
        seg[::-1] = np.concatenate(([0], np.cumsum(cnt[::-1])[:-1]))
        c2 = cnt.copy()
        c2[0] = 0
        ps2, f2, s2, p2 = _exact.exact_fill(c2, seg, cap, max_n, PAIR_TRIES, _bfd.DEBRUIJN_TABLE)
        if nzero:
            ps2 = np.concatenate((ps2, np.empty(nzero, np.int32)))
            f2, s2, p2 = add_zeros(ps2, f2, s2, m - nzero, nzero, max_n)
        best = (ps2, f2, s2, int(p2))
    if best is None or best[3] > lb:  # not provably optimal: plain BFD, kept on ties
        ps, fill, size, npk = bfd_hist(cnt, cap, max_n, _bfd.DEBRUIJN_TABLE)
        if best is None or npk <= best[3]:
            best = (ps, fill, size, int(npk))
    ps, fill, size, npk = best
    if max_n != _UNSET and npk > lb:
        po, p3 = _bfd_capped(eff, items, cap, np.int64(max_n), n)
        if p3 < npk:  # the spreading pass wins: rebuild per-pack arrays from its pack_of
            ps = po[items]
            fill = np.bincount(ps, weights=eff[items], minlength=p3).astype(np.int64)
            size = np.bincount(ps, minlength=p3).astype(np.int64)
            npk = p3
    if order == "creation" or npk == 0:
        new_id = np.arange(npk, dtype=np.int64)
    elif order == "shuffle":
        rng = np.random.Generator(np.random.PCG64(0 if seed is None else int(seed)))
        perm = rng.permutation(npk)
        new_id = np.empty(npk, dtype=np.int64)
        new_id[perm] = np.arange(npk, dtype=np.int64)
    else:
        rank = np.argsort(first_seen(items, ps, npk, n), kind="stable")
        new_id = np.empty(npk, dtype=np.int64)
        new_id[rank] = np.arange(npk, dtype=np.int64)
    offsets, ordr, tokens = build(items, ps, fill, size, new_id, pack_ids)
    return pack_ids, offsets, ordr, overlong, tokens
