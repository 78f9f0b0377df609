"""Segment metadata of a packed row: positions, ``cu_seqlens``, segment ids, block masks, loss weights.

Everything here is a pure function of the segment lengths (O(T) memory), except
:func:`block_causal_mask`, the only dense ``T x T`` object, built only when asked for
(USERS.md theme M: never materialise seq x seq masks by default).

Conventions (USERS.md themes A, B, N, O):
- a *segment* is one sample of a pack; padding added by ``pad_to_multiple_of`` is one extra
  segment of its own, never attended to by a real token and never labelled; with
  ``sample_multiple`` (THD context parallelism) each sample's padding follows its tokens instead;
- ``cu_seqlens`` are the int32 prefix sums FlashAttention's varlen kernels take
  (``flash_attn_varlen_func(cu_seqlens_q=..., max_seqlen_q=...)``), ``max_seqlen`` a Python int
  (a tensor makes FlashAttention / torch.compile recompile, flash-attention#2507).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from vlmpack.packing.alignment import aligned_lengths

LossWeighting = Literal["token", "sample"]


@dataclass(frozen=True, slots=True)
class Segments:
    """Segment layout of one packed row of ``total`` tokens.

    Two paddings exist. Without ``sample_multiple`` the row is the samples back to back and the
    padding to ``pad_to_multiple_of`` is appended as a segment of its own. With ``sample_multiple``
    (context parallelism in Megatron-Core's THD layout, :mod:`vlmpack.packing.alignment`) every
    sample's span is its tokens followed by padding up to a multiple of ``sample_multiple``, and the
    padding to ``pad_to_multiple_of`` joins the last sample's span: Transformer Engine's
    ``cu_seqlens`` (real lengths) and ``cu_seqlens_padded`` (span offsets) then have ``n+1`` entries.

    Attributes:
      lengths: int64 ``[n]`` real segment lengths in tokens (samples, in order).
      pad: padding tokens in the row (0 without ``pad_to_multiple_of`` and ``sample_multiple``).
      cu_seqlens: int32 ``[n+1]`` prefix sums of ``lengths`` (real tokens only).
      cu_seqlens_padded: int32 ``[n+1]`` offsets of the sample spans in the row, or ``[n+2]``
        (``cu_seqlens`` plus the padding segment's end when ``pad > 0`` without ``sample_multiple``);
        covers every token of the padded row: use it for varlen kernels over the padded tensor.
      starts: int64 ``[n]`` row offset of each sample's first token.
      max_seqlen: longest real segment (Python int); ``max_seqlen_padded``: longest span.
      seq_idx: int32 ``[total]`` segment index of every token; padding tokens get their span's
        sample, or ``n`` for an appended padding segment.
      position_ids: int64 ``[total]`` positions restarting at ``start`` in every span (an appended
        padding segment too, so that it forms its own segment for position-based boundary detection).
      sample_multiple: the multiple every span is padded to (1: none).
    """

    lengths: np.ndarray
    pad: int
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    starts: np.ndarray
    max_seqlen: int
    max_seqlen_padded: int
    seq_idx: np.ndarray
    position_ids: np.ndarray
    sample_multiple: int = 1

    @property
    def total(self) -> int:
        """Tokens in the row including padding."""
        return int(self.cu_seqlens_padded[-1])

    @property
    def num_real(self) -> int:
        """Tokens in the row without padding."""
        return int(self.cu_seqlens[-1])

    def real_index(self) -> np.ndarray:
        """int64 ``[num_real]``: the row position of each real token (the samples' tokens in order)."""
        shift = np.repeat(self.starts - self.cu_seqlens[:-1].astype(np.int64), self.lengths)
        return np.arange(self.num_real, dtype=np.int64) + shift


def padded_length(total: int, pad_to_multiple_of: int | None) -> int:
    """``total`` rounded up to a multiple of ``pad_to_multiple_of`` (``total`` when None or 1)."""
    if not pad_to_multiple_of or pad_to_multiple_of <= 1:
        return total
    m = int(pad_to_multiple_of)
    return -(-total // m) * m


def segments(lengths: Sequence[int] | np.ndarray, *, pad_to_multiple_of: int | None = None,
             position_start: int = 0, sample_multiple: int = 1) -> Segments:
    """The :class:`Segments` of a row whose samples have ``lengths`` tokens.

    ``position_start`` is the first position of each segment (0 for Qwen/Llama; 2 for
    RoBERTa-style models, transformers#47496). ``sample_multiple``: pad every sample's span to a
    multiple of it (the row length is then a multiple of ``lcm(sample_multiple, pad_to_multiple_of)``).
    Raises ``ValueError`` for a non-positive length or multiple. Cost: O(T) time and memory, vectorised.
    """
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if len(lens) and int(lens.min()) <= 0:
        raise ValueError(f"segment lengths must be positive, got {lens.tolist()[:8]}")
    if int(sample_multiple) < 1:
        raise ValueError(f"sample_multiple must be >= 1, got {sample_multiple}")
    cu = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    real = int(cu[-1])
    if sample_multiple > 1:
        spans = aligned_lengths(lens, int(sample_multiple))
        total = padded_length(int(spans.sum()), math.lcm(int(sample_multiple), int(pad_to_multiple_of or 1)))
        if len(spans):
            spans[-1] += total - int(spans.sum())
        all_lens = spans
        cu_pad = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(spans, out=cu_pad[1:])
    else:
        total = padded_length(real, pad_to_multiple_of)
        all_lens = np.append(lens, total - real) if total > real else lens
        cu_pad = np.append(cu, total) if total > real else cu
    starts = np.repeat(cu_pad[:-1], all_lens)
    position_ids = np.arange(total, dtype=np.int64) - starts + position_start
    seq_idx = np.repeat(np.arange(len(all_lens), dtype=np.int32), all_lens)
    return Segments(
        lengths=lens, pad=total - real, cu_seqlens=cu.astype(np.int32), cu_seqlens_padded=cu_pad.astype(np.int32),
        starts=cu_pad[:len(lens)].copy(), max_seqlen=int(lens.max()) if len(lens) else 0,
        max_seqlen_padded=int(all_lens.max()) if len(all_lens) else 0,
        seq_idx=seq_idx, position_ids=position_ids, sample_multiple=int(sample_multiple))


def block_causal_mask(seq_idx: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Dense block-diagonal causal mask ``[1, 1, T, T]`` (bool, True = may attend).

    Token ``q`` attends to ``k`` iff ``k <= q`` and both are in the same segment. This is the
    form transformers' ``sdpa`` and ``eager`` attention take as a prepared 4D mask. Memory is
    T*T bytes (1 GiB at T = 32768): build it only for small T, on request.
    """
    s = torch.as_tensor(np.asarray(seq_idx)).reshape(-1)
    t = s.numel()
    same = s[:, None] == s[None, :]
    causal = torch.ones(t, t, dtype=torch.bool).tril_()
    return (same & causal)[None, None]


def loss_weights(labels: np.ndarray, seq_idx: np.ndarray, mode: LossWeighting,
                 num_segments: int) -> np.ndarray:
    """Per-token loss weights (float32 ``[T]``, aligned with ``labels``; 0 where label is -100).

    - ``"token"``: every label token weighs ``1 / N`` (N = label tokens in the row): the token mean,
      the only normalisation packing does not change (USERS.md theme N).
    - ``"sample"``: each sample with labels weighs equally: ``1 / (S * n_s)`` for a token of sample
      ``s`` with ``n_s`` label tokens, S = samples that have labels (the sample mean).

    ``sum(weights * per_token_ce)`` is then the loss. Raises ``ValueError`` for another mode.
    """
    if mode not in ("token", "sample"):
        raise ValueError(f"loss weighting must be 'token' or 'sample', got {mode!r}")
    valid = labels != -100
    w = np.zeros(len(labels), dtype=np.float32)
    n = int(valid.sum())
    if n == 0:
        return w
    if mode == "token":
        w[valid] = 1.0 / n
    else:
        per_seg = np.bincount(seq_idx[valid], minlength=num_segments + 1).astype(np.float64)
        s = int(np.count_nonzero(per_seg))
        w[valid] = (1.0 / (s * per_seg[seq_idx[valid]])).astype(np.float32)
    return w
