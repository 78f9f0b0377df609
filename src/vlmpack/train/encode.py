"""Pack (or unpacked samples) -> token ids, labels, image tensors: the per-pack half of collation.

Token ids, labels and pixels come from the model family (:class:`vlmpack.models.base.ModelFamily`:
chat template render -> tokenizer -> media expansion, the family's label rule, its image
processor), the same code ``vlmpack pack`` measured with, so
``len(input_ids)`` must equal the pack's recorded ``num_tokens``; any disagreement
raises :class:`vlmpack.errors.PackMismatchError` naming the pack and the sample.

Accepted inputs (:func:`read_pack`):
- an Energon :class:`vlmpack.energon.sample.VlmpackPack` (media decoded to PIL by
  ``SampleDecoder(image_decode="pil")``);
- a dict with the same fields (``samples``, ``media``, ``media_parts``, optional ``__key__``,
  ``seq_len``, ``num_tokens``), media as PIL images or raw bytes;
- a raw WebDataset dict (``{"__key__", "json": bytes | dict, "img0.png": bytes, "vid1.mp4": bytes, ...}``);
- a list of unpacked samples: :class:`vlmpack.records.Sample` (media read from ``path``) or
  dicts ``{"id", "messages", "images": [PIL | bytes | path, ...]}`` whose image parts carry
  ``"index"`` (canonical form) or ``"part"``.
Videos (``{"type": "video"}`` parts; ``"videos": [...]`` in an unpacked dict) stay raw bytes, paths
or file objects here; the family decodes their sampled frames
(:meth:`~vlmpack.models.base.ModelFamily.process_videos`). Items of a later kind (audio: ``{"type":
"audio"}`` parts, ``"audios": [...]``) too; :mod:`vlmpack.train.kind_media` decodes them with the
kind's registry decoder for the family's ``process_media``.
Images are opened like transformers' ``load_image``: ``ImageOps.exif_transpose`` then
``convert("RGB")``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlmpack.errors import ConfigError, PackMismatchError, PackTooLongError, TokenIdError
from vlmpack.media.kinds.image import open_image
from vlmpack.models.chatml import assistant_label_mask
from vlmpack.train.kind_media import (
    check_media,
    expand_with_media,
    media_counts,
    media_items,
    process_pack_media,
    sample_media_counts,
    with_sound_tracks,
)
from vlmpack.train.pack_input import (
    PackInput,
    PackItem,
    _item_from_unpacked,  # noqa: F401 - vlmpack.train.online imports it here
    read_pack,
)
from vlmpack.train.processor_encode import encode_with_processor
from vlmpack.train.videos import (
    check_videos,
    expand_with_videos,
    merge_pack_media,
    process_pack_videos,
    video_features_on_images,
)

__all__ = ["IGNORE_INDEX", "EncodedPack", "PackEncoder", "PackInput", "PackItem", "assistant_label_mask",
           "open_image", "read_pack"]

log = logging.getLogger(__name__)

IGNORE_INDEX = -100


@dataclass(slots=True)
class EncodedPack:
    """One pack encoded: everything per pack that :func:`vlmpack.train.collate.collate` concatenates.

    Attributes:
      key, sample_ids: pack key and sample ids in order.
      lengths: int64 ``[n]`` tokens per sample.
      input_ids, labels: int64 ``[T]`` (labels -100 outside what the family's
        :meth:`~vlmpack.models.base.ModelFamily.label_mask` trains on, e.g. assistant content + ``<|im_end|>``).
      image_grid_thw: int64 ``[k, 3]`` per image (t, h, w in patches), in sample order.
      images_per_sample: int ``[n]``.
      pixel_values: float32 tensor from the image processor (Qwen-VL: ``[sum(t*h*w), C*tp*p*p]``;
        InternVL: the image tiles and video frames in text order, ``ModelFamily.pack_media``), or None.
      mrope: int64 ``[3, T]`` per-sample mRoPE positions or None (filled by the collator).
      extra: the family's other model inputs for the images (e.g. ``image_grid_thw`` as a tensor).
      video_grid_thw, videos_per_sample, pixel_values_videos, video_extra: the same for videos
        (:class:`~vlmpack.models.base.ProcessedVideos`; ``video_extra`` e.g. ``video_grid_thw``,
        ``second_per_grid_ts`` float32 ``[k]`` seconds per temporal patch for Qwen2.5-VL).
      media, media_per_sample: per later kind present (audio) its
        :class:`~vlmpack.models.base.ProcessedMedia` and items per sample (:mod:`vlmpack.train.kind_media`).
    """

    key: str
    sample_ids: list[str]
    lengths: np.ndarray
    input_ids: np.ndarray
    labels: np.ndarray
    image_grid_thw: np.ndarray
    images_per_sample: list[int]
    pixel_values: torch.Tensor | None = None
    mrope: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    video_grid_thw: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    videos_per_sample: list[int] = field(default_factory=list)
    pixel_values_videos: torch.Tensor | None = None
    video_extra: dict = field(default_factory=dict)
    media: dict = field(default_factory=dict)
    media_per_sample: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())


# ---------------------------------------------------------------------------------- encoding
@dataclass(slots=True)
class _Expanded:
    """One sample's ids from a pretokenized pack (image pads already expanded)."""

    ids: np.ndarray


#: What a pack longer than its ``seq_len`` most likely comes from (:class:`PackTooLongError`).
_TOO_LONG_CAUSES = ("likely causes: counts from a stale or hand-edited count cache at pack time, an output edited "
                    "after packing, or a model_dir other than the --model directory the output was packed with; "
                    "run 'vlmpack verify OUT --model DIR' and re-pack")


class PackEncoder:
    """Encodes packs with one model family (tokenizer + image processor).

    Args:
      family: a :class:`vlmpack.models.base.ModelFamily` (``vlmpack.models.load_model(dir)``).
      check_num_tokens: compare T and each sample's tokens with the counts the pack records.
      seq_len: the most tokens a pack may hold (the trainer's sequence length); ``None``: only the
        ``seq_len`` each pack records. A pack over either raises :class:`PackTooLongError`.

    Pretokenized ids (``input_ids.npy``) must be a 1-D integer array of ids ``0 <= id <
    len(family.tokenizer)``: ``len()`` of a transformers tokenizer is "the full vocabulary with
    the added tokens" (``PreTrainedTokenizerBase.__len__``; ``vocab_size`` is the base vocabulary
    without them), the ids the tokenizer can produce (151,669 for the Qwen2.5-VL tokenizer). The
    model's embedding table may have more rows (a config's ``vocab_size`` is often padded), but an
    id past the tokenizer's was never written by ``vlmpack pack``. Anything else raises
    :class:`TokenIdError`.
    """

    def __init__(self, family, *, check_num_tokens: bool = True, seq_len: int | None = None):
        self.family = family
        self.check_num_tokens = check_num_tokens
        if seq_len is not None and (not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1):
            raise ConfigError(f"seq_len must be an int >= 1 or None, got {seq_len!r}")
        self.seq_len = seq_len
        self.vocab_size = len(family.tokenizer)  # ids 0 .. len - 1, added tokens included
        family.label_mask(np.zeros(0, dtype=np.int64))  # the label rule's ConfigError, at start

    def _check_length(self, pack: PackInput, n: int, what: str) -> None:
        """:class:`PackTooLongError` when ``n`` tokens (``what``: how they were found) exceed the
        pack's recorded ``seq_len`` or this encoder's."""
        limits = [(pack.seq_len, "its recorded seq_len"), (self.seq_len, "the collator's seq_len")]
        over = [(cap, name) for cap, name in limits if cap is not None and n > cap]
        if over:
            cap, name = min(over)
            raise PackTooLongError(f"pack {pack.key!r} {what} {n:,} tokens, more than {name} {cap:,}; "
                                   f"{_TOO_LONG_CAUSES}")

    def _check_token_ids(self, pack: PackInput) -> None:
        """:class:`TokenIdError` when the pretokenized ids are no 1-D integer array or hold an id
        outside ``[0, len(tokenizer))`` (see the class docstring)."""
        ids = pack.input_ids
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise TokenIdError(f"pack {pack.key!r}: the input_ids part is a {ids.dtype} array of shape "
                               f"{ids.shape}, not 1-D integer token ids; the shard is corrupt, re-pack it")
        bad = np.flatnonzero((ids < 0) | (ids >= self.vocab_size))
        if len(bad):
            raise TokenIdError(
                f"pack {pack.key!r}: the input_ids part holds {len(bad):,} id(s) outside the tokenizer's vocabulary "
                f"[0, {self.vocab_size:,}), the first {int(ids[bad[0]])} at token {int(bad[0])}; the part was "
                "edited or made with another tokenizer: check model_dir, run 'vlmpack verify', re-pack")

    def check_texts(self, pack: PackInput) -> None:
        """:class:`PackMismatchError` for the first sample of ``pack`` whose tool use or reasoning the
        template cannot render exactly (:meth:`~vlmpack.models.base.ModelFamily.field_problem`) or
        whose text holds a special token of the tokenizer without ``"special_tokens": "split"``."""
        f = self.family
        for it in pack.items:
            problem = f.field_problem(it.messages, it.tools)
            if problem is not None:
                raise PackMismatchError(f"pack {pack.key!r} sample {it.id!r}: {problem[1]}")
            hit = f.find_special_token(it.messages, it.tools) if it.special_tokens != "split" else None
            if hit is not None:
                raise PackMismatchError(
                    f"pack {pack.key!r} sample {it.id!r}: turn {hit[0]} holds the special token {hit[1]!r}, "
                    "which would fake or cut a turn; pack with --special-tokens split (or drop the sample)")

    def labels_for(self, ids: np.ndarray) -> np.ndarray:
        """int64 labels ``[n]`` of one sample's ids (-100 where the family's label mask is False)."""
        return np.where(self.family.label_mask(ids), ids, IGNORE_INDEX).astype(np.int64)

    def process_images(self, images: list[Image.Image]) -> tuple[torch.Tensor | None, np.ndarray]:
        """``(pixel_values float32, image_grid_thw int64 [k, 3])`` in order; (None, [0,3]) if none."""
        out = self.family.process_images(images)
        return out.pixel_values, out.grids

    def _pretokenized(self, pack: PackInput) -> list[_Expanded] | None:
        """Split a pretokenized pack's ids by the recorded per-sample counts (None if unknown),
        after :meth:`_check_token_ids`."""
        self._check_token_ids(pack)
        counts = [it.recorded_tokens for it in pack.items]
        if any(c is None for c in counts):
            return None
        if sum(counts) != len(pack.input_ids):
            raise PackMismatchError(f"pack {pack.key!r}: input_ids part holds {len(pack.input_ids)} tokens but the "
                                    f"samples record {sum(counts)}; the shard is corrupt, re-pack it")
        bounds = np.cumsum([0] + counts)
        return [_Expanded(pack.input_ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def encode(self, obj: Any) -> EncodedPack:
        """Encode one pack (any input accepted by :func:`read_pack`) into an :class:`EncodedPack`.

        Raises :class:`PackMismatchError` (one line, pack key + sample id) when a sample's
        image-pad tokens do not match its image features, when a sample's / the pack's token
        count differs from the recorded one, or when a sample's text holds a special token of the
        tokenizer and the sample does not say ``"special_tokens": "split"`` (the pack JSON key
        ``vlmpack pack --special-tokens split`` writes; such text is then tokenized as plain text,
        exactly as it was counted); :class:`PackTooLongError` when the pack holds more tokens than
        its ``seq_len`` or the encoder's (its ``input_ids`` part before any image is processed, the
        encoded length after the count checks: a pack whose record alone is off is a
        :class:`PackMismatchError`); :class:`TokenIdError` for pretokenized ids outside the
        vocabulary (class docstring).
        """
        pack = read_pack(obj)
        f = self.family
        if not pack.items:
            raise PackMismatchError(f"pack {pack.key!r} holds no samples")
        if getattr(f, "encodes_with_processor", False):  # the generic family: its processor per sample
            return EncodedPack(**encode_with_processor(self, pack))
        if pack.input_ids is not None:  # before any image is decoded
            self._check_length(pack, len(pack.input_ids), "has an input_ids part of")
        raw_ids = self._pretokenized(pack) if pack.input_ids is not None else None
        if raw_ids is None:
            self.check_texts(pack)
            raw_ids = f.token_ids([it.messages for it in pack.items], [it.special_tokens for it in pack.items],
                                  [it.tools for it in pack.items])
        all_imgs = [im for it in pack.items for im in it.images]
        processed = f.process_images(all_imgs, [len(it.images) for it in pack.items])
        videos = process_pack_videos(f, [v for it in pack.items for v in it.videos])
        processed, videos = merge_pack_media(f, processed, videos, [k for it in pack.items
                                                                    for k in (it.kinds or ["image"] * len(it.images))])
        pixel_values, grids, tokens_per_image = processed.pixel_values, processed.grids, processed.tokens
        media, media_per_sample = process_pack_media(f, [media_items(f, it) for it in pack.items])
        videos = with_sound_tracks(f, videos, media, pack.items)  # a video's tokens: its sound track's too
        ids_list, labels_list, lengths, per_sample = [], [], [], []
        gi = vi = 0
        mi: dict[str, int] = {}
        for it, ids0 in zip(pack.items, raw_ids):
            k, kv = len(it.images), len(it.videos)
            if isinstance(ids0, _Expanded):  # pretokenized: pads already expanded
                ids = ids0.ids.astype(np.int64)
            else:
                ids0 = np.asarray(ids0, dtype=np.int32)
                later = sample_media_counts(it)
                problem = f.check_ids(ids0, k, kv, **{f"n_{kind}s": n for kind, n in later.items()})
                if problem:
                    raise PackMismatchError(f"pack {pack.key!r} sample {it.id!r}: {problem}")
                if later:
                    ids = expand_with_media(f, ids0, it, tokens_per_image[gi:gi + k], media, mi,
                                            videos, vi).astype(np.int64)
                elif kv:
                    ids = expand_with_videos(f, ids0, it, tokens_per_image[gi:gi + k], videos, vi).astype(np.int64)
                else:
                    ids = f.expand(ids0, tokens_per_image[gi:gi + k]).astype(np.int64)
            check_videos(f, pack.key, it, ids, videos, vi, self.check_num_tokens)
            check_media(f, pack.key, it, ids, media, mi, self.check_num_tokens)
            n_pad = int(np.count_nonzero(ids == f.image_token_id))
            n_feat = int(tokens_per_image[gi:gi + k].sum()) + video_features_on_images(f, videos, vi, kv)
            if n_pad != n_feat:  # pretokenized ids vs features of the decoded images (or a family change)
                raise PackMismatchError(f"pack {pack.key!r} sample {it.id!r}: {n_pad} image tokens for "
                                        f"{n_feat} image features")
            if self.check_num_tokens and it.recorded_media:
                for (part, rec), got in zip(it.recorded_media, tokens_per_image[gi:gi + k].tolist()):
                    if rec is not None and rec != got:
                        raise PackMismatchError(
                            f"pack {pack.key!r} sample {it.id!r}: image {part} gives {got} image tokens but the "
                            f"pack records {rec}; the image processor config differs from the packing one, or "
                            "the image decodes to another size than the recorded one (an EXIF orientation the "
                            "packing vlmpack did not read: re-pack)")
            if self.check_num_tokens and it.recorded_tokens is not None and len(ids) != it.recorded_tokens:
                raise PackMismatchError(
                    f"pack {pack.key!r} sample {it.id!r}: re-encoded to {len(ids)} tokens but the pack records "
                    f"{it.recorded_tokens}; the tokenizer/processor differ from those 'vlmpack pack' used "
                    "(pass the same --model directory or re-pack)")
            gi, vi = gi + k, vi + kv
            for kind, n in media_counts(f, it).items():
                mi[kind] = mi.get(kind, 0) + n
            ids_list.append(ids)
            labels_list.append(self.labels_for(ids))
            lengths.append(len(ids))
            per_sample.append(k)
        total = int(sum(lengths))
        if self.check_num_tokens and pack.num_tokens is not None and total != pack.num_tokens:
            raise PackMismatchError(f"pack {pack.key!r}: re-encoded to {total} tokens but the pack records "
                                    f"{pack.num_tokens}; re-pack with the same model directory")
        self._check_length(pack, total, "encodes to")
        return EncodedPack(key=pack.key, sample_ids=[it.id for it in pack.items],
                           lengths=np.asarray(lengths, dtype=np.int64),
                           input_ids=np.concatenate(ids_list), labels=np.concatenate(labels_list),
                           image_grid_thw=grids, images_per_sample=per_sample, pixel_values=pixel_values,
                           extra=processed.model_kwargs, video_grid_thw=videos.grids,
                           videos_per_sample=[len(it.videos) for it in pack.items],
                           pixel_values_videos=videos.pixel_values, video_extra=videos.model_kwargs,
                           media=media, media_per_sample=media_per_sample)

