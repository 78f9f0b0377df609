"""Context-parallel split of a packed THD row: which tokens each CP rank holds.

Megatron-Core's THD layout with context parallelism size ``CP`` cuts every sample's padded span
(``cu_seqlens_padded``) into ``2 x CP`` equal chunks and gives rank ``r`` chunks ``r`` and
``2CP-1-r`` (a causal-attention load balance): Transformer Engine's
``thd_get_partitioned_indices(cu_seqlens_padded, total, cp_size, cp_rank)``, used by
Megatron-Core's ``get_thd_batch_on_this_cp_rank`` and matched by its RoPE slice
``_get_thd_freqs_on_this_cp_rank``. :func:`cp_indices` restates that rule in numpy, so a trainer
without Transformer Engine (or a test) can split a :class:`vlmpack.train.collate.PackCollator`
batch built with ``cp_size``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: The batch keys whose last dimension is the token dimension (split across CP ranks).
TOKEN_KEYS = ("input_ids", "labels", "position_ids", "text_position_ids", "seq_idx", "loss_weights")


def cp_indices(cu_seqlens_padded: np.ndarray | torch.Tensor, cp_size: int, cp_rank: int) -> np.ndarray:
    """int64 ``[T / cp_size]``: the row positions CP rank ``cp_rank`` holds, sample by sample (chunk
    ``cp_rank`` then chunk ``2*cp_size-1-cp_rank`` of each span), as Transformer Engine's
    ``thd_get_partitioned_indices``.

    Args:
      cu_seqlens_padded: int ``[n+1]`` span offsets in tokens (the collator's, built with ``cp_size``).
      cp_size: context-parallel size (>= 1); cp_rank: 0 .. cp_size-1.
    Raises ``ValueError`` for a rank out of range or a span that is not a multiple of ``2 x cp_size``.
    """
    cu = np.asarray(cu_seqlens_padded, dtype=np.int64).reshape(-1)
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank {cp_rank} is not in 0..{cp_size - 1}")
    if cp_size == 1:
        return np.arange(int(cu[-1]), dtype=np.int64)
    spans = np.diff(cu)
    bad = np.flatnonzero(spans % (2 * cp_size))
    if len(bad):
        raise ValueError(f"sample {int(bad[0])} spans {int(spans[bad[0]])} tokens, not a multiple of 2 x CP = "
                         f"{2 * cp_size}; build the collator with cp_size={cp_size}")
    chunk = spans // (2 * cp_size)
    width = 2 * chunk  # tokens of each span this rank holds
    j = np.arange(int(width.sum()), dtype=np.int64) - np.repeat(np.cumsum(width) - width, width)
    ch = np.repeat(chunk, width)
    first = j < ch
    return np.repeat(cu[:-1], width) + np.where(first, cp_rank * ch + j, (2 * cp_size - 1 - cp_rank) * ch + j - ch)


def cp_shard(batch: dict[str, Any], cp_size: int, cp_rank: int) -> dict[str, Any]:
    """The part of a collated ``batch`` that CP rank ``cp_rank`` trains on: the token tensors
    (:data:`TOKEN_KEYS`, last dimension ``T`` -> ``T / cp_size``) index-selected with
    :func:`cp_indices`; everything else (``cu_seqlens*``, ``max_seqlen*``, media tensors) as it is,
    as Megatron-Core's ``get_thd_batch_on_this_cp_rank`` leaves them. Raises ``ValueError`` as
    :func:`cp_indices`."""
    index = torch.from_numpy(cp_indices(batch["cu_seqlens_padded"], cp_size, cp_rank))
    out = dict(batch)
    for key in TOKEN_KEYS:
        if key in batch and isinstance(batch[key], torch.Tensor):
            out[key] = batch[key].index_select(batch[key].dim() - 1, index)
    return out
