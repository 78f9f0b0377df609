"""LengthGroupedSampler: token budget, coverage, data-parallel split, determinism (hypothesis), on
the real token lengths of the demo packs as well."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.train.samplers import LengthGroupedSampler


@given(st.lists(st.integers(1, 500), min_size=1, max_size=300), st.integers(1, 4), st.booleans(), st.integers(0, 3))
@settings(max_examples=60)
def test_budget_coverage_and_ranks(lengths, world, drop_last, seed):
    lens = np.array(lengths)
    budget = 1000
    per_rank = [list(LengthGroupedSampler(lens, max_tokens=budget, num_replicas=world, rank=r, seed=seed,
                                          drop_last=drop_last, mega_batch_mult=4)) for r in range(world)]
    assert len({len(b) for b in per_rank}) == 1  # every rank the same number of steps
    for batches in per_rank:
        for b in batches:
            assert len(b) == 1 or lens[b].max() * len(b) <= budget
    seen = [i for batches in per_rank for b in batches for i in b]
    if not drop_last:
        assert set(seen) == set(range(len(lens)))
    else:
        assert len(seen) == len(set(seen))
    again = list(LengthGroupedSampler(lens, max_tokens=budget, num_replicas=world, rank=0, seed=seed,
                                      drop_last=drop_last, mega_batch_mult=4))
    assert again == per_rank[0]


def test_fixed_batch_size_epochs_and_grouping(real_data):
    """On real lengths (characters of the demo set), grouping cuts padding versus random batches."""
    lens = np.array([len(line) for line in open(real_data / "real_sft.jsonl", "rb")][:2000])
    s = LengthGroupedSampler(lens, batch_size=8, seed=1)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert e0 != e1 and sorted(i for b in e0 for i in b) == list(range(len(lens)))
    assert all(len(b) == 8 for b in e0[:-1]) and len(s) == len(e0)
    padded = sum(lens[b].max() * len(b) for b in e0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(lens))
    random_padded = sum(lens[perm[i:i + 8]].max() * len(perm[i:i + 8]) for i in range(0, len(lens), 8))
    assert padded < 0.7 * random_padded
    with pytest.raises(ValueError):
        LengthGroupedSampler(lens, batch_size=8, max_tokens=10)
    with pytest.raises(ValueError):
        LengthGroupedSampler(lens, batch_size=8, num_replicas=2, rank=2)
    assert json.dumps(e0[0])
