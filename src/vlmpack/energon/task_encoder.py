"""Megatron-Energon TaskEncoders: vlmpack packs (offline) and unpacked samples (online packing).

Offline packs (``vlmpack pack`` output; one Energon sample = one pack)::

    from megatron.energon import WorkerConfig, get_train_dataset, get_savable_loader
    from vlmpack.energon.task_encoder import VlmpackTaskEncoder

    te = VlmpackTaskEncoder(MODEL_DIR, attn_implementation="flash_attention_2")
    ds = get_train_dataset(OUT, batch_size=1, shuffle_buffer_size=100, max_samples_per_sequence=100,
                           worker_config=WorkerConfig.default_worker_config(), task_encoder=te)
    loader = get_savable_loader(ds)
    for batch in loader:
        loss = model(**model_inputs(batch, "flash_attention_2")).loss

``batch`` is the dict of :class:`vlmpack.train.collate.PackCollator` (``batch_size`` packs
concatenated into one padding-free row) plus ``__keys__`` (the Energon keys of the packs).
``loader.save_state_rank()`` / ``restore_state_rank(state)`` resume with the same batches:
every method is stateless and deterministic.

Online packing (:class:`VlmpackOnlineTaskEncoder`) reads an unpacked LLaVA-style WebDataset
(``<key>.json`` with ``conversations`` and ``image_keys``/``images`` naming the image parts,
``<key>.<i>.<ext>`` images; ``energon prepare --sample-type CrudeWebdataset``), measures each
sample exactly as ``vlmpack pack`` does, and packs the ``packing_buffer_size`` buffer with BFD.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, Sample, edataclass, stateless

from vlmpack.energon.sample import VlmpackPack
from vlmpack.train.collate import PackCollator
from vlmpack.train.encode import EncodedPack, PackItem, open_image
from vlmpack.train.online import measure_item

log = logging.getLogger(__name__)


@edataclass
class EncodedPackSample(Sample):
    """An encoded pack travelling from ``encode_sample`` to ``batch`` (see :class:`EncodedPack`)."""

    pack: EncodedPack


@edataclass
class UnpackedSample(Sample):
    """One unpacked conversation for online packing: canonical ``messages``, its ``images`` (PIL,
    EXIF-oriented RGB, in order of appearance) and its exact ``num_tokens``."""

    id: str
    messages: list[dict]
    images: list[Any]
    num_tokens: int = 0


class _CollatingTaskEncoder(DefaultTaskEncoder[Any, EncodedPackSample, dict, dict]):
    """Shared part: no Energon decoding (images reach the collator as raw bytes and are decoded by
    :func:`vlmpack.train.encode.open_image`, with the format allowlist and an error that names
    the pack, the sample and the part), the collator, batching encoded packs into one row."""

    decoder = None

    def __init__(self, model_dir: str, **collator_options: Any):
        super().__init__()
        self.collator = PackCollator(model_dir, **collator_options)

    @stateless
    def batch(self, samples: list[EncodedPackSample]) -> dict:
        """Encoded packs -> one padding-free batch dict (+ ``__keys__``)."""
        out = self.collator.collate([s.pack for s in samples])
        out["__keys__"] = [s.__key__ for s in samples]
        return out

    @stateless
    def encode_batch(self, batch: dict) -> dict:
        return batch


class VlmpackTaskEncoder(_CollatingTaskEncoder):
    """Turns ``VlmpackPack`` samples into packed training batches.

    Args: ``model_dir`` and any keyword option of :class:`vlmpack.train.collate.PackCollator`.
    Media arrive as raw bytes (``decoder = None``: Energon's decoder would open any format and
    fail with an unnamed ``DecodingError``) and are decoded and EXIF-oriented like transformers'
    ``load_image`` by the collator. Errors of a pack (token-count mismatch, an image that does not
    decode) raise :class:`vlmpack.errors.PackMismatchError` / :class:`vlmpack.errors.MediaDecodeError`
    naming the pack and the sample; Energon's default handler logs and skips such a sample and
    stops after 100 failures in a row (pass ``reraise_exception`` as the worker config's
    ``global_error_handler`` to stop at the first).
    """

    @stateless
    def encode_sample(self, sample: VlmpackPack) -> EncodedPackSample:
        """One pack -> :class:`EncodedPackSample` (tokens, labels, images, per-sample mRoPE)."""
        return EncodedPackSample.derive_from(sample, pack=self.collator.encode(sample))


@stateless
def cook_llava(raw: dict) -> UnpackedSample:
    """Crude WebDataset sample (LLaVA JSON + image parts) -> :class:`UnpackedSample`.

    The JSON names its image parts in ``image_keys`` (or ``images``) in order of the ``<image>``
    placeholders; conversion to canonical messages is :func:`vlmpack.layouts.to_canonical`
    (the same as ``vlmpack pack``). ``num_tokens`` is filled later by the task encoder.
    """
    from vlmpack.layouts import to_canonical

    meta = raw["json"]
    if isinstance(meta, (bytes, bytearray, str)):
        meta = json.loads(meta)
    obj = dict(meta)
    if "image_keys" in obj:
        obj["images"] = obj.pop("image_keys")
    messages, media = to_canonical(obj)
    key = raw["__key__"]
    images = [open_image(raw[ref], where=f"sample {key!r} part {ref}") for _, ref in media]
    return UnpackedSample(__key__=key, __restore_key__=raw["__restore_key__"],
                          __subflavors__=raw.get("__subflavors__"), __sources__=raw.get("__sources__"),
                          id=str(meta.get("id", key)), messages=messages, images=images)


class VlmpackOnlineTaskEncoder(_CollatingTaskEncoder):
    """Online packing of unpacked samples with Energon's ``packing_buffer_size``.

    Args:
      model_dir: the model directory; ``seq_len``: pack capacity in tokens; ``algorithm``: a
      :func:`vlmpack.packing.plan_packs` algorithm (default ``"bfd"``); other keywords go to
      :class:`PackCollator`. Samples longer than ``seq_len`` are dropped with a warning.
    Use with ``get_train_dataset(..., packing_buffer_size=N, task_encoder=te)`` on a
    ``CrudeWebdataset`` (cooked by :func:`cook_llava`).
    """

    cookers = [Cooker(cook_llava)]

    def __init__(self, model_dir: str, *, seq_len: int, algorithm: str = "bfd", **collator_options: Any):
        super().__init__(model_dir, **collator_options)
        self.seq_len = int(seq_len)
        self.algorithm = algorithm

    @stateless
    def preencode_sample(self, sample: UnpackedSample) -> UnpackedSample:
        """Measure the exact token count (template + tokenizer + image rule of ``vlmpack pack``).

        A sample whose text holds a special token of the tokenizer (it would fake or cut a turn)
        is skipped with a log line (Energon's ``SkipSample``), as ``vlmpack pack`` rejects it."""
        from megatron.energon import SkipSample

        hit = self.collator.family.find_special_token(sample.messages)
        if hit is not None:
            log.warning("online packing: sample %r holds the special token %r in turn %d; skipped", sample.id,
                        hit[1], hit[0])
            raise SkipSample()
        sample.num_tokens = measure_item(self.collator.family, PackItem(sample.id, sample.messages, sample.images))
        return sample

    def select_samples_to_pack(self, samples: list[UnpackedSample]) -> list[list[UnpackedSample]]:
        """The whole buffer -> groups that fit ``seq_len`` (:func:`vlmpack.packing.select_samples_to_pack`,
        deterministic); samples longer than ``seq_len`` are dropped with a warning."""
        from vlmpack.packing import select_samples_to_pack

        return select_samples_to_pack(samples, [s.num_tokens for s in samples], self.seq_len,
                                      algorithm=self.algorithm, on_overlong="drop")

    @stateless
    def pack_selected_samples(self, samples: list[UnpackedSample]) -> EncodedPackSample:
        """One group -> an encoded pack (checked against the measured counts)."""
        items = [PackItem(s.id, s.messages, s.images, s.num_tokens) for s in samples]
        enc = self.collator.encode(items)
        enc.key = "+".join(s.__key__ for s in samples)
        return EncodedPackSample(__key__=enc.key, __restore_key__=(), __subflavors__=samples[0].__subflavors__,
                                 pack=enc)
