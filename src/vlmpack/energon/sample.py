"""The Energon sample type of a vlmpack pack (format ``vlmpack.pack/1``, docs/format.md).

``.nv-meta/dataset.yaml`` names :class:`VlmpackPack` and ``.nv-meta/sample_loader.py``
(:data:`vlmpack.energon.meta.SAMPLE_LOADER_SOURCE`) maps the raw tar parts onto it, so that
``get_train_dataset(OUT, ...)`` yields one ``VlmpackPack`` per pack with no other step.
Requires ``megatron-energon>=7.4.1`` and vlmpack importable in the training processes.
"""

from __future__ import annotations

from typing import Any

from megatron.energon import Sample, edataclass


@edataclass
class VlmpackPack(Sample):
    """One packed training sequence.

    Fields:
      seq_len: the capacity L in tokens the pack was planned for.
      num_tokens: T = sum of the samples' ``num_tokens`` (<= ``seq_len``), in tokens.
      samples: the pack's samples in order, each the JSON object
        ``{"id", "num_tokens", "source", "messages", "media"}`` of format ``vlmpack.pack/1``
        (``messages`` in OpenAI canonical form whose media parts name ``"part": "img<i>.<ext>"``).
      media: the media of the whole pack in part order (``img0``, ``img1``, ...): raw bytes when
        Energon's decoder is off (``auto_decode=False``, or a TaskEncoder with ``decoder = None``
        such as the vlmpack ones, which decode them with :func:`vlmpack.train.encode.open_image`);
        with Energon's default decoder each image is a ``torch.float32`` tensor ``[3, H, W]`` in
        [0, 1], with ``SampleDecoder(image_decode="pil")`` a PIL image.
      media_parts: the part name of each entry of ``media`` (same order).
      input_ids: int32 numpy ``[num_tokens]`` when the output was packed with ``--pretokenize``
        (the samples' token ids concatenated), else ``None``.
    """

    seq_len: int
    num_tokens: int
    samples: list[dict]
    media: list[Any]
    media_parts: list[str]
    input_ids: Any = None
