"""Invariants of the segment metadata, the block mask, loss weights, the label scan and the fast
mRoPE (hypothesis; the references are written out naively here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.train.encode import assistant_label_mask
from vlmpack.train.masks import block_causal_mask, loss_weights, padded_length, segments
from vlmpack.train.rope import MRopeIndexer, mrope_positions_numpy

lengths_st = st.lists(st.integers(1, 40), min_size=1, max_size=12)


@given(lengths_st, st.sampled_from([None, 1, 8, 64]), st.integers(0, 2))
def test_segments_match_a_naive_reference(lens, mult, start):
    seg = segments(lens, pad_to_multiple_of=mult, position_start=start)
    real = sum(lens)
    total = padded_length(real, mult)
    assert seg.total == total and seg.num_real == real and total % (mult or 1) == 0
    assert seg.pad == total - real < (mult or 1)
    all_lens = lens + ([seg.pad] if seg.pad else [])
    assert seg.position_ids.tolist() == [start + i for n in all_lens for i in range(n)]
    assert seg.seq_idx.tolist() == [k for k, n in enumerate(all_lens) for _ in range(n)]
    assert seg.cu_seqlens.dtype == np.int32 and seg.cu_seqlens.tolist() == np.cumsum([0] + lens).tolist()
    assert seg.cu_seqlens_padded.tolist() == np.cumsum([0] + all_lens).tolist()
    assert type(seg.max_seqlen) is int and seg.max_seqlen == max(lens)


@given(lengths_st, st.sampled_from([2, 4, 8, 16]), st.sampled_from([None, 1, 8, 12]), st.integers(0, 2))
def test_aligned_segments_pad_every_sample_to_its_multiple(lens, m, mult, start):
    """THD context parallelism: each sample's span is its tokens then padding up to a multiple of m;
    a pack-level multiple extends the last span; both cu_seqlens have n+1 entries."""
    seg = segments(lens, pad_to_multiple_of=mult, position_start=start, sample_multiple=m)
    spans = [-(-n // m) * m for n in lens]
    pack_m = int(np.lcm(m, mult or 1))
    spans[-1] += -(-sum(spans) // pack_m) * pack_m - sum(spans)
    assert seg.cu_seqlens.tolist() == np.cumsum([0] + lens).tolist()
    assert seg.cu_seqlens_padded.tolist() == np.cumsum([0] + spans).tolist()
    assert all(s % m == 0 for s in spans) and seg.total % pack_m == 0 and seg.pad == seg.total - sum(lens)
    assert seg.starts.tolist() == np.cumsum([0] + spans)[:-1].tolist()
    assert seg.real_index().tolist() == [a + i for a, n in zip(seg.starts.tolist(), lens) for i in range(n)]
    assert seg.position_ids.tolist() == [start + i for n in spans for i in range(n)]
    assert seg.seq_idx.tolist() == [k for k, n in enumerate(spans) for _ in range(n)]
    assert seg.max_seqlen == max(lens) and seg.max_seqlen_padded == max(spans)


@given(lengths_st)
@settings(max_examples=30)
def test_block_mask_is_same_segment_and_causal(lens):
    seg = segments(lens)
    m = block_causal_mask(seg.seq_idx)[0, 0]
    t = sum(lens)
    ref = torch.zeros(t, t, dtype=torch.bool)
    for a, z in zip(seg.cu_seqlens[:-1], seg.cu_seqlens[1:]):
        ref[a:z, a:z] = torch.ones(z - a, z - a, dtype=torch.bool).tril()
    assert torch.equal(m, ref)


@given(lengths_st, st.data())
def test_loss_weights(lens, data):
    seg = segments(lens)
    labels = np.array(data.draw(st.lists(st.sampled_from([-100, 5]), min_size=sum(lens), max_size=sum(lens))))
    n = int((labels != -100).sum())
    wt = loss_weights(labels, seg.seq_idx, "token", len(lens))
    ws = loss_weights(labels, seg.seq_idx, "sample", len(lens))
    assert (wt[labels == -100] == 0).all() and (ws[labels == -100] == 0).all()
    if n:
        assert abs(wt.sum() - 1) < 1e-5 and abs(ws.sum() - 1) < 1e-5
        per = [ws[seg.seq_idx == k].sum() for k in range(len(lens)) if (labels[seg.seq_idx == k] != -100).any()]
        assert np.allclose(per, 1 / len(per), atol=1e-6)
    with pytest.raises(ValueError):
        loss_weights(labels, seg.seq_idx, "sqrt", len(lens))


S, A, E, NL = 1, 2, 3, 4  # <|im_start|>, assistant, <|im_end|>, "\n"


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), st.lists(st.integers(10, 20), max_size=5),
                          st.booleans()), min_size=1, max_size=6))
def test_label_scan_marks_assistant_content_and_im_end(turns):
    ids, want = [], []
    for role, content, nl in turns:
        head = [S, A if role == "assistant" else 7] + ([NL] if nl else [])
        ids += head + content + [E, NL]
        lab = role == "assistant"
        want += [False] * len(head) + [lab] * len(content) + [lab, False]
    got = assistant_label_mask(np.array(ids), im_start_id=S, assistant_id=A, im_end_id=E, newline_id=NL)
    assert got.tolist() == want


@pytest.fixture(scope="module")
def indexer(model_dir):
    return MRopeIndexer(model_dir, 151655, impl="transformers")


@given(st.lists(st.tuples(st.integers(0, 5), st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), max_size=3)),
                min_size=1, max_size=4), st.data())
@settings(max_examples=40, deadline=None)
def test_numpy_mrope_equals_transformers_get_rope_index(indexer, samples, data):
    pad = 151655
    ids_parts, grids, lengths = [], [], []
    for n_text, imgs in samples:
        parts = [np.array(data.draw(st.lists(st.integers(10, 900), min_size=n_text + 1, max_size=n_text + 1)))]
        g = np.array([[1, 2 * h, 2 * w] for h, w in imgs], dtype=np.int64).reshape(-1, 3)
        for _, h, w in g:
            parts += [np.full(h * w // 4, pad), np.array([11])]
        s = np.concatenate(parts)
        ids_parts.append(s)
        grids.append(g)
        lengths.append(len(s))
    ids = np.concatenate(ids_parts)
    fast = mrope_positions_numpy(ids, lengths, grids, pad, 2)
    assert np.array_equal(fast, indexer.pack_positions(ids, lengths, grids))


def test_numpy_mrope_rejects_grids_that_do_not_match(indexer):
    ids = np.array([5, 151655, 151655, 6])
    with pytest.raises(ValueError, match="image"):
        mrope_positions_numpy(ids, [4], [np.array([[1, 2, 2]])], 151655, 2)  # 1 token expected, 2 given
