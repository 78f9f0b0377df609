"""The packed-batch collator: packs -> model inputs that train exactly like the unpacked samples.

Typical use (DataLoader or the Energon TaskEncoder :mod:`vlmpack.energon.task_encoder`)::

    collator = PackCollator(model_dir, attn_implementation="flash_attention_2")
    batch = collator(pack)                     # one pack (Energon sample, dict, or list of samples)
    batch = collator.batch([p1, p2])           # several packs -> one padding-free row
    out = model(**model_inputs(batch, "flash_attention_2"))

A batch is one padding-free row ``[1, T]`` (several packs are concatenated: the samples stay
isolated by their segment boundaries). Output keys (all torch tensors unless noted):

- ``input_ids`` int64 ``[1, T]``; ``labels`` int64 ``[1, T]`` (-100 except assistant content and its
  ``<|im_end|>``; the first token of every sample is -100, so the usual one-token shift never
  crosses a sample boundary);
- ``position_ids``: int64 ``[1, T]`` restarting at ``position_start`` per sample, or for mRoPE
  families (``ModelFamily.mrope``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL; Qwen2.5-Omni through its
  ``mrope_indexer``) the per-sample mRoPE
  ``[3, 1, T]`` (``position_layout=3``) or ``[4, 1, T]`` with a text
  row (``position_layout=4``, what transformers' Qwen-VL models need to isolate samples from
  ``position_ids`` alone); ``text_position_ids`` int64 ``[1, T]`` always;
- ``cu_seqlens`` int32 ``[n+1]`` (real tokens), ``cu_seqlens_padded`` int32 (``[n+2]`` when padding
  was added: the padding is its own segment; ``[n+1]`` span offsets with ``cp_size``, where each
  sample's padding follows its tokens: Megatron-Core's THD layout), ``max_seqlen`` /
  ``max_seqlen_padded`` (Python int), ``seq_idx`` int32 ``[1, T]`` (segment of every token, padding =
  n, or its sample's with ``cp_size``), ``num_padding`` (int);
- ``attention_mask`` bool ``[1, 1, T, T]`` block-diagonal causal, only with ``dense_mask=True`` and
  ``attn_implementation`` ``"sdpa"`` or ``"eager"``; for a family with ``attention_masks`` (Gemma 3:
  bidirectional within each image's tokens, a sliding window on its sliding layers) that method's
  mapping of bool ``[1, 1, T, T]`` masks instead, and without ``dense_mask`` the batch says
  ``dense_mask_required`` (True), which :func:`model_inputs` refuses: such a family has no
  mask-free packed path;
- the family's image inputs (:meth:`vlmpack.models.base.ModelFamily.batch_image_inputs`; Qwen-VL:
  ``pixel_values`` float32 ``[P, D]``, ``image_grid_thw`` int64 ``[k, 3]``) in sample order and
  ``image_input_keys`` (their names), absent without images;
- the family's video inputs (:meth:`vlmpack.models.base.ModelFamily.batch_video_inputs`; Qwen-VL:
  ``pixel_values_videos`` float32 ``[P, D]``, ``video_grid_thw`` int64 ``[k, 3]``, Qwen2.5-VL also
  ``second_per_grid_ts`` float32 ``[k]`` seconds; LLaVA-OneVision: ``pixel_values_videos`` float32
  ``[videos, F, 3, 384, 384]``; InternVL: none, its frames are ``pixel_values`` tiles among the
  images') and ``video_input_keys``, absent without videos;
- per kind after video present in the batch (audio; :mod:`vlmpack.train.kind_media`) the family's
  ``batch_media_inputs`` (Qwen2.5-Omni: ``input_features`` float32 ``[k, 128, 30000]`` log-mel and
  ``feature_attention_mask`` int32 ``[k, 30000]``, as ``Qwen2_5OmniProcessor`` gives them per
  sample, items in sample order; with ``use_audio_in_video`` each video's sound track is an item
  too, at the video's place in the sample's content order), ``<kind>_input_keys``
  (``audio_input_keys``) and ``<kind>s_per_sample`` int32 ``[n]`` (``audios_per_sample``: rows of
  those tensors per sample, sound tracks included); absent without such items.
  No ``mm_token_type_ids``: the per-sample mRoPE ``position_ids`` already hold what the model
  would derive from them (``get_rope_index`` with 1 on image pads, 2 on video pads);
- ``images_per_sample``, ``videos_per_sample``, ``media_tokens_per_sample`` int32 ``[n]`` per
  segment of ``cu_seqlens``: images, videos and vision feature tokens (the pads the features
  replace, ``t*h*w / merge**2`` per Qwen-VL item; Qwen3-VL's timestamp text is not among them),
  for a pipeline-parallel micro-batch split of the media tensors;
- ``num_label_tokens`` (int), ``loss_weights`` float32 ``[1, T]`` with ``loss_weighting``;
- ``sample_ids``, ``pack_keys`` (lists of str), ``num_samples`` (int).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from vlmpack.errors import ConfigError, PackMismatchError, PackTooLongError
from vlmpack.media.kinds import KINDS
from vlmpack.models.base import ProcessedImages, ProcessedVideos
from vlmpack.packing.alignment import aligned_lengths, sample_multiple
from vlmpack.train.encode import IGNORE_INDEX, EncodedPack, PackEncoder
from vlmpack.train.kind_media import batch_media_inputs
from vlmpack.train.masks import LossWeighting, block_causal_mask, loss_weights, segments
from vlmpack.train.rope import MRopeIndexer, RopeImpl

log = logging.getLogger(__name__)

DENSE_MASK_IMPLS = ("sdpa", "eager")


class PackCollator:
    """Builds packed training batches for one model directory.

    Args:
      model_dir: HF-format model directory (tokenizer, chat template, preprocessor, config); the
        same one ``vlmpack pack --model`` used.
      mrope: per-sample mRoPE positions; default: the family's ``mrope`` (Qwen-VL families). Use
        ``False`` to train a text-only model (e.g. ``Qwen2ForCausalLM``) with the same tokenizer.
      position_layout: 3 (``[3, 1, T]``) or 4 (``[4, 1, T]``, text row first) for mRoPE.
      rope_impl: ``"transformers"`` (the model class's ``get_rope_index`` per sample) or ``"numpy"``
        (vectorised, self-checked against it at start).
      attn_implementation: the model's attention backend; decides whether a dense mask may be built.
      dense_mask: build the ``[1, 1, T, T]`` block-causal mask (sdpa/eager only; T*T bytes).
      pad_to_multiple_of: pad T to a multiple (TP/SP/CP); padding is a masked segment of its own.
      position_start: first position of each sample for 1D positions (transformers#47496).
      loss_weighting: ``None``, ``"token"`` or ``"sample"`` -> ``loss_weights`` (see
        :func:`vlmpack.train.masks.loss_weights`).
      placeholder_image: add a minimal image (its own segment, labels -100) to batches without
        images, so every rank runs the vision tower (FSDP / ZeRO-3), as NeMo does.
      check_num_tokens: compare re-encoded lengths with the pack's recorded counts.
      seq_len: the most tokens one pack may hold (the trainer's sequence length, in tokens); default
        ``None``: the ``seq_len`` each pack records. A longer pack raises
        :class:`vlmpack.errors.PackTooLongError` (a :class:`~vlmpack.errors.PackError`: the Energon
        task encoders skip it or stop by ``on_bad_pack``), as a pretokenized pack with ids outside
        the tokenizer's vocabulary raises :class:`vlmpack.errors.TokenIdError`
        (:class:`vlmpack.train.encode.PackEncoder`).
      allow_linear_attention_leak: build batches for a model with linear-attention layers (Qwen3.5's
        Gated DeltaNet, :meth:`vlmpack.models.qwen3_vl.Qwen3_5Family.linear_attention_layers`)
        although they will not see the sample boundaries: without it such a model needs a
        ``flash_attention_*`` backend and flash-linear-attention installed (transformers then
        passes ``cu_seq_lens_q`` to its varlen kernel); transformers' torch fallback carries the
        recurrent and conv state across samples (a packed row then trains unlike its samples).

      processor: the processor options the packs were counted with (``report.json``'s
        ``processor``: ``{"max_pixels": ..., "kwargs": {...}}``, :mod:`vlmpack.models.options`;
        default none): the pixels are made by the processors built with them.
      cp_size, tp_size, sequence_parallel: the trainer's context-parallel size, tensor-parallel size
        and sequence parallelism (``vlmpack pack --cp-size ...``, ``report.json``'s ``alignment``):
        with ``cp_size > 1`` (or sequence parallelism) every sample is padded to a multiple of
        ``2 x CP (x TP)`` tokens, as Megatron-Core's THD layout needs
        (:mod:`vlmpack.packing.alignment`); ``cu_seqlens`` then holds the real lengths and
        ``cu_seqlens_padded`` the padded spans (both ``[n+1]``), ready for
        :func:`vlmpack.energon.thd.packed_seq_params` and :func:`vlmpack.train.thd.cp_shard`.

    Raises :class:`ConfigError` for inconsistent options (``seq_len`` not an int >= 1) and for a
    model with linear-attention layers that would mix packed samples (see
    ``allow_linear_attention_leak``).
    """

    def __init__(self, model_dir: str | Path, *, mrope: bool | None = None,
                 position_layout: Literal[3, 4] = 3, rope_impl: RopeImpl = "transformers",
                 attn_implementation: str = "flash_attention_2", dense_mask: bool = False,
                 pad_to_multiple_of: int | None = None, position_start: int = 0,
                 loss_weighting: LossWeighting | None = None, placeholder_image: bool = False,
                 check_num_tokens: bool = True, allow_linear_attention_leak: bool = False,
                 seq_len: int | None = None, processor: Mapping[str, Any] | str | None = None,
                 cp_size: int = 1, tp_size: int = 1, sequence_parallel: bool = False):
        from vlmpack.models import load_model

        self.model_dir = str(model_dir)
        self.family = load_model(self.model_dir, processor)
        self.encoder = PackEncoder(self.family, check_num_tokens=check_num_tokens, seq_len=seq_len)
        self.mrope = bool(self.family.mrope) if mrope is None else bool(mrope)
        if position_layout not in (3, 4):
            raise ConfigError(f"position_layout must be 3 or 4, got {position_layout!r}")
        if dense_mask and attn_implementation not in DENSE_MASK_IMPLS:
            raise ConfigError(f"dense_mask=True needs attn_implementation in {DENSE_MASK_IMPLS}, got "
                              f"{attn_implementation!r}; varlen kernels take cu_seqlens instead")
        if not allow_linear_attention_leak:
            _check_linear_attention(self.family, attn_implementation)
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ConfigError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
        self.sample_multiple = sample_multiple(cp_size, tp_size, sequence_parallel)
        if loss_weighting not in (None, "token", "sample"):
            raise ConfigError(f"loss_weighting must be None, 'token' or 'sample', got {loss_weighting!r}")
        self.position_layout = position_layout
        self.attn_implementation = attn_implementation
        self.dense_mask = dense_mask
        self.pad_to_multiple_of = pad_to_multiple_of
        self.position_start = position_start
        self.loss_weighting = loss_weighting
        self.placeholder_image = placeholder_image
        indexer = getattr(self.family, "mrope_indexer", None)  # a get_rope_index of other inputs (Qwen2.5-Omni)
        if not self.mrope:
            self.rope = None
        else:
            self.rope = indexer(rope_impl) if indexer else MRopeIndexer(self.family, impl=rope_impl)
        self.pad_token_id = int(self.family.pad_token_id)
        self._placeholder: EncodedPack | None = None

    # ------------------------------------------------------------------ per pack
    def encode(self, pack: Any) -> EncodedPack:
        """Encode one pack (tokens, labels, images, per-sample mRoPE); see
        :meth:`vlmpack.train.encode.PackEncoder.encode` for the inputs and errors; with ``cp_size``
        and ``seq_len``, a pack longer than ``seq_len`` once its samples are padded raises
        :class:`~vlmpack.errors.PackTooLongError`."""
        enc = self.encoder.encode(pack)
        cap = self.encoder.seq_len
        if self.sample_multiple > 1 and cap is not None:
            padded = int(aligned_lengths(enc.lengths, self.sample_multiple).sum())
            if padded > cap:
                raise PackTooLongError(f"pack {enc.key!r} holds {padded:,} tokens with each sample padded to a "
                                       f"multiple of {self.sample_multiple} (cp_size), more than the collator's "
                                       f"seq_len {cap:,}; pack it with vlmpack pack --cp-size")
        if self.rope is not None:
            enc.mrope = self._pack_mrope(enc)
        return enc

    def _pack_mrope(self, enc: EncodedPack) -> np.ndarray:
        splits = np.cumsum(enc.images_per_sample)[:-1]
        grids = np.split(enc.image_grid_thw, splits) if len(enc.lengths) else []
        vgrids = vsecs = None
        if len(enc.video_grid_thw):
            vsplits = np.cumsum(enc.videos_per_sample)[:-1]
            vgrids = np.split(enc.video_grid_thw, vsplits)
            secs = enc.video_extra.get("second_per_grid_ts")
            vsecs = None if secs is None else torch.tensor_split(secs, vsplits.tolist())
        reads = getattr(self.rope, "reads_media", False)  # Qwen2.5-Omni: audio_seqlens from the pack's audio rows
        kw = {"media": enc.media, "media_per_sample": enc.media_per_sample} if reads else {}
        try:
            return self.rope.pack_positions(enc.input_ids, enc.lengths.tolist(), grids, vgrids, vsecs, **kw)
        except ValueError as e:
            raise PackMismatchError(f"pack {enc.key!r}: mRoPE positions: {e}") from None

    def placeholder(self) -> EncodedPack:
        """The family's minimal image segment (Qwen-VL: ``<|vision_start|><|image_pad|>*n<|vision_end|>``),
        labels -100. Raises :class:`PackMismatchError` when its ids and the processed image disagree."""
        if self._placeholder is None:
            ids, images = self.family.placeholder()
            ids = np.asarray(ids, dtype=np.int64)
            proc = self.family.process_images(images)
            if int(np.count_nonzero(ids == self.family.image_token_id)) != int(proc.tokens.sum()):
                raise PackMismatchError(f"{self.model_dir}: the placeholder image gives {int(proc.tokens.sum())} "
                                        "image tokens but its ids hold a different number")
            enc = EncodedPack(key="<placeholder>", sample_ids=[], lengths=np.array([len(ids)], dtype=np.int64),
                              input_ids=ids, labels=np.full(len(ids), IGNORE_INDEX, dtype=np.int64),
                              image_grid_thw=proc.grids, images_per_sample=[1], pixel_values=proc.pixel_values,
                              extra=proc.model_kwargs)
            if self.rope is not None:
                enc.mrope = self._pack_mrope(enc)
            self._placeholder = enc
        return self._placeholder

    # ------------------------------------------------------------------ batch
    def __call__(self, pack: Any) -> dict:
        """Encode and collate one pack (any accepted input) into a batch dict."""
        return self.collate([self.encode(pack)])

    def batch(self, packs: Sequence[Any]) -> dict:
        """Encode and collate several packs into one padding-free row."""
        return self.collate([p if isinstance(p, EncodedPack) else self.encode(p) for p in packs])

    def collate(self, encoded: Sequence[EncodedPack]) -> dict:
        """Concatenate encoded packs into one batch dict (keys in the module docstring). O(T) memory
        unless ``dense_mask``."""
        encs = list(encoded)
        if not encs:
            raise ValueError("collate() needs at least one encoded pack")
        has_images = any(len(e.image_grid_thw) or len(e.video_grid_thw) for e in encs)
        real_lengths = np.concatenate([e.lengths for e in encs])
        if self.placeholder_image and not has_images:
            encs.append(self.placeholder())
        lengths = np.concatenate([e.lengths for e in encs])
        seg = segments(lengths, pad_to_multiple_of=self.pad_to_multiple_of, position_start=self.position_start,
                       sample_multiple=self.sample_multiple)
        at = seg.real_index() if seg.pad else slice(None)  # where each real token goes in the padded row
        ids = np.full(seg.total, self.pad_token_id, dtype=np.int64)
        ids[at] = np.concatenate([e.input_ids for e in encs])
        labels = np.full(seg.total, IGNORE_INDEX, dtype=np.int64)
        labels[at] = np.concatenate([e.labels for e in encs])
        labels[seg.starts] = IGNORE_INDEX  # no label on a sample's first token: no cross-boundary shift
        out: dict[str, Any] = {
            "input_ids": torch.from_numpy(ids)[None],
            "labels": torch.from_numpy(labels)[None],
        }
        text_pos = seg.position_ids
        if self.mrope:
            m = np.concatenate([e.mrope for e in encs], axis=1)
            if seg.pad:  # padding tokens take their text positions on all three rows
                full = np.repeat(text_pos[None], 3, axis=0)
                full[:, at] = m
                m = full
            if self.position_layout == 4:
                m = np.concatenate([text_pos[None], m], axis=0)
            out["position_ids"] = torch.from_numpy(np.ascontiguousarray(m))[:, None, :]
        else:
            out["position_ids"] = torch.from_numpy(text_pos)[None]
        out["text_position_ids"] = torch.from_numpy(text_pos)[None]
        out["seq_idx"] = torch.from_numpy(seg.seq_idx)[None]
        out["cu_seqlens"] = torch.from_numpy(seg.cu_seqlens)
        out["cu_seqlens_padded"] = torch.from_numpy(seg.cu_seqlens_padded)
        out["max_seqlen"] = seg.max_seqlen
        out["max_seqlen_padded"] = seg.max_seqlen_padded
        out["num_padding"] = int(seg.pad)
        family_masks = getattr(self.family, "attention_masks", None)
        if self.dense_mask:  # a family whose samples attend beyond causal blocks gives its own (Gemma 3)
            out["attention_mask"] = family_masks(out, "sdpa") if family_masks else block_causal_mask(seg.seq_idx)
        elif family_masks:
            out["dense_mask_required"] = True
        parts = [ProcessedImages(e.pixel_values, e.image_grid_thw, None, e.extra)
                 for e in encs if e.pixel_values is not None]
        if parts:
            images = self.family.batch_image_inputs(parts)
            out.update(images)
            out["image_input_keys"] = tuple(images)
        vparts = [ProcessedVideos(e.pixel_values_videos, e.video_grid_thw, None, None, e.video_extra, [])
                  for e in encs if e.pixel_values_videos is not None]
        if vparts:
            videos = self.family.batch_video_inputs(vparts)
            out.update(videos)
            out["video_input_keys"] = tuple(videos)
        for kind, inputs in batch_media_inputs(self.family, encs).items():  # audio: the family's hook
            out.update(inputs)
            out[f"{kind}_input_keys"] = tuple(inputs)
            out[f"{kind}s_per_sample"] = torch.from_numpy(np.concatenate(
                [np.asarray(e.media_per_sample.get(kind) or [0] * len(e.lengths), dtype=np.int32) for e in encs]))
        valid = labels != IGNORE_INDEX
        out["num_label_tokens"] = int(valid.sum())
        if self.loss_weighting:
            w = loss_weights(labels, seg.seq_idx, self.loss_weighting, len(lengths))
            out["loss_weights"] = torch.from_numpy(w)[None]
        out.update(self._media_per_sample(encs, ids, seg.starts))
        out["sample_ids"] = [s for e in encs for s in e.sample_ids]
        out["pack_keys"] = [e.key for e in encs if e.sample_ids]
        out["num_samples"] = int(len(real_lengths))
        return out

    def _media_per_sample(self, encs: Sequence[EncodedPack], ids: np.ndarray, starts: np.ndarray) -> dict:
        """int32 ``[n]`` per sample of the row (``ids``, samples from ``starts``; the placeholder image's
        included): images,
        videos and media tokens (the tokens whose embeddings vision features replace), so that a
        pipeline-parallel micro-batch split can slice the media tensors (Qwen-VL: ``image_grid_thw``
        rows by ``images_per_sample``, ``pixel_values`` rows by their ``t*h*w``) without
        re-deriving them from the ids."""
        f = self.family
        feature_ids = [t for t in {f.image_token_id, getattr(f, "video_token_id", None),
                                   getattr(f, "video_feature_token_id", None)} if t is not None]
        media = np.isin(ids, feature_ids).astype(np.int64)
        tokens = np.add.reduceat(media, starts) if len(starts) else np.zeros(0, dtype=np.int64)
        images = np.concatenate([np.asarray(e.images_per_sample, dtype=np.int32) for e in encs])
        videos = np.concatenate([np.asarray(e.videos_per_sample or [0] * len(e.lengths), dtype=np.int32)
                                 for e in encs])
        return {"images_per_sample": torch.from_numpy(images), "videos_per_sample": torch.from_numpy(videos),
                "media_tokens_per_sample": torch.from_numpy(tokens.astype(np.int32))}


def _check_linear_attention(family, attn_implementation: str) -> None:
    """:class:`ConfigError` when ``family``'s model has linear-attention layers that a packed row
    would leak through: any backend but ``flash_attention_*``, or flash-linear-attention (``fla``)
    not installed (transformers' ``chunk_gated_delta_rule`` then falls back to
    ``torch_chunk_gated_delta_rule``, which ignores ``cu_seqlens``)."""
    import importlib.util

    layers = getattr(family, "linear_attention_layers", lambda: [])()
    if not layers:
        return
    if attn_implementation.startswith("flash_attention") and importlib.util.find_spec("fla") is not None:
        return
    raise ConfigError(
        f"{family.model_dir}: {len(layers)} linear-attention layers (Gated DeltaNet) see packed samples as one "
        f"sequence with attn_implementation={attn_implementation!r}"
        + ("" if importlib.util.find_spec("fla") else " and without flash-linear-attention")
        + "; use attn_implementation='flash_attention_2' with flash-linear-attention installed (its varlen "
        "kernel takes cu_seq_lens_q), or pass allow_linear_attention_leak=True")


def model_inputs(batch: dict, attn_implementation: str | None = None, *,
                 mask_dtype: torch.dtype = torch.float32) -> dict:
    """The keyword arguments of a transformers model's ``forward`` from a collated batch.

    Always: ``input_ids``, ``labels``, ``position_ids`` (+ ``attention_mask`` and the family's media
    inputs named by ``batch["<kind>_input_keys"]`` for every registered kind (``image_input_keys``,
    ``video_input_keys``, ``audio_input_keys``), e.g. ``pixel_values``, ``image_grid_thw``,
    ``pixel_values_videos``, ``video_grid_thw``, ``input_features``, ``feature_attention_mask``,
    when present).
    transformers' ``eager`` attention *adds* a prepared 4D mask
    to the scores, so for ``"eager"`` the bool block mask becomes an additive ``mask_dtype`` mask
    (0 where allowed, ``finfo.min`` elsewhere); ``sdpa`` takes the bool mask as it is.
    ``use_cache=False`` always: transformers only detects packed sequences from ``position_ids``
    when no KV cache is passed, and an eval-mode model creates one otherwise.
    For ``flash_attention_2`` / ``flash_attention_3`` also
    transformers' varlen kwargs ``cu_seq_lens_q``/``cu_seq_lens_k`` (the padded ``cu_seqlens``, which
    cover every token) and ``max_length_q``/``max_length_k`` (Python ints). A mapping of masks (a
    family's ``attention_masks``, one per layer type) is converted mask by mask. Raises
    :class:`ConfigError` for a batch marked ``dense_mask_required`` that has no ``attention_mask``.
    """
    keys = ("input_ids", "labels", "position_ids", "attention_mask",
            *(k for kind in KINDS for k in batch.get(f"{kind}_input_keys", ())))
    kw = {k: batch[k] for k in keys if k in batch}
    kw["use_cache"] = False
    mask = kw.get("attention_mask")
    if mask is None and batch.get("dense_mask_required"):
        raise ConfigError("this family's packed samples need their own attention masks (Gemma 3: bidirectional "
                          "image blocks); build the PackCollator with dense_mask=True and attn_implementation "
                          "'sdpa' or 'eager'")
    if attn_implementation == "eager" and isinstance(mask, Mapping):  # one mask per layer type
        kw["attention_mask"] = {k: _additive(m, mask_dtype) for k, m in mask.items()}
    elif attn_implementation == "eager" and mask is not None:
        kw["attention_mask"] = _additive(mask, mask_dtype)
    if attn_implementation and attn_implementation.startswith("flash_attention"):
        kw.update(cu_seq_lens_q=batch["cu_seqlens_padded"], cu_seq_lens_k=batch["cu_seqlens_padded"],
                  max_length_q=batch["max_seqlen_padded"], max_length_k=batch["max_seqlen_padded"])
    return kw


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = attend) as the additive mask transformers' ``eager`` attention adds to the
    scores: 0 where allowed, ``finfo(dtype).min`` elsewhere; a mask that is not bool is returned as it is."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~mask, torch.finfo(dtype).min)
