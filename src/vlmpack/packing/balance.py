"""Data-parallel shape of a plan: equal global steps, and similar vision load on every rank.

Convention (a pack is one micro-batch, as in packed training): with ``N`` data-parallel ranks and a
global batch of ``K`` packs (Megatron-Core's ``--global-batch-size``: all ranks together, a multiple
of ``N``), pack ``i`` of the output order belongs to global step ``i // K`` and rank ``i % N``, micro
step ``i // N``: the order PyTorch's ``DistributedSampler(shuffle=False)`` (``indices[rank::N]``) and
Megatron's ``MegatronPretrainingSampler`` with micro-batch size 1 give every rank.

- :func:`fill_global_batches`: LMMS-Engine's warning (ranks hang or idle when packs do not divide
  evenly) is met by a pack count that is a multiple of ``K``: the packs with the most samples are
  split in two (their samples dealt largest first to the lighter half) until it is; no sample is
  dropped or repeated, the cost is the packs added.
- :func:`balanced_order`: the ranks of a micro step wait for each other at the gradient
  all-reduce, so the ``N`` packs of a micro step should carry similar vision load (the idea of NeMo's
  ``greedy_knapsack_vt_balanced``, applied to whole packs): packs sorted by vision tokens (then
  tokens) are cut into groups of ``N`` neighbours, one group per micro step; the groups are then
  shuffled (``seed``), and the packs within each, so steps stay a random mix of the data.
- :func:`rank_step_loads`: per global step and rank, the vision tokens and tokens (the per-rank
  ``global_seq_len`` LMMS-Engine's trainer logs), summarized.
"""

from __future__ import annotations

import numpy as np

from vlmpack.errors import ConfigError
from vlmpack.packing.plan import PackPlan


def check_shape(dp_size: int, global_batch_size: int) -> None:
    """:class:`ConfigError` unless both are >= 1 and the global batch is a multiple of ``dp_size``."""
    if dp_size < 1 or global_batch_size < 1 or global_batch_size % dp_size:
        raise ConfigError(f"--global-batch-size {global_batch_size} must be a positive multiple of --dp-size "
                          f"{dp_size} (packs per optimizer step over all data-parallel ranks)")


def from_packs(packs: list[np.ndarray], n: int, overlong: np.ndarray, eff_lengths: np.ndarray, capacity: int,
               algorithm: str) -> PackPlan:
    """A :class:`PackPlan` of ``n`` samples whose packs are ``packs`` (int64 sample indices, each
    ascending) in this order; ``eff_lengths``: int64 ``[n]`` tokens as planned (padded)."""
    sizes = np.array([len(p) for p in packs], dtype=np.int64)
    offsets = np.zeros(len(packs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    order = np.concatenate(packs).astype(np.int64) if packs else np.zeros(0, np.int64)
    pack_ids = np.full(n, -1, dtype=np.int64)
    pack_ids[order] = np.repeat(np.arange(len(packs)), sizes)
    tokens = np.array([int(eff_lengths[p].sum()) for p in packs], dtype=np.int64)
    return PackPlan(pack_ids=pack_ids, offsets=offsets, order=order, overlong=np.asarray(overlong, np.int64),
                    pack_tokens=tokens, capacity=capacity, algorithm=algorithm)


def fill_global_batches(plan: PackPlan, eff_lengths: np.ndarray, global_batch_size: int) -> tuple[PackPlan, int]:
    """``plan`` with a pack count that is a multiple of ``global_batch_size`` (module docstring), and
    the number of packs added. Raises :class:`ConfigError` when too few packs hold two samples."""
    p = plan.num_packs
    need = (-p) % global_batch_size
    if not need:
        return plan, 0
    packs = [plan.pack(i).copy() for i in range(p)]
    sizes = plan.samples_per_pack()
    splittable = np.lexsort((np.arange(p), -sizes))[:need]  # most samples first, then plan order
    if len(splittable) < need or sizes[splittable[-1]] < 2:
        raise ConfigError(f"{p} packs cannot become a multiple of --global-batch-size {global_batch_size}: fewer "
                          f"than {need} packs hold two samples to split; use a smaller global batch")
    for i in sorted(splittable.tolist()):
        members = packs[i]
        halves: list[list[int]] = [[], []]
        load = [0, 0]
        for s in members[np.argsort(-eff_lengths[members], kind="stable")].tolist():
            h = 0 if load[0] <= load[1] else 1
            halves[h].append(s)
            load[h] += int(eff_lengths[s])
        packs[i] = np.sort(np.asarray(halves[0], dtype=np.int64))
        packs.append(np.sort(np.asarray(halves[1], dtype=np.int64)))
    return from_packs(packs, plan.num_samples, plan.overlong, eff_lengths, plan.capacity, plan.algorithm), need


def balanced_order(pack_vision: np.ndarray, pack_tokens: np.ndarray, dp_size: int, seed: int) -> np.ndarray:
    """int64 permutation of the ``P`` packs (``P`` a multiple of ``dp_size``) giving the order to write
    them in: micro steps of ``dp_size`` packs of neighbouring vision load (``pack_vision``, then
    ``pack_tokens``: int64 ``[P]``), micro steps and the packs within each shuffled with ``seed``."""
    p = len(pack_vision)
    by_load = np.lexsort((np.arange(p), -np.asarray(pack_tokens), -np.asarray(pack_vision)))
    groups = by_load.reshape(-1, dp_size)
    rng = np.random.default_rng(seed)
    groups = groups[rng.permutation(len(groups))]
    return rng.permuted(groups, axis=1).reshape(-1).astype(np.int64)


def rank_step_loads(pack_vision: np.ndarray, pack_tokens: np.ndarray, dp_size: int,
                    global_batch_size: int) -> dict:
    """Per global step and rank (module docstring's convention; packs in output order, their count a
    multiple of ``global_batch_size``): vision tokens and tokens summed over the rank's packs.
    Returns ``{"steps", "vision_tokens": {"spread_mean", "spread_max", "max_over_mean"},
    "tokens": {"avg", "min", "max"}}``: ``spread`` = max - min over the ranks of a step (tokens),
    ``max_over_mean`` its largest rank over the step's mean, averaged over steps (1.0 is perfect
    balance; steps without vision tokens count 1.0); ``tokens`` the per-rank ``global_seq_len``."""
    per_rank = global_batch_size // dp_size
    steps = len(pack_vision) // global_batch_size

    def grid(values: np.ndarray) -> np.ndarray:  # [steps, ranks]: micro steps of a step summed per rank
        return np.asarray(values, dtype=np.int64)[:steps * global_batch_size].reshape(
            steps, per_rank, dp_size).sum(axis=1)

    v, t = grid(pack_vision), grid(pack_tokens)
    if not steps:
        return {"steps": 0, "vision_tokens": {"spread_mean": 0.0, "spread_max": 0, "max_over_mean": 1.0},
                "tokens": {"avg": 0.0, "min": 0, "max": 0}}
    spread = v.max(axis=1) - v.min(axis=1)
    mean = v.mean(axis=1)
    ratio = np.where(mean > 0, v.max(axis=1) / np.where(mean > 0, mean, 1), 1.0)
    return {"steps": int(steps),
            "vision_tokens": {"spread_mean": round(float(spread.mean()), 3), "spread_max": int(spread.max()),
                              "max_over_mean": round(float(ratio.mean()), 4)},
            "tokens": {"avg": round(float(t.mean()), 3), "min": int(t.min()), "max": int(t.max())}}
