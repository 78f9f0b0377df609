"""Pure rules of the SmolVLM family (:mod:`vlmpack.models.smolvlm`): the tile grid of an image from
its size (``SmolVLMImageProcessorPil``'s resize and split, restated) and the label scan of the
SmolVLM chat template's turns."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vlmpack.errors import ConfigError

__all__ = ["edge", "image_grid", "turn_label_mask"]


def edge(value) -> int | None:
    """``value["longest_edge"]`` of a size dict or ``SizeDict`` (None when absent)."""
    got = value.get("longest_edge") if isinstance(value, dict) else getattr(value, "longest_edge", None)
    return None if got is None else int(got)


def image_grid(height: int, width: int, *, do_resize: bool, size, do_image_splitting: bool,
               tile: int) -> tuple[int, int]:
    """``(rows, cols)`` of tiles ``SmolVLMImageProcessorPil._preprocess`` makes of an image of
    ``height`` x ``width`` pixels; ``(0, 0)`` when it is not split (one ``tile`` x ``tile`` image).

    ``size``: the processor's ``size`` (``longest_edge``, or ``height`` and ``width``); ``tile``:
    ``max_image_size["longest_edge"]`` in pixels. Step for step: ``resize`` (with
    ``get_resize_output_image_size``'s two transformers helpers), ``resize_for_vision_encoder``
    (the same float and integer operations) and ``split_images``. Raises :class:`ConfigError`
    for a ``size`` without either form (the processor raises ``ValueError`` then)."""
    from transformers.models.smolvlm.image_processing_pil_smolvlm import (
        MAX_IMAGE_SIZE,
        _resize_output_size_rescale_to_max_len,
        _resize_output_size_scale_below_upper_bound,
    )

    h, w = int(height), int(width)
    if do_resize:
        longest = edge(size)
        if longest:
            h, w = _resize_output_size_rescale_to_max_len(h, w, max_len=longest)
            h, w = _resize_output_size_scale_below_upper_bound(h, w, max_len=MAX_IMAGE_SIZE)
        elif getattr(size, "height", None) and getattr(size, "width", None):
            h, w = int(size.height), int(size.width)
        else:
            raise ConfigError(f"size {size!r} has neither longest_edge nor height and width")
    if not do_image_splitting:
        return 0, 0
    aspect = w / h
    if w >= h:
        w = math.ceil(w / tile) * tile
        h = math.ceil(int(w / aspect) / tile) * tile
    else:
        h = math.ceil(h / tile) * tile
        w = math.ceil(int(h * aspect) / tile) * tile
    if h > tile or w > tile:
        return (h - tile) // tile + 1, (w - tile) // tile + 1
    return 0, 0


def turn_label_mask(ids: np.ndarray, *, head: Sequence[int], turn_start_id: int, end_id: int,
                    newline_id: int) -> np.ndarray:
    """bool ``[n]``: True on the content of each assistant turn of SmolVLM's chat template and its
    end-of-turn token. A turn is the ids ``head`` (``"Assistant:"``) right after ``turn_start_id``
    (``<|im_start|>``, the first turn) or after ``end_id`` + ``newline_id``
    (``<end_of_utterance>`` ``"\\n"``, the end of the turn before); what follows is trained on up to
    and including the next ``end_id`` (to the end of ``ids`` without one). Found on the ids, no text
    matching; a ``head`` elsewhere (inside a user text) starts nothing."""
    ids = np.asarray(ids)
    n, h = len(ids), len(head)
    mask = np.zeros(n, dtype=bool)
    if not h or n < h + 1:
        return mask
    win = np.lib.stride_tricks.sliding_window_view(ids, h)
    at = np.flatnonzero((win == np.asarray(head)).all(axis=1))
    at = at[at >= 1]
    first = ids[at - 1] == turn_start_id
    after_turn = (at >= 2) & (ids[at - 1] == newline_id) & (ids[np.maximum(at - 2, 0)] == end_id)
    ends = np.flatnonzero(ids == end_id)
    for start in (at[first | after_turn] + h).tolist():
        k = np.searchsorted(ends, start)
        mask[start:int(ends[k]) + 1 if k < len(ends) else n] = True
    return mask
