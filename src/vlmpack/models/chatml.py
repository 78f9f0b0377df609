"""ChatML rules shared by the families whose templates use ``<|im_start|>role\\n ... <|im_end|>``
turns (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, and the Qwen2/2.5-based InternVL and LLaVA-OneVision).
"""

from __future__ import annotations

import numpy as np


def assistant_label_mask(ids: np.ndarray, *, im_start_id: int, assistant_id: int, im_end_id: int,
                         newline_id: int) -> np.ndarray:
    """bool ``[n]``: True on the tokens of assistant turns that are trained on.

    Found on the token ids of the rendered ChatML template, no text matching: a turn starts at
    ``<|im_start|>`` followed by the role token ``assistant``; the header's ``"\\n"`` token is
    skipped when it is a token of its own (a merged ``"\\n\\n"`` token also holds content and is
    kept); the turn ends at its ``<|im_end|>`` inclusive (the end-of-turn token the model must
    learn to emit). The ``"\\n"`` after ``<|im_end|>`` and every other token stays unlabelled.
    A turn with no ``<|im_end|>`` (truncated) runs to the end of ``ids``.
    """
    ids = np.asarray(ids)
    n = len(ids)
    mask = np.zeros(n, dtype=bool)
    if n < 2:
        return mask
    heads = np.flatnonzero((ids[:-1] == im_start_id) & (ids[1:] == assistant_id))
    if not len(heads):
        return mask
    content = skip_token(ids, heads + 2, newline_id)
    ends = np.flatnonzero(ids == im_end_id)
    k = np.searchsorted(ends, content)
    stop = np.where(k < len(ends), ends[np.minimum(k, len(ends) - 1)] + 1, n)
    return spans_mask(n, content, stop)


def skip_token(ids: np.ndarray, at: np.ndarray, token_id: int) -> np.ndarray:
    """int ``[k]``: each position of ``at`` moved one on where ``ids`` holds ``token_id`` there (a
    header's own ``"\n"`` token before a turn's content); positions at or past the end stay."""
    has = at < len(ids)
    has[has] = ids[at[has]] == token_id
    return at + has


def spans_mask(n: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """bool ``[n]``: True on ``[starts[i], stops[i])`` for every i (positions past ``n`` clipped)."""
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, np.minimum(starts, n), 1)
    np.add.at(delta, np.minimum(stops, n), -1)
    return np.cumsum(delta[:n]) > 0
