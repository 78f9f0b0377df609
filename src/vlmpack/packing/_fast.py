"""The fast path of ``bfd`` (token capacity and optional sample cap only; no media budgets, no
kind groups): size histogram, the exact-fill refinement and its tail repair, exact BFD with a
proof-based early stop, and the output build.

Memory traffic is what costs at n = 1e7, so:

* the lengths are only counted (a size histogram); the sorted order (decreasing size, ties by
  ascending index) is never materialised: the sorted position of a sample is implied by its
  size and the number of earlier samples of that size;
* the kernels walk the histogram and record the pack of each *sorted position* (int32);
* the output is built in two sequential passes in sample order: ``pack_ids[i]`` from a cursor
  per size, then the CSR ``order`` (so each pack lists ascending indices); offsets and
  ``pack_tokens`` come from the per-pack counters of the kernels (no bincount).

Peak extra memory: ps (int32, 4 B per sample, 8 B while the refinement and BFD both exist)
and the two int64 outputs: < 30 bytes per sample.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlmpack.packing import _bfd, _exact, _kernels, _tail

PAIR_TRIES = 32  # candidates of the pair completion of the exact fill (see _exact)


@njit(cache=True)
def hist_sort(eff, cap):
    """Counting sort by decreasing length, ties by ascending index (the BFD item order).

    eff: int64 ``[n]``. Returns items int32 ``[m]``: the indices of the samples that fit
    (``eff <= cap``), longest first; overlong samples are left out (see :func:`hist_count`).
    """
    cnt, _ = hist_count(eff, cap)
    start = np.empty(cap + 1, np.int64)
    acc = 0
    for v in range(cap, -1, -1):
        start[v] = acc
        acc += cnt[v]
    items = np.empty(acc, np.int32)
    for i in range(eff.shape[0]):
        v = eff[i]
        if v <= cap:
            items[start[v]] = i
            start[v] += 1
    return items


@njit(cache=True)
def bfd_hist(cnt, cap, max_n, table):
    """Exact BFD over a size histogram (largest size first); a pack at ``max_n`` samples closes.

    Same rule and tie-breaking as ``_bfd.bfd_plain``. Returns (ps int32 ``[m]`` pack of each
    sorted position, fill int64 ``[P]``, size int64 ``[P]``, P).
    """
    return bfd_hist_until(cnt, cap, max_n, table, np.int64(2**62))


@njit(cache=True)
def bfd_hist_until(cnt, cap, max_n, table, stop):
    """:func:`bfd_hist` that gives up (returns P = -1) once it provably needs ``>= stop`` packs.

    Certificate: BFD never takes items out of a pack, so a residual smaller than the smallest
    positive size ``smin`` (or the residual of a pack closed at ``max_n`` samples) stays empty to
    the end. With ``D`` the sum of such dead residuals so far and ``V`` the total volume, the
    final plan has ``P * L >= V + D`` tokens of room, so ``ceil((V + D) / L) >= stop`` (or
    ``stop`` packs already open) proves that BFD cannot beat a plan of ``stop`` packs.
    """
    m = 0
    vol = 0
    smin = cap + 1
    for v in range(cap + 1):
        m += cnt[v]
        vol += cnt[v] * v
        if v > 0 and cnt[v] > 0 and v < smin:
            smin = v
    dead = 0
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
                if npacks >= stop:
                    return ps, fill[:0].copy(), size[:0].copy(), -1
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
            full = size[p] >= max_n
            if (s > 0 and nr < smin) or (full and nr >= smin):  # the residual dies (once)
                dead += nr
                if npacks >= stop or (vol + dead + cap - 1) // cap >= stop:
                    return ps, fill[:0].copy(), size[:0].copy(), -1
            if full:
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
def hist_count(eff, cap):
    """Size histogram of the samples that fit: (cnt int64 ``[cap+1]``, overlong int64 ascending).

    One read of ``eff`` (a second one only to list the overlong samples, when there are any)."""
    n = eff.shape[0]
    cnt = np.zeros(cap + 1, np.int64)
    nover = 0
    for i in range(n):
        v = eff[i]
        if v <= cap:
            cnt[v] += 1
        else:
            nover += 1
    over = np.empty(nover, np.int64)
    if nover:
        k = 0
        for i in range(n):
            if eff[i] > cap:
                over[k] = i
                k += 1
    return cnt, over


@njit(cache=True)
def build(eff, cap, seg, ps, fill, size, new_id):
    """Output build in two sequential passes in sample order (no sorted index array needed).

    The sorted position of sample ``i`` is implied by the stable counting sort (``seg[v]`` =
    first position of size ``v``, then one more per earlier sample of that size), so pass 1
    writes ``pack_ids[i] = new_id[ps[pos]]`` and pass 2 the CSR slot of ``i`` (packs list
    ascending indices). Returns (pack_ids int64 ``[n]`` with -1 for overlong,
    offsets int64 ``[P+1]``, order int64 ``[m]``, pack_tokens int64 ``[P]``).
    """
    npk = fill.shape[0]
    n = eff.shape[0]
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
    pos = seg.astype(np.int32)
    pack_ids = np.empty(n, np.int64)
    for i in range(n):
        v = eff[i]
        if v > cap:
            pack_ids[i] = -1
        else:
            pack_ids[i] = nid[ps[pos[v]]]
            pos[v] += 1
    order = np.empty(acc, np.int64)
    for i in range(n):  # a second pass: shorter dependency chains than one fused pass (measured)
        q = pack_ids[i]
        if q >= 0:
            order[cur[q]] = i
            cur[q] += 1
    return pack_ids, offsets, order, tokens


@njit(cache=True)
def first_seen(eff, cap, seg, ps, npk):
    """Smallest sample index of each pack (for order="input"), positions as in :func:`build`."""
    n = eff.shape[0]
    first = np.full(npk, n, np.int64)
    pos = seg.astype(np.int32)
    for i in range(n):
        v = eff[i]
        if v > cap:
            continue
        p = ps[pos[v]]
        pos[v] += 1
        if first[p] == n:
            first[p] = i
    return first


def plan(eff: np.ndarray, cap: int, max_n: int, order: str, seed: int | None) -> tuple:
    """The ``bfd`` fast path. eff: int64 ``[n]`` rounded lengths; max_n: sample cap (huge if
    unset). Returns (pack_ids, offsets, order, overlong, pack_tokens), all int64.

    Candidates, in order, each tried only while the best plan so far is above the lower bound
    ``lb = max(L2, ceil(m / K))`` (a plan at ``lb`` is optimal in pack count):

    1. the exact-fill refinement (``_exact``);
    2. its tail repair (``_tail.repair``), kept when it has strictly fewer packs;
    3. exact BFD, stopped as soon as its dead residuals prove it needs at least as many packs
       (``bfd_hist_until``); kept when it finishes (then it has strictly fewer);
    4. with a sample cap, the small-sample spreading BFD (``_bfd.bfd_capped``), kept when
       strictly better.

    So the result never has more packs than plain BFD, and it is deterministic.
    """
    table = _bfd.DEBRUIJN_TABLE
    cnt, overlong = hist_count(eff, cap)
    m = int(cnt.sum())
    nzero = int(cnt[0])
    lb = max(int(l2_hist(cnt, cap)), -(-m // int(min(max_n, m + 1)))) if m else 0
    seg = np.empty(cap + 1, np.int64)
    seg[::-1] = np.concatenate(([0], np.cumsum(cnt[::-1])[:-1]))
    best = None
    if m > nzero:
        c2 = cnt.copy()
        c2[0] = 0
        ps2, f2, s2, p2 = _exact.exact_fill(c2, seg, cap, max_n, PAIR_TRIES, table)
        if p2 > lb:
            nbig = int(cnt[cap // 2 + 1 :].sum())
            f2, s2, p2 = _tail.repair(c2, seg, cap, ps2, f2, s2, nbig, max_n, PAIR_TRIES, table)
        if nzero:
            ps2 = np.concatenate((ps2, np.empty(nzero, np.int32)))
            f2, s2, p2 = add_zeros(ps2, f2, s2, m - nzero, nzero, max_n)
        best = (ps2, f2, s2, int(p2))
    if best is None or best[3] > lb:  # not provably optimal: plain BFD unless provably not better
        stop = np.int64(2**62) if best is None else np.int64(best[3])
        ps, fill, size, npk = bfd_hist_until(cnt, cap, max_n, table, stop)
        if npk >= 0:  # finished, so strictly fewer packs than the refinement
            best = (ps, fill, size, int(npk))
    ps, fill, size, npk = best
    if max_n != _bfd.UNSET and npk > lb:
        items = hist_sort(eff, cap)
        po, p3 = _bfd.bfd_capped(eff, items, cap, np.int64(max_n), eff.shape[0])
        if p3 < npk:  # the spreading pass wins: rebuild per-pack arrays from its pack_of
            ps = po[items]
            fill = np.bincount(ps, weights=eff[items], minlength=p3).astype(np.int64)
            size = np.bincount(ps, minlength=p3).astype(np.int64)
            npk = p3
    new_id = _kernels.pack_renumbering(npk, order, seed, lambda: first_seen(eff, cap, seg, ps, npk))
    pack_ids, offsets, ordr, tokens = build(eff, cap, seg, ps, fill, size, new_id)
    return pack_ids, offsets, ordr, overlong, tokens
