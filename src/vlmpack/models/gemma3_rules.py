"""Gemma 3's rules, restated from transformers 5.x for :mod:`vlmpack.models.gemma3`: the number of
pan-and-scan crops of an image (:func:`pan_and_scan_crops`), the ``input_ids`` the processor gives
for an image with crops (:class:`ImageText`, :func:`expand_images`) and the attention masks
``Gemma3Model`` builds from ``token_type_ids``, per sample of a packed row
(:func:`packed_attention_masks`).

Why the text side needs care: ``Gemma3Processor.replace_image_token`` replaces each
``<start_of_image>`` of the rendered text with ``"\\n\\n" + <start_of_image> + <image_soft_token> *
image_seq_length + <end_of_image> + "\\n\\n"`` (``full_image_sequence``), and with pan-and-scan crops
with ``"Here is the original image " + full_image_sequence + " and here are some crops to help you
see better " + " ".join([full_image_sequence] * crops)``; the whole text is then tokenized. In the
Gemma 3 tokenizer, runs of ``"\\n"`` are (non-special) added tokens (``"\\n"``, ``"\\n\\n"``, ... up
to 31), so the ``"\\n\\n"`` around an image joins the newlines of the text next to it into one
token, and ``"Here is the original image "`` joins the text before it in one BPE piece: the
tokens around an image depend on its neighbours, never a constant per image. What stays exact:
the tokenizer cuts the text at every added token and encodes each piece alone, and the soft tokens
are special added tokens, so a text holding *one* soft token per image block has the same pieces
as the processor's text, and its ids become the processor's by repeating each soft token
``image_seq_length`` times (:func:`expand_images`, crops 0). With crops, only the pieces that
touch the new text change: the text before the image (``tail`` + its ``m`` trailing newlines) is
encoded again with ``"Here is the original image "``, and the pieces between the crops are
encoded alone (special tokens on both sides); the text after the last crop is the same as
without crops.

Source: transformers 5.x ``models/gemma3/processing_gemma3.py`` (``replace_image_token``,
``full_image_sequence``), ``image_processing_pil_gemma3.py`` (``pan_and_scan``) and
``modeling_gemma3.py`` (``get_block_sequence_ids_for_mask``, ``create_masks_for_vision_model``),
``masking_utils.py`` (``blockwise_overlay``, ``sliding_window_overlay``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ImageText", "expand_images", "newline_run", "packed_attention_masks", "pan_and_scan_crops", "tail_start"]


def pan_and_scan_crops(width: int, height: int, *, min_crop_size: int, max_num_crops: int,
                       min_ratio_to_activate: float) -> int:
    """Crops ``Gemma3ImageProcessorPil.pan_and_scan`` cuts from an image of ``width`` x ``height``
    pixels (as decoded: after EXIF orientation), step for step: none when the long side is less
    than ``min_ratio_to_activate`` times the short one; else ``round(long / short)`` (half up)
    crops along the long side, at most ``long // min_crop_size``, then clamped to ``[2,
    max_num_crops]``; none when a crop (``ceil(side / crops)``, and the short side) would be smaller
    than ``min_crop_size``. Returns the number of crops (0: the image alone)."""
    if width >= height:
        if width / height < min_ratio_to_activate:
            return 0
        n_w = int(math.floor(width / height + 0.5))
        n_w = min(int(math.floor(width / min_crop_size)), n_w)
        n_w = min(max_num_crops, max(2, n_w))
        n_h = 1
    else:
        if height / width < min_ratio_to_activate:
            return 0
        n_h = int(math.floor(height / width + 0.5))
        n_h = min(int(math.floor(height / min_crop_size)), n_h)
        n_h = min(max_num_crops, max(2, n_h))
        n_w = 1
    if min(int(math.ceil(width / n_w)), int(math.ceil(height / n_h))) < min_crop_size:
        return 0
    return n_w * n_h


@dataclass(frozen=True)
class ImageText:
    """The token ids of what ``Gemma3Processor`` writes for an image, cut at its special tokens.

    ``boi``, ``soft``, ``eoi``: ids of ``<start_of_image>``, ``<image_soft_token>``,
    ``<end_of_image>``; ``seq_len``: ``image_seq_length``; ``newline_ids``: id -> number of
    ``"\\n"`` of each newline-run added token; ``original``: ids of ``"Here is the original image "``
    encoded alone (the text before the image with crops, less its final ``"\\n\\n"``), ``original_text``
    that text; ``lead``: ids of the ``"\\n\\n"`` every image block starts with; ``joins``: ids of the
    text between the original image and the first crop, then between two crops (each encoded
    alone); ``encode``: text -> ids (``add_special_tokens=False``, ``split_special_tokens=True``);
    ``decode``: ids -> text."""

    boi: int
    soft: int
    eoi: int
    seq_len: int
    newline_ids: dict
    original: tuple
    original_text: str
    lead: tuple
    joins: tuple
    encode: Callable[[str], list]
    decode: Callable[[list], str]


def newline_run(ids: np.ndarray, end: int, floor: int, newline_ids: dict) -> tuple[int, int]:
    """``(start, newlines)``: the run of newline tokens of ``ids`` that ends before ``end`` (not
    before ``floor``) and how many ``"\\n"`` it holds."""
    start, count = end, 0
    while start > floor and int(ids[start - 1]) in newline_ids:
        start -= 1
        count += newline_ids[int(ids[start])]
    return start, count


def tail_start(ids: np.ndarray, end: int, floor: int, is_added: Callable[[int], bool]) -> int:
    """Start of the text piece of ``ids`` that ends before ``end``: after the previous added token
    (the tokenizer cuts the text there and encodes each piece alone), not before ``floor``."""
    seg = end
    while seg > floor and not is_added(int(ids[seg - 1])):
        seg -= 1
    return seg


def expand_images(ids: np.ndarray, crops: Sequence[int], t: ImageText, is_added: Callable[[int], bool]) -> np.ndarray:
    """The processor's ``input_ids`` from ids rendered with one ``<image_soft_token>`` per image
    (``"\\n\\n" <boi><soft><eoi> "\\n\\n"``, see the module docstring): image ``i`` becomes its
    ``seq_len`` soft tokens and, with ``crops[i]`` > 0, ``"Here is the original image "`` joined to
    the text before it, then its crops, each a block of ``seq_len`` soft tokens after the join text.
    ``is_added``: whether an id is an added token (the tokenizer cuts the text there). Returns int64
    ``[n]``; ``ValueError`` when the ids do not hold one ``<boi><soft><eoi>`` per entry of ``crops``
    or the text before an image with crops is not ``"\\n\\n"``-terminated as rendered."""
    ids = np.asarray(ids, dtype=np.int64)
    starts = np.flatnonzero(ids == t.boi)
    if len(starts) != len(crops):
        raise ValueError(f"{len(starts)} image blocks in the ids for {len(crops)} images")
    block = np.full(t.seq_len, t.soft, dtype=np.int64)
    out: list = []
    prev = 0
    for b, c in zip(starts.tolist(), crops):
        if b + 2 >= len(ids) or ids[b + 1] != t.soft or ids[b + 2] != t.eoi:
            raise ValueError(f"image block at token {b} is not <start_of_image><image_soft_token><end_of_image>")
        if c:
            q, newlines = newline_run(ids, b, prev, t.newline_ids)
            if newlines < 2:
                raise ValueError(f"image at token {b} does not follow the processor's '\\n\\n'")
            m = newlines - 2  # the text's own newlines before the image
            if m:  # an added token ends the text: the original-image text is a piece of its own
                out += [ids[prev:q], t.encode("\n" * m), t.original]
            else:  # the text's last piece (after its last added token) joins the original-image text
                seg = tail_start(ids, q, prev, is_added)
                out += [ids[prev:seg],
                        t.encode(t.decode(ids[seg:q].tolist()) + t.original_text) if seg < q else t.original]
            out += [t.lead, [t.boi], block, [t.eoi]]
            for k in range(int(c)):
                out += [t.joins[min(k, 1)], [t.boi], block, [t.eoi]]
        else:
            out += [ids[prev:b], [t.boi], block, [t.eoi]]
        prev = b + 3
    out.append(ids[prev:])
    return np.concatenate([np.asarray(x, dtype=np.int64) for x in out])


def packed_attention_masks(input_ids, seq_idx, image_token_id: int, sliding_window: int | None, *,
                           additive_dtype=None) -> dict:
    """The attention masks ``Gemma3Model.forward`` builds from ``token_type_ids`` for one sample
    (``create_masks_for_vision_model``), for every sample of a packed row at once.

    ``input_ids``, ``seq_idx``: int ``[1, T]`` or ``[T]`` (the collator's row and the segment of
    every token). A run of consecutive ``image_token_id`` tokens is one block
    (``get_block_sequence_ids_for_mask``: ``token_type_ids == 1``, i.e. each image's or crop's soft
    tokens); token ``q`` may attend to ``k`` iff both are in the same segment and (``k <= q`` or
    both are in the same block): ``"full_attention"``; ``"sliding_attention"`` also needs ``k > q -
    sliding_window`` (``sliding_window_overlay``, after the OR, so a block still sees its own
    future tokens). Returns ``{"full_attention": m, "sliding_attention": m}``, each ``[1, 1, T, T]``:
    bool (True = attend; what ``sdpa`` takes) or, with ``additive_dtype``, 0 / ``finfo.min`` of that
    dtype (what ``eager`` adds to the scores). Memory: a few ``T x T`` bool tensors."""
    import torch

    ids = torch.as_tensor(np.asarray(input_ids)).reshape(-1)
    seg = torch.as_tensor(np.asarray(seq_idx)).reshape(-1)
    t = ids.numel()
    is_img = ids == image_token_id
    starts = is_img & ~torch.cat([torch.zeros(1, dtype=torch.bool), is_img[:-1]])
    block = torch.where(is_img, torch.cumsum(starts.to(torch.int32), 0) - 1, -1).to(torch.int32)
    pos = torch.arange(t, dtype=torch.int32)
    full = pos[None, :] <= pos[:, None]
    full |= (block[:, None] == block[None, :]) & is_img[:, None]
    full &= seg[:, None] == seg[None, :]
    sliding = full & (pos[None, :] > pos[:, None] - sliding_window) if sliding_window else full.clone()
    out = {"full_attention": full[None, None], "sliding_attention": sliding[None, None]}
    if additive_dtype is not None:
        low = torch.finfo(additive_dtype).min
        out = {k: torch.zeros(m.shape, dtype=additive_dtype).masked_fill_(~m, low) for k, m in out.items()}
    return out
