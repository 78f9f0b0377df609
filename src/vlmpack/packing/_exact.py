"""numba kernel of the exact-fill refinement of ``bfd`` (a pack-by-pack decreasing fill).

Exact BFD leaves a residual in (0, smallest item) in many packs, which is pure waste: on the
``image`` benchmark distribution at L = 4096 that is ~340 packs over the L2 bound out of 256k.
The refinement packs the same sorted items one pack at a time, aiming at residual 0:

1. an item whose size equals the residual ``R`` closes the pack (exact fit);
2. when ``R <= 2 * smax``, a pair ``c + d == R`` of available sizes closes it (at most
   ``tries`` candidates ``c``, largest first, down to ``R / 2``);
3. otherwise the largest available size ``s <= R - smin`` is taken, unless ``R - s`` would fall
   in a gap of the sums reachable with the remaining sizes (``k*smin > R - s > (k-1)*smax``
   with ``k = ceil((R - s) / smax)``), in which case the largest ``s <= R - k*smin``;
4. when nothing but a too-large remainder is left, the largest ``s <= R`` (the pack ends with a
   residual below ``smin``).

``smin``/``smax`` are the smallest/largest sizes still available (monotone pointers over the
size histogram); "largest available ``<= x``" is a lookup in a two-level bitset over reversed
sizes, so each item costs O(1) word operations plus at most ``tries`` lookups in step 2.

With a sample cap ``K`` (``max_samples_per_pack``), a pack also has ``slots``; step 3 takes the
*smallest* available size instead while the pack holds fewer than ``need`` samples, where
``need = ceil(items left / ceil(tokens left / L))`` is the per-pack share of the remaining
samples, once ``3 * need > 2 * K`` (the cap starts to bind): the small samples are spread over the
packs instead of ending up, alone, in count-capped tail packs. A pack with one slot left only
takes an exact fit or the largest size that fits.

Deterministic: no randomness, ties go to the lowest sorted position of a size. Zero-length
samples are not seen by this kernel (the caller places them).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlmpack.packing._bfd import _bit_clear, _bit_set, _find_ge


@njit(cache=True, inline="always")
def _largest_le(bits, summ, top, x, table):
    """Largest available size ``<= x`` (sizes stored reversed as ``top - s``), or -1."""
    if x < 0:
        return -1
    u = _find_ge(bits, summ, top - min(x, top), table)
    return -1 if u < 0 else top - u


@njit(cache=True)
def exact_fill(cnt, seg, cap, max_n, tries, table):
    """Pack-by-pack exact fill over a size histogram.

    Args:
        cnt: int64 ``[cap+1]`` number of items of each size (size 0 must be 0).
        seg: int64 ``[cap+1]`` sorted position of the first item of each size (items sorted by
            decreasing size, so ``seg[s]`` = number of items larger than ``s``).
        cap: capacity ``L`` in tokens; max_n: sample cap ``K`` (a huge value when unset).
        tries: candidates examined by the pair completion (step 2).

    Returns:
        (ps int32 ``[m]``: pack of each sorted position, fill int64 ``[P]`` tokens per pack,
        size int64 ``[P]`` samples per pack, P).
    """
    top = cap
    pc = cnt.copy()
    ptr = seg.copy()
    nw = ((top + 1) >> 6) + 1
    bits = np.zeros(nw, np.int64)
    summ = np.zeros((nw >> 6) + 1, np.int64)
    left = 0
    vleft = 0
    for s in range(1, top + 1):
        if pc[s] > 0:
            _bit_set(bits, summ, top - s)
            left += pc[s]
            vleft += pc[s] * s
    m = left
    kcap = min(max_n, m + 1)
    ps = np.empty(m, np.int32)
    fill = np.empty(max(m, 1), np.int64)
    size = np.empty(max(m, 1), np.int64)
    smin = 1
    smax = top
    npk = 0
    while left > 0:
        prem = max(1, (vleft + cap - 1) // cap)
        need = (left + prem - 1) // prem
        spread = 3 * need > 2 * kcap
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
            slots = kcap - k_in
            s = -1
            if r <= smax and pc[r] > 0:
                s = r
            elif slots == 1:
                s = _largest_le(bits, summ, top, r, table)
            elif spread and 1 <= k_in < need and smin <= r - smin <= (slots - 1) * smax:
                s = smin
            else:
                if smin * 2 <= r <= 2 * smax:
                    x = min(r - smin, smax)
                    half = (r + 1) // 2
                    k = 0
                    while k < tries:
                        c = _largest_le(bits, summ, top, x, table)
                        if c < half:
                            break
                        d = r - c
                        if pc[d] > 0 and (d != c or pc[c] >= 2):
                            s = c
                            break
                        x = c - 1
                        k += 1
                if s < 0:
                    if r - smin >= smin:
                        s = _largest_le(bits, summ, top, min(r - smin, smax), table)
                        rem = r - s
                        k = (rem + smax - 1) // smax
                        if rem < k * smin and r - k * smin >= smin:
                            s2 = _largest_le(bits, summ, top, r - k * smin, table)
                            if s2 > 0:
                                s = s2
                    else:
                        s = _largest_le(bits, summ, top, r, table)
            if s <= 0:
                break
            ps[ptr[s]] = p
            ptr[s] += 1
            pc[s] -= 1
            if pc[s] == 0:
                _bit_clear(bits, summ, top - s)
            left -= 1
            vleft -= s
            r -= s
            k_in += 1
        fill[p] = cap - r
        size[p] = k_in
    return ps, fill[:npk].copy(), size[:npk].copy(), npk
