"""Training side of vlmpack: packed batches that train exactly like the unpacked samples.

Public API::

    from vlmpack.train import PackCollator, model_inputs
    collator = PackCollator(model_dir, attn_implementation="sdpa", position_layout=4)
    batch = collator(pack)            # Energon VlmpackPack, pack dict, raw WebDataset dict, or list of samples
    loss = model(**model_inputs(batch, "sdpa")).loss

Modules: :mod:`~vlmpack.train.encode` (tokens, labels, images per pack),
:mod:`~vlmpack.train.collate` (the collator), :mod:`~vlmpack.train.masks` (segments, cu_seqlens,
block mask, loss weights), :mod:`~vlmpack.train.rope` (per-sample mRoPE),
:mod:`~vlmpack.train.online` (online packing), :mod:`~vlmpack.train.samplers`.
"""

from vlmpack.train.collate import PackCollator, model_inputs
from vlmpack.train.encode import EncodedPack, PackEncoder, assistant_label_mask, read_pack
from vlmpack.train.masks import Segments, block_causal_mask, loss_weights, segments

__all__ = ["EncodedPack", "PackCollator", "PackEncoder", "Segments", "assistant_label_mask", "block_causal_mask",
           "loss_weights", "model_inputs", "read_pack", "segments"]
