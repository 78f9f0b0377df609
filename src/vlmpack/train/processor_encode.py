"""Encoding a pack with the model's own processor, one call per sample (the generic family,
:class:`vlmpack.models.generic.GenericFamily`, whose ``encodes_with_processor`` is True).

Each sample's chat-template text and decoded images go through ``family.process_sample`` (the
processor's ``__call__``); its ``input_ids`` must have the length the pack records (else
:class:`~vlmpack.errors.PackMismatchError`), its labels follow the family's label rule, and the
image tensors of the samples are concatenated on dim 0 (zero-padded on the other dims to the
largest, as the processors pad a batch). The collator then packs the samples as for every family:
``position_ids`` restart at 0 per sample, ``cu_seqlens`` bound them.
"""

from __future__ import annotations

import numpy as np

from vlmpack.errors import PackMismatchError

__all__ = ["encode_with_processor"]


def encode_with_processor(encoder, pack):
    """:meth:`vlmpack.train.encode.PackEncoder.encode` for a family that encodes with its processor.

    ``encoder``: the :class:`~vlmpack.train.encode.PackEncoder`; ``pack``: a
    :class:`~vlmpack.train.encode.PackInput`. Returns the fields of its :class:`~vlmpack.train.encode.EncodedPack`
    (``image_grid_thw`` rows ``(1, 0, 0)``: the processor's own tensors are in ``extra``). Raises
    :class:`PackMismatchError` for a video, a text the encoder's ``check_texts`` refuses, a length other than the
    recorded one or a pretokenized ``input_ids`` part other than the processor's ids;
    :class:`~vlmpack.errors.PackTooLongError` as the encoder does.
    """
    from vlmpack.models.generic_rules import cat_padded

    f = encoder.family
    encoder.check_texts(pack)
    ids_list, labels_list, lengths, per_sample, tensors = [], [], [], [], []
    for it in pack.items:
        where = f"pack {pack.key!r} sample {it.id!r}"
        if it.videos:
            raise PackMismatchError(f"{where}: the generic family trains on images only")
        ids, out = f.process_sample(it.messages, it.images, it.special_tokens, it.tools)
        if encoder.check_num_tokens and it.recorded_tokens is not None and len(ids) != it.recorded_tokens:
            raise PackMismatchError(f"{where}: the processor gives {len(ids)} tokens but the pack records "
                                    f"{it.recorded_tokens}; pass the --model directory it was packed with or re-pack")
        ids_list.append(ids)
        labels_list.append(encoder.labels_for(ids))
        lengths.append(len(ids))
        per_sample.append(len(it.images))
        if it.images:
            tensors.append(out)
    total = int(sum(lengths))
    if pack.input_ids is not None and not np.array_equal(pack.input_ids, np.concatenate(ids_list)):
        raise PackMismatchError(f"pack {pack.key!r}: its input_ids part differs from the processor's ids; the part "
                                "was edited or made with another model directory: re-pack")
    if encoder.check_num_tokens and pack.num_tokens is not None and total != pack.num_tokens:
        raise PackMismatchError(f"pack {pack.key!r}: re-encoded to {total} tokens but the pack records "
                                f"{pack.num_tokens}")
    encoder._check_length(pack, total, "encodes to")
    pixel_values, extra = None, {}
    if tensors:
        pixel_values = cat_padded([t["pixel_values"] for t in tensors])
        extra = {k: cat_padded([t[k] for t in tensors]) for k in tensors[0] if k != "pixel_values"}
    k = sum(per_sample)
    return dict(key=pack.key, sample_ids=[it.id for it in pack.items], lengths=np.asarray(lengths, dtype=np.int64),
                input_ids=np.concatenate(ids_list), labels=np.concatenate(labels_list),
                image_grid_thw=np.tile(np.asarray([[1, 0, 0]], dtype=np.int64), (k, 1)),
                images_per_sample=per_sample, pixel_values=pixel_values, extra=extra)
