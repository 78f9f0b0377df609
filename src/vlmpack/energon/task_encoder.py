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

Bad packs (``on_bad_pack``, both encoders), decided by exception class only:

- :class:`vlmpack.errors.PackError` (a pack whose tokens or media disagree with its record,
  :class:`~vlmpack.errors.PackMismatchError`; a pack longer than its ``seq_len``,
  :class:`~vlmpack.errors.PackTooLongError`; pretokenized ids outside the vocabulary,
  :class:`~vlmpack.errors.TokenIdError`; an image or video that does not decode,
  :class:`~vlmpack.errors.MediaDecodeError`) while cooking, encoding, packing or batching:
  ``"skip"`` (default) raises Energon's ``SkipSample`` after one log line naming the pack and the
  error; ``"fatal"`` raises Energon's ``FatalSampleError`` naming the pack, which stops training at
  once. A :class:`vlmpack.errors.SampleError` is a bad pack too, except while online packing
  cooks and measures samples: there it is what ``vlmpack pack`` rejects (``media_missing``,
  ``media_unsupported``, ``special_token_in_text``, ...), always skipped with its reason code.
- :class:`vlmpack.errors.ConfigError` (e.g. media decoded by an Energon decoder that was switched
  on): always ``FatalSampleError``; every pack would fail alike.
- anything else: left to Energon (its worker config's ``global_error_handler``, by default
  ``log_exception``: print, skip, and ``FatalSampleError`` after 100 failures in a row).

Why ``SkipSample`` for "skip" (megatron-energon 7.4.1, ``errors.ErrorContext.handle_errors``):
Energon passes ``SkipSample`` over silently, neither calling the error handler nor counting it
towards its tolerance (100 consecutive failures per stage, then ``FatalSampleError``); any other
exception is printed by ``log_exception`` with a traceback and the whole sample, and counts.
``FatalSampleError`` (one of its ``SYSTEM_EXCEPTIONS``) is re-raised at once, past the handler.
So that a wrong ``model_dir`` (every pack mismatches) still stops training, the encoders count
skips themselves: ``bad_pack_tolerance`` skips in a row within one stage (default Energon's
``__default_failure_tolerance__``, 100; 0: never) raise ``FatalSampleError``. "skip" is the
default because it is Energon's own default for a failing sample (log, skip, stop after 100 in a
row) and what these encoders did before ``on_bad_pack`` existed. Energon's
``global_error_handler`` no longer sees these errors: ``reraise_exception`` there does not make
them fatal, ``on_bad_pack="fatal"`` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from megatron.energon import Cooker, DefaultTaskEncoder, Sample, SkipSample, edataclass, stateless
from megatron.energon.errors import FatalSampleError

from vlmpack.energon.sample import VlmpackPack
from vlmpack.errors import ConfigError, MediaError, PackError, RecordError, SampleError
from vlmpack.train.collate import PackCollator
from vlmpack.train.encode import EncodedPack, PackItem, open_image
from vlmpack.train.online import measure_item

log = logging.getLogger(__name__)

OnBadPack = Literal["skip", "fatal"]
ON_BAD_PACK = ("skip", "fatal")
_T = TypeVar("_T")


@edataclass
class EncodedPackSample(Sample):
    """An encoded pack travelling from ``encode_sample`` to ``batch`` (see :class:`EncodedPack`)."""

    pack: EncodedPack


@edataclass
class UnpackedSample(Sample):
    """One unpacked conversation for online packing: canonical ``messages``, its ``images`` (PIL,
    EXIF-oriented RGB, in order of appearance), its exact ``num_tokens`` and its ``tools`` (tool
    schemas the chat template renders, None without)."""

    id: str
    messages: list[dict]
    images: list[Any]
    num_tokens: int = 0
    tools: list[dict] | None = None


class _CollatingTaskEncoder(DefaultTaskEncoder[Any, EncodedPackSample, dict, dict]):
    """Shared part: no Energon decoding (images reach the collator as raw bytes and are decoded by
    :func:`vlmpack.train.encode.open_image`, with the format allowlist and an error that names
    the pack, the sample and the part), the collator, batching encoded packs into one row, and the
    ``on_bad_pack`` policy (module docstring)."""

    decoder = None

    def __init__(self, model_dir: str, *, on_bad_pack: OnBadPack = "skip", bad_pack_tolerance: int | None = None,
                 **collator_options: Any):
        super().__init__()
        if on_bad_pack not in ON_BAD_PACK:
            raise ConfigError(f"on_bad_pack must be 'skip' or 'fatal', got {on_bad_pack!r}")
        tolerance = self.__default_failure_tolerance__ if bad_pack_tolerance is None else bad_pack_tolerance
        if not isinstance(tolerance, int) or tolerance < 0:
            raise ConfigError(f"bad_pack_tolerance must be an int >= 0, got {bad_pack_tolerance!r}")
        self.on_bad_pack: OnBadPack = on_bad_pack
        self.bad_pack_tolerance = tolerance
        self.collator = PackCollator(model_dir, **collator_options)
        self._skips_in_a_row: dict[str, int] = {}

    def _guarded(self, stage: str, what: str, fn: Callable[..., _T], *args: Any, rejects: bool = False) -> _T:
        """``fn(*args)`` under the ``on_bad_pack`` policy; ``what`` (e.g. ``"pack 'x'"``) names the
        pack or sample in the log line / ``FatalSampleError``, ``stage`` the Energon stage.
        ``rejects``: a :class:`SampleError` is a rejection of ``vlmpack pack`` (online cooking and
        measuring), always skipped; otherwise it is a bad pack like a :class:`PackError`."""
        try:
            out = fn(*args)
        except ConfigError as e:
            raise FatalSampleError(f"{stage}: {what}: {type(e).__name__}: {e}") from e
        except (PackError, SampleError) as e:
            reason = e.reason if isinstance(e, SampleError) else type(e).__name__
            if self.on_bad_pack == "fatal" and not (rejects and isinstance(e, SampleError)):
                raise FatalSampleError(f"{stage}: {what} cannot be trained on (on_bad_pack='fatal'): "
                                       f"{type(e).__name__}: {e}") from e
            self._skip(stage, what, reason, str(e))
        self._skips_in_a_row[stage] = 0
        return out

    def _skip(self, stage: str, what: str, reason: str, detail: str) -> None:
        """Log one line and raise ``SkipSample``; ``FatalSampleError`` instead once ``stage`` has
        skipped ``bad_pack_tolerance`` times in a row."""
        n = self._skips_in_a_row.get(stage, 0) + 1
        self._skips_in_a_row[stage] = n
        log.warning("vlmpack %s: skipped %s (%s): %s", stage, what, reason, detail)
        if self.bad_pack_tolerance and n >= self.bad_pack_tolerance:
            raise FatalSampleError(f"{stage}: {n} packs or samples skipped in a row, the last {what} ({reason}: "
                                   f"{detail}); likely model_dir is not the one the packs were made with, or the "
                                   "data is broken")
        raise SkipSample()

    @stateless
    def batch(self, samples: list[EncodedPackSample]) -> dict:
        """Encoded packs -> one padding-free batch dict (+ ``__keys__``)."""
        keys = [s.__key__ for s in samples]
        out = self._guarded("batch", f"batch of packs {keys!r}", self.collator.collate, [s.pack for s in samples])
        out["__keys__"] = keys
        return out

    @stateless
    def encode_batch(self, batch: dict) -> dict:
        return batch


class VlmpackTaskEncoder(_CollatingTaskEncoder):
    """Turns ``VlmpackPack`` samples into packed training batches.

    Args: ``model_dir``; ``on_bad_pack``: ``"skip"`` (default) or ``"fatal"``;
    ``bad_pack_tolerance``: skips in a row that stop training (default 100, 0: never) (module
    docstring); any keyword option of :class:`vlmpack.train.collate.PackCollator`.
    Media arrive as raw bytes (``decoder = None``: Energon's decoder would open any format and
    fail with an unnamed ``DecodingError``) and are decoded and EXIF-oriented like transformers'
    ``load_image`` by the collator. A pack whose token counts disagree with its record, or whose
    image does not decode (:class:`vlmpack.errors.PackMismatchError` /
    :class:`vlmpack.errors.MediaDecodeError`, naming the pack and the sample), is skipped with a
    log line (``"skip"``) or stops training with Energon's ``FatalSampleError`` (``"fatal"``).
    """

    @stateless
    def encode_sample(self, sample: VlmpackPack) -> EncodedPackSample:
        """One pack -> :class:`EncodedPackSample` (tokens, labels, images, per-sample mRoPE)."""
        enc = self._guarded("encode_sample", f"pack {sample.__key__!r}", self.collator.encode, sample)
        return EncodedPackSample.derive_from(sample, pack=enc)


@stateless
def cook_llava(raw: dict) -> UnpackedSample:
    """Crude WebDataset sample (LLaVA JSON + image parts) -> :class:`UnpackedSample`.

    The JSON names its image parts in ``image_keys`` (or ``images``) in order of the ``<image>``
    placeholders; conversion to canonical messages is :func:`vlmpack.layouts.to_canonical`
    (the same as ``vlmpack pack``). ``num_tokens`` is filled later by the task encoder. Raises
    :class:`vlmpack.errors.MediaError` (``media_missing``) when a named part is not in the sample,
    :class:`vlmpack.errors.MediaDecodeError` when an image does not decode.
    """
    from vlmpack.layouts import record_tools, to_canonical

    meta = raw["json"]
    if isinstance(meta, (bytes, bytearray, str)):
        meta = json.loads(meta)
    obj = dict(meta)
    if "image_keys" in obj:
        obj["images"] = obj.pop("image_keys")
    messages, media = to_canonical(obj)
    key = raw["__key__"]
    missing = [ref for _, ref in media if ref not in raw]
    if missing:
        raise MediaError("media_missing", f"sample {key!r}: image part(s) {', '.join(map(str, missing))} named by "
                         "its JSON are not in the shard")
    images = [open_image(raw[ref], where=f"sample {key!r} part {ref}") for _, ref in media]
    return UnpackedSample(__key__=key, __restore_key__=raw["__restore_key__"],
                          __subflavors__=raw.get("__subflavors__"), __sources__=raw.get("__sources__"),
                          id=str(meta.get("id", key)), messages=messages, images=images, tools=record_tools(obj))


class VlmpackOnlineTaskEncoder(_CollatingTaskEncoder):
    """Online packing of unpacked samples with Energon's ``packing_buffer_size``.

    Args:
      model_dir: the model directory; ``seq_len``: pack capacity in tokens; ``algorithm``: a
      :func:`vlmpack.packing.plan_packs` algorithm (default ``"bfd"``); other keywords go to
      :class:`PackCollator` (and ``on_bad_pack``, ``bad_pack_tolerance``: module docstring).
      Samples longer than ``seq_len`` are dropped with a warning; the collator gets ``seq_len`` too
      (a pack over it is a bad pack, :class:`~vlmpack.errors.PackTooLongError`).
    Use with ``get_train_dataset(..., packing_buffer_size=N, task_encoder=te)`` on a
    ``CrudeWebdataset`` (cooked by :func:`cook_llava`).
    """

    cookers = [Cooker(cook_llava)]

    def __init__(self, model_dir: str, *, seq_len: int, algorithm: str = "bfd", **options: Any):
        super().__init__(model_dir, seq_len=int(seq_len), **options)
        self.seq_len = int(seq_len)
        self.algorithm = algorithm

    @stateless
    def cook_crude_sample(self, sample, cooker, aux):
        """Energon's cooking (:func:`cook_llava`) under the ``on_bad_pack`` policy (an image that
        does not decode, a record ``vlmpack pack`` would reject)."""
        return self._guarded("cook", f"sample {sample['__key__']!r}", super().cook_crude_sample, sample, cooker, aux,
                             rejects=True)

    @stateless
    def preencode_sample(self, sample: UnpackedSample) -> UnpackedSample:
        """Measure the exact token count (template + tokenizer + image rule of ``vlmpack pack``).

        A sample whose text holds a special token of the tokenizer (it would fake or cut a turn)
        is skipped with a log line (Energon's ``SkipSample``), as ``vlmpack pack`` rejects it."""
        return self._guarded("preencode_sample", f"sample {sample.__key__!r} (id {sample.id!r})", self._measure,
                             sample, rejects=True)

    def _measure(self, sample: UnpackedSample) -> UnpackedSample:
        family = self.collator.family
        problem = family.field_problem(sample.messages, sample.tools)
        if problem is not None:
            raise RecordError(*problem)
        hit = family.find_special_token(sample.messages, sample.tools)
        if hit is not None:
            raise RecordError("special_token_in_text", f"turn {hit[0]} holds the special token {hit[1]!r}")
        item = PackItem(sample.id, sample.messages, sample.images, tools=sample.tools)
        sample.num_tokens = measure_item(family, item)
        return sample

    def select_samples_to_pack(self, samples: list[UnpackedSample]) -> list[list[UnpackedSample]]:
        """The whole buffer -> groups that fit ``seq_len`` (:func:`vlmpack.packing.select_samples_to_pack`,
        deterministic; with the collator's ``cp_size``, each sample counted padded to its multiple);
        samples longer than ``seq_len`` are dropped with a warning."""
        from vlmpack.packing import select_samples_to_pack

        m = self.collator.sample_multiple  # cp_size: each sample padded (THD), planned so
        return select_samples_to_pack(samples, [s.num_tokens for s in samples], self.seq_len,
                                      algorithm=self.algorithm, on_overlong="drop",
                                      pad_to_multiple_of=m if m > 1 else None)

    @stateless
    def pack_selected_samples(self, samples: list[UnpackedSample]) -> EncodedPackSample:
        """One group -> an encoded pack (checked against the measured counts)."""
        items = [PackItem(s.id, s.messages, s.images, s.num_tokens, tools=s.tools) for s in samples]
        key = "+".join(s.__key__ for s in samples)
        enc = self._guarded("pack_selected_samples", f"pack {key!r}", self.collator.encode, items)
        enc.key = key
        return EncodedPackSample(__key__=enc.key, __restore_key__=(), __subflavors__=samples[0].__subflavors__,
                                 pack=enc)
