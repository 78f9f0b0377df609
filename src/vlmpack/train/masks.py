"""Segment metadata of a packed row: positions, ``cu_seqlens``, segment ids, block masks, loss weights.

Everything here is a pure function of the segment lengths (O(T) memory), except
:func:`block_causal_mask`, the only dense ``T x T`` object, built only when asked for
(USERS.md theme M: never materialise seq x seq masks by default).

Conventions (USERS.md themes A, B, N, O):
- a *segment* is one sample of a pack; padding added by ``pad_to_multiple_of`` is one extra
  segment of its own, never attended to by a real token and never labelled;
- ``cu_seqlens`` are the int32 prefix sums FlashAttention's varlen kernels take
  (``flash_attn_varlen_func(cu_seqlens_q=..., max_seqlen_q=...)``), ``max_seqlen`` a Python int
  (a tensor makes FlashAttention / torch.compile recompile, flash-attention#2507).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

LossWeighting = Literal["token", "sample"]


@dataclass(frozen=True, slots=True)
class Segments:
    """Segment layout of one packed row of ``total`` tokens.

    Attributes:
      lengths: int64 ``[n]`` real segment lengths in tokens (samples, in order).
      pad: number of padding tokens appended (0 without ``pad_to_multiple_of``).
      cu_seqlens: int32 ``[n+1]`` prefix sums of ``lengths`` (real tokens only).
      cu_seqlens_padded: int32 ``[n+1]`` or ``[n+2]``: ``cu_seqlens`` plus the padding segment's end
        when ``pad > 0`` (covers every token of the padded row; use it for varlen kernels that
        run over the padded tensor).
      max_seqlen: longest real segment (Python int); ``max_seqlen_padded`` includes the padding.
      seq_idx: int32 ``[total]`` segment index of every token; padding tokens get ``n``.
      position_ids: int64 ``[total]`` positions restarting at ``start`` in every segment
        (padding too, so that it forms its own segment for position-based boundary detection).
    """

    lengths: np.ndarray
    pad: int
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    max_seqlen: int
    max_seqlen_padded: int
    seq_idx: np.ndarray
    position_ids: np.ndarray

    @property
    def total(self) -> int:
        """Tokens in the row including padding."""
        return int(self.cu_seqlens_padded[-1])

    @property
    def num_real(self) -> int:
        """Tokens in the row without padding."""
        return int(self.cu_seqlens[-1])


def padded_length(total: int, pad_to_multiple_of: int | None) -> int:
    """``total`` rounded up to a multiple of ``pad_to_multiple_of`` (``total`` when None or 1)."""
    if not pad_to_multiple_of or pad_to_multiple_of <= 1:
        return total
    m = int(pad_to_multiple_of)
    return -(-total // m) * m


def segments(lengths: Sequence[int] | np.ndarray, *, pad_to_multiple_of: int | None = None,
             position_start: int = 0) -> Segments:
    """The :class:`Segments` of a row whose samples have ``lengths`` tokens.

    ``position_start`` is the first position of each segment (0 for Qwen/Llama; 2 for
    RoBERTa-style models, transformers#47496). Raises ``ValueError`` for a non-positive length.
    Cost: O(T) time and memory, vectorised.
    """
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if len(lens) and int(lens.min()) <= 0:
        raise ValueError(f"segment lengths must be positive, got {lens.tolist()[:8]}")
    cu = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    real = int(cu[-1])
    total = padded_length(real, pad_to_multiple_of)
    pad = total - real
    all_lens = np.append(lens, pad) if pad else lens
    cu_pad = np.append(cu, total) if pad else cu
    starts = np.repeat(cu_pad[:-1], all_lens)
    position_ids = np.arange(total, dtype=np.int64) - starts + position_start
    seq_idx = np.repeat(np.arange(len(all_lens), dtype=np.int32), all_lens)
    return Segments(
        lengths=lens, pad=pad, cu_seqlens=cu.astype(np.int32), cu_seqlens_padded=cu_pad.astype(np.int32),
        max_seqlen=int(lens.max()) if len(lens) else 0,
        max_seqlen_padded=int(all_lens.max()) if len(all_lens) else 0,
        seq_idx=seq_idx, position_ids=position_ids)


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
