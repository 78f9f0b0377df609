"""StreamingPacker: validity, bounded buffer, quality, exact resume; the Energon helper."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.errors import ConfigError, OverlongError
from vlmpack.packing import StreamingPacker, lower_bound_l1, select_samples_to_pack


def _stream(packer: StreamingPacker, lengths, mc=None, mt=None, kinds=None, start: int = 0) -> list[list[int]]:
    out: list[list[int]] = []
    for i in range(start, len(lengths)):
        kw = {}
        if mc is not None:
            kw = {"media_count": int(mc[i]), "media_tokens": int(mt[i]), "kind": int(kinds[i])}
        out += packer.push(i, int(lengths[i]), **kw)
        assert len(packer) <= packer.buffer_size
    return out


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 140), max_size=200),
    buffer=st.integers(1, 40),
    max_n=st.one_of(st.none(), st.integers(1, 5)),
    max_mt=st.one_of(st.none(), st.integers(0, 50)),
    group=st.booleans(),
)
def test_stream_valid(lengths: list[int], buffer: int, max_n: int | None, max_mt: int | None, group: bool) -> None:
    cap = 100
    n = len(lengths)
    rng = np.random.Generator(np.random.PCG64(n))
    kinds = rng.integers(0, 3, n)
    mc = (kinds > 0).astype(int)
    mt = mc * rng.integers(0, 40, n)
    packer = StreamingPacker(cap, buffer, max_samples_per_pack=max_n, max_media_tokens_per_pack=max_mt,
                             group_by_kind=group)
    packs = _stream(packer, lengths, mc, mt, kinds) + packer.flush()
    overlong = packer.pop_overlong()
    seen = sorted([i for p in packs for i in p] + overlong)
    assert seen == list(range(n))
    assert sorted(overlong) == [i for i in range(n) if lengths[i] > cap or (max_mt is not None and mt[i] > max_mt)]
    for p in packs:
        assert p and sum(lengths[i] for i in p) <= cap
        assert max_n is None or len(p) <= max_n
        assert max_mt is None or sum(mt[i] for i in p) <= max_mt
        assert not group or len({int(kinds[i]) for i in p}) == 1


def test_stream_near_lower_bound() -> None:
    """B = 2000 on 60k lognormal chat lengths: within 0.3 % of L1 (the issue's bound at B = 10k)."""
    rng = np.random.Generator(np.random.PCG64(0))
    lengths = np.clip(np.round(rng.lognormal(np.log(350), 1.0, 60_000)), 8, 8192).astype(np.int64)
    packer = StreamingPacker(8192, 2000)
    packs = _stream(packer, lengths) + packer.flush()
    assert len(packs) <= 1.003 * lower_bound_l1(lengths, 8192)
    assert packer.packs_emitted == len(packs)


def test_resume_continues_exactly() -> None:
    rng = np.random.Generator(np.random.PCG64(1))
    lengths = rng.integers(1, 3000, 5000)
    full = StreamingPacker(4096, 300, max_samples_per_pack=6)
    expected = _stream(full, lengths) + full.flush()

    first = StreamingPacker(4096, 300, max_samples_per_pack=6)
    got = _stream(first, lengths[:2345])
    state = json.loads(json.dumps(first.state_dict()))
    resumed = StreamingPacker(4096, 300, max_samples_per_pack=6)
    resumed.load_state_dict(state)
    got += _stream(resumed, lengths, start=2345) + resumed.flush()
    assert got == expected

    with pytest.raises(ConfigError):
        StreamingPacker(4096, 301, max_samples_per_pack=6).load_state_dict(state)


def test_invalid_packer_options() -> None:
    with pytest.raises(ConfigError):
        StreamingPacker(0, 10)
    with pytest.raises(ConfigError):
        StreamingPacker(100, 0)
    with pytest.raises(ConfigError):
        StreamingPacker(100, 10, keep_fraction=1.0)


def test_select_samples_to_pack_for_energon() -> None:
    samples = [f"s{i}" for i in range(6)]
    packs = select_samples_to_pack(samples, [60, 50, 40, 30, 20, 10], 100)
    assert sorted(s for p in packs for s in p) == samples
    assert len(packs) == 3  # 210 tokens: L1 = 3, and BFD reaches it
    with pytest.raises(OverlongError):
        select_samples_to_pack(samples, [160, 50, 40, 30, 20, 10], 100)
    kept = select_samples_to_pack(samples, [160, 50, 40, 30, 20, 10], 100, on_overlong="drop")
    assert sorted(s for p in kept for s in p) == samples[1:]
