"""The ChatML label scan (:func:`vlmpack.models.chatml.assistant_label_mask`) and
:func:`~vlmpack.models.chatml.spans_mask`, numba kernels, against the NumPy forms they replaced,
restated here as the references, on hypothesis id arrays and spans."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.models.chatml import assistant_label_mask, skip_token, spans_mask

IDS = {"im_start_id": 1, "assistant_id": 2, "im_end_id": 3, "newline_id": 4}


def spans_reference(n: int, starts, stops) -> np.ndarray:
    """``spans_mask`` as NumPy calls (the form it replaced)."""
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, np.minimum(starts, n), 1)
    np.add.at(delta, np.minimum(stops, n), -1)
    return np.cumsum(delta[:n]) > 0


def vectorized_scan(ids: np.ndarray) -> np.ndarray:
    """The rule as NumPy calls: heads ``<|im_start|> assistant``, their content after an own
    ``"\\n"`` token, each span to the first ``<|im_end|>`` at or after it (inclusive), else to the
    end; the union of the spans."""
    n = len(ids)
    mask = np.zeros(n, dtype=bool)
    heads = np.flatnonzero((ids[:-1] == IDS["im_start_id"]) & (ids[1:] == IDS["assistant_id"])) if n >= 2 else []
    if not len(heads):
        return mask
    content = skip_token(ids, heads + 2, IDS["newline_id"])
    ends = np.flatnonzero(ids == IDS["im_end_id"])
    if not len(ends):
        return spans_reference(n, content, np.full(len(content), n))
    k = np.searchsorted(ends, content)
    stop = np.where(k < len(ends), ends[np.minimum(k, len(ends) - 1)] + 1, n)
    return spans_reference(n, content, stop)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=80), st.sampled_from([np.int64, np.int32, np.uint32]))
def test_kernel_equals_the_vectorized_scan(ids, dtype):
    arr = np.array(ids, dtype=dtype)
    assert np.array_equal(assistant_label_mask(arr, **IDS), vectorized_scan(arr))
    assert np.array_equal(assistant_label_mask(ids, **IDS), vectorized_scan(arr))  # a list as it is


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, 40), st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=8))
def test_spans_mask_equals_the_numpy_form(n, spans):
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    stops = np.array([b for _, b in spans], dtype=np.int64)
    assert np.array_equal(spans_mask(n, starts, stops), spans_reference(n, starts, stops))


def test_turns_as_the_rule_says():
    # header "\n" skipped, content and <|im_end|> labelled, the "\n" after it not; a user turn not
    ids = [1, 9, 4, 7, 3, 4, 1, 2, 4, 5, 6, 3, 4]
    assert assistant_label_mask(ids, **IDS).tolist() == [False] * 9 + [True, True, True, False]
    # a merged "\n\n" token (not the newline id) is content; a truncated turn runs to the end
    assert assistant_label_mask([1, 2, 8, 5, 6], **IDS).tolist() == [False, False, True, True, True]
    assert assistant_label_mask([1, 2], **IDS).tolist() == [False, False]
    assert assistant_label_mask([], **IDS).tolist() == []
