"""The packing engine: offline algorithms over length arrays, a streaming packer, lower bounds.

Public API::

    from vlmpack.packing import PackPlan, plan_packs, ALGORITHMS, StreamingPacker
    plan = plan_packs(lengths, 8192, algorithm="bfd", max_samples_per_pack=64)

See ``docs/packing.md`` for the algorithms, their sources and the benchmark.
"""

from vlmpack.packing.algorithms import (
    ALGORITHMS,
    bfd,
    ffd,
    first_fit,
    greedy_knapsack,
    next_fit,
    plan_packs,
    window,
)
from vlmpack.packing.bounds import lower_bound_l1, lower_bound_l2
from vlmpack.packing.plan import PackPlan
from vlmpack.packing.streaming import StreamingPacker, select_samples_to_pack

__all__ = [
    "ALGORITHMS",
    "PackPlan",
    "StreamingPacker",
    "bfd",
    "ffd",
    "first_fit",
    "greedy_knapsack",
    "lower_bound_l1",
    "lower_bound_l2",
    "next_fit",
    "plan_packs",
    "select_samples_to_pack",
    "window",
]
