"""ChatML rules shared by the families whose templates use ``<|im_start|>role\\n ... <|im_end|>``
turns (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, and the Qwen2/2.5-based InternVL and LLaVA-OneVision).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def assistant_label_mask(ids: np.ndarray, *, im_start_id: int, assistant_id: int, im_end_id: int,
                         newline_id: int) -> np.ndarray:
    """bool ``[n]``: True on the tokens of assistant turns that are trained on.

    Found on the token ids of the rendered ChatML template, no text matching: a turn starts at
    ``<|im_start|>`` followed by the role token ``assistant``; the header's ``"\\n"`` token is
    skipped when it is a token of its own (a merged ``"\\n\\n"`` token also holds content and is
    kept); the turn ends at its ``<|im_end|>`` inclusive (the end-of-turn token the model must
    learn to emit). The ``"\\n"`` after ``<|im_end|>`` and every other token stays unlabelled.
    A turn with no ``<|im_end|>`` (truncated) runs to the end of ``ids``.

    One pass of a numba kernel (:func:`_assistant_spans`) over ``ids`` (any integer array or
    sequence; the count stage calls it once per sample, where the dozen small NumPy calls of a
    vectorized scan cost ~65 us a demo sample and the kernel a few).
    """
    ids = np.asarray(ids)
    mask = np.zeros(len(ids), dtype=bool)
    if len(ids) >= 2:
        _assistant_spans(ids, int(im_start_id), int(assistant_id), int(im_end_id), int(newline_id), mask)
    return mask


@njit(cache=True)
def _assistant_spans(ids, im_start_id, assistant_id, im_end_id, newline_id, mask):  # pragma: no cover - numba
    """Set ``mask`` True on every assistant turn's labelled span (see :func:`assistant_label_mask`).
    Turns are met in order, so each span's start and its end (the first ``<|im_end|>`` at or after
    the start, inclusive; else the end of ``ids``) only grow: one forward pointer finds every end,
    and a position is set once (linear in ``len(ids)`` whatever the turns)."""
    n = len(ids)
    end = 0  # the search pointer for the next <|im_end|>
    covered = 0  # positions before it are set already
    for i in range(n - 1):
        if ids[i] != im_start_id or ids[i + 1] != assistant_id:
            continue
        start = i + 2
        if start < n and ids[start] == newline_id:
            start += 1
        end = max(end, start)
        while end < n and ids[end] != im_end_id:
            end += 1
        stop = min(end + 1, n)
        mask[max(start, covered):stop] = True
        covered = max(covered, stop)


def skip_token(ids: np.ndarray, at: np.ndarray, token_id: int) -> np.ndarray:
    """int ``[k]``: each position of ``at`` moved one on where ``ids`` holds ``token_id`` there (a
    header's own ``"\n"`` token before a turn's content); positions at or past the end stay."""
    has = at < len(ids)
    has[has] = ids[at[has]] == token_id
    return at + has


def spans_mask(n: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """bool ``[n]``: True on ``[starts[i], stops[i])`` for every i (positions past ``n`` clipped):
    +1 at each start, -1 at each stop, True where the running sum is positive (one numba pass,
    :func:`_spans`; the GLM-4.1V and Kimi label scans call it once per sample)."""
    mask = np.zeros(n, dtype=bool)
    _spans(np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64), mask)
    return mask


@njit(cache=True)
def _spans(starts, stops, mask):  # pragma: no cover - numba
    n = len(mask)
    delta = np.zeros(n + 1, dtype=np.int64)
    for s in starts:
        delta[min(s, n)] += 1
    for e in stops:
        delta[min(e, n)] -= 1
    run = 0
    for i in range(n):
        run += delta[i]
        mask[i] = run > 0
