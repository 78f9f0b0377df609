"""``vlmpack.packfmt.group_by_key``, the one grouping of tar members into packs / samples: invariants.

The readers built on it are tested on real outputs (``tests/test_writer.py``: ``ShardPacks``
offsets = the ``.tar.idx``; ``tests/test_check.py``: truncated and tampered shards) and real
input shards (``tests/test_sources_wds.py``)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from vlmpack.packfmt import group_by_key, split_member


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers()), max_size=40))
def test_groups_are_the_runs_of_equal_keys(members):
    groups = list(group_by_key(iter(members)))
    assert [item for _, items in groups for item in items] == [item for _, item in members]  # order, nothing lost
    assert all(a[0] != b[0] for a, b in itertools.pairwise(groups))  # a new group only where the key changes
    assert [(k, len(items)) for k, items in groups] == [(k, len(list(g))) for k, g in
                                                        itertools.groupby(members, key=lambda m: m[0])]


def test_split_member_keeps_the_dots_of_the_part():
    assert split_member("pack000000007.img3.png") == ("pack000000007", "img3.png")
    assert split_member("pack000000007.input_ids.npy") == ("pack000000007", "input_ids.npy")
