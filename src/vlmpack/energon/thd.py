"""Megatron-Core's ``PackedSeqParams`` (``qkv_format="thd"``) from a collated batch.

Megatron-Core is optional (``pip install megatron-core``); nothing else of vlmpack needs it. The
batch comes from :class:`vlmpack.train.collate.PackCollator` (built with ``cp_size`` for context
parallelism, so every sample's span is a multiple of ``2 x CP``); split it per CP rank with
:func:`vlmpack.train.thd.cp_shard` (or Megatron-Core's ``get_thd_batch_on_this_cp_rank``).
"""

from __future__ import annotations

from typing import Any

import torch


def thd_cu_seqlens(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(``cu_seqlens``, ``cu_seqlens_padded``), both int32 ``[n+1]``, as Transformer Engine's THD
    attention takes them: cumulative real lengths, and the offsets of each sample's padded span.
    A batch whose padding is a segment of its own (``cu_seqlens_padded`` ``[n+2]``: built without
    ``cp_size``) has that padding joined to its last sample's span."""
    cu, cu_pad = batch["cu_seqlens"], batch["cu_seqlens_padded"]
    if len(cu_pad) == len(cu) + 1:
        cu_pad = torch.cat([cu_pad[:-2], cu_pad[-1:]])
    return cu.to(torch.int32), cu_pad.to(torch.int32)


def packed_seq_params(batch: dict[str, Any]):
    """A ``megatron.core.packed_seq_params.PackedSeqParams`` with ``qkv_format="thd"``,
    ``cu_seqlens_q/kv`` and ``cu_seqlens_q/kv_padded`` of :func:`thd_cu_seqlens` and
    ``max_seqlen_q/kv`` = the longest padded span (Python int), as Megatron-Core's own
    ``get_thd_batch_on_this_cp_rank`` builds it. Raises ``ImportError`` (one line) without megatron-core."""
    try:
        from megatron.core.packed_seq_params import PackedSeqParams
    except ImportError as e:
        raise ImportError(f"packed_seq_params needs megatron-core (pip install megatron-core): {e}") from None
    cu, cu_pad = thd_cu_seqlens(batch)
    longest = int((cu_pad[1:] - cu_pad[:-1]).max()) if len(cu_pad) > 1 else 0
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu_pad,
                           cu_seqlens_kv_padded=cu_pad, max_seqlen_q=longest, max_seqlen_kv=longest)
