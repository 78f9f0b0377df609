"""The :class:`ModelFamily` protocol: everything vlmpack needs to know about one model family.

A family object is built from one local HF-format model directory (``vlmpack.models.load_model``)
and answers, without decoding pixels on the counting path, every model-specific question of the
pipeline and of the training side:

- which model files decide counts (config fingerprint): :attr:`ModelFamily.counting_files`;
- which media sizes the processor takes (``pack.validate``): :meth:`ModelFamily.media_problem`;
- media tokens from a header (``pack.count``, ``train.online``): :meth:`ModelFamily.media_tokens`;
- special tokens refused in user text: :meth:`ModelFamily.find_special_token`; tool use and
  reasoning the template cannot render or that hold special tokens: :meth:`ModelFamily.field_problem`;
- the rendered, unexpanded ids and their check: :meth:`ModelFamily.token_ids`, :meth:`ModelFamily.check_ids`;
- the exact count: :meth:`ModelFamily.num_tokens`; ``input_ids``: :meth:`ModelFamily.expand` /
  :meth:`ModelFamily.encode` (collator, ``--pretokenize``);
- what is trained on: :meth:`ModelFamily.label_mask`;
- positions: :attr:`ModelFamily.mrope` and :meth:`ModelFamily.rope_model_class` (``train.rope``);
- pixels for the model: :meth:`ModelFamily.process_images` (one pack) and
  :meth:`ModelFamily.batch_image_inputs` (the batch's model kwargs), for videos
  :meth:`ModelFamily.process_videos`, :meth:`ModelFamily.batch_video_inputs` and
  :meth:`ModelFamily.expand_videos`; the placeholder image for
  text-only batches (FSDP): :meth:`ModelFamily.placeholder`.

Two optional members (the collator uses them when present): ``video_feature_token_id``, the id
whose embeddings the video features replace when it is not ``video_token_id`` (InternVL: its
image token, frames being image tiles to the model), and ``pack_media(images, videos, kinds)``,
which merges a pack's :class:`ProcessedImages` and :class:`ProcessedVideos` when the model takes
video frames among the image inputs (InternVL: one ``pixel_values``, media in text order).

Media of a kind after video (the registry :data:`vlmpack.media.kinds.KINDS`: ``"audio"``) reach a
family through two more optional members, which the collator calls for any such kind present in a
pack (it names no family): ``process_media(kind, items, items_per_sample)``, the items of one pack
decoded by the kind's registry decoder (audio: float32 16 kHz mono waveforms) ->
:class:`ProcessedMedia`, and ``batch_media_inputs(kind, parts)``, the model keyword arguments of a
batch from those of its packs. The family's ``<kind>_token_id`` (``audio_token_id``) is the token
whose embeddings the kind's features replace; the encoder checks its count against
:attr:`ProcessedMedia.tokens`. A family without them cannot train on such a kind
(:class:`ConfigError`). An mRoPE family whose model's ``get_rope_index`` takes other inputs than
the Qwen-VL ones (Qwen2.5-Omni: audio lengths, no ``mm_token_type_ids``) gives
``mrope_indexer(impl)``: an object with the ``pack_positions`` of
:class:`vlmpack.train.rope.MRopeIndexer`, which the collator then uses instead.

Media of any kind go through the same methods (``kind`` is ``"image"`` or ``"video"``); a family
that cannot count a kind raises :class:`MediaRuleError`, which becomes a ``media_unsupported``
rejection. Adding a family is one module with a class that satisfies this protocol and one line
in :data:`vlmpack.models.FAMILIES` (see CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: Files of a model directory that decide token counts in every family so far (tokenizer, chat
#: template, processor and model config); a family may add its own (``counting_files``).
COUNTING_FILES = ("config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                  "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                  "chat_template.json", "chat_template.jinja", "video_preprocessor_config.json")


@dataclass(frozen=True, slots=True)
class MediaSize:
    """What a family needs to count one media item: its ``kind``, ``width`` x ``height`` in pixels
    as the processor sees it (after EXIF orientation) and, for videos, ``duration_s`` (seconds),
    ``fps`` and ``frames``. :class:`vlmpack.records.Media` has the same fields and is accepted
    wherever a ``MediaSize`` is."""

    kind: str
    width: int
    height: int
    duration_s: float | None = None
    fps: float | None = None
    frames: int | None = None


@dataclass(slots=True)
class ProcessedImages:
    """The image processor's output for the images of one pack, in order.

    ``pixel_values``: float32 tensor (layout of the family, e.g. ``[sum(t*h*w), C*tp*p*p]`` for
    Qwen-VL) or None without images; ``grids``: int64 ``[k, 3]`` (t, h, w in patches) per image;
    ``tokens``: int64 ``[k]`` media tokens per image; ``model_kwargs``: the extra tensors the
    model's ``forward`` takes beside ``pixel_values`` (e.g. ``{"image_grid_thw": ...}``)."""

    pixel_values: Any
    grids: np.ndarray
    tokens: np.ndarray
    model_kwargs: dict


@dataclass(slots=True)
class ProcessedVideos:
    """The video pixels of one pack, in order (:meth:`ModelFamily.process_videos`).

    ``pixel_values``: float32 tensor (Qwen-VL: ``pixel_values_videos`` ``[sum(t*h*w), C*tp*p*p]``)
    or None without videos; ``grids``: int64 ``[k, 3]`` (t, h, w in patches) per video;
    ``tokens``: int64 ``[k]`` the media tokens of each video as :meth:`ModelFamily.media_tokens`
    counts them; ``features``: int64 ``[k]`` video-pad tokens (feature vectors) per video;
    ``model_kwargs``: the per-video tensors ``forward`` takes beside the pixels (e.g.
    ``{"video_grid_thw": ..., "second_per_grid_ts": ...}``); ``layouts``: per video what
    :meth:`ModelFamily.expand_videos` needs beyond the token count (Qwen3-VL: the timestamp
    strings), else None."""

    pixel_values: Any
    grids: np.ndarray
    tokens: np.ndarray
    features: np.ndarray
    model_kwargs: dict
    layouts: list


@dataclass(slots=True)
class ProcessedMedia:
    """The items of one kind after video (``kind``, e.g. ``"audio"``) of one pack, in sample order
    (``process_media``, see the module docstring).

    ``tokens``: int64 ``[k]`` the feature tokens of each item as the model's processor counts them
    from the processed data (Qwen2.5-Omni: from the feature attention mask), which the encoder
    compares with :meth:`ModelFamily.media_tokens`' count recorded at pack time; ``model_kwargs``:
    the tensors ``forward`` takes for these items, one row per item on dim 0 (Qwen2.5-Omni:
    ``input_features`` float32 ``[k, 128, 30000]``, ``feature_attention_mask`` int32 ``[k, 30000]``)."""

    kind: str
    tokens: np.ndarray
    model_kwargs: dict


def cat_rows(tensors: Sequence[Any]) -> Any:
    """``torch.cat(tensors, dim=0)``, or the one tensor itself when there is one (a batch of one
    pack: no copy of its pixels). Used by the families' ``batch_*_inputs``."""
    if len(tensors) == 1:
        return tensors[0]
    import torch

    return torch.cat(list(tensors), dim=0)


@runtime_checkable
class ModelFamily(Protocol):
    """Renderer, counter, encoder and training rules of one model directory (see module docstring).

    Attributes: ``name`` (family name), ``model_dir``, ``tokenizer`` (transformers fast
    tokenizer), ``counting_files``, ``special_tokens`` (strings refused in user text),
    ``image_token_id`` (the id whose embeddings the image features replace), ``pad_token_id``,
    ``mrope`` (True: positions are per-sample 3-D mRoPE; False: 1-D).

    Optional: ``attention_masks(batch, attn_implementation) -> {layer type: bool [1, 1, T, T]}`` for
    a family whose samples attend beyond a causal block (Gemma 3's bidirectional image tokens); the
    collator then builds those masks with ``dense_mask=True`` and has no mask-free packed path.
    """

    name: str
    model_dir: str
    tokenizer: Any
    counting_files: tuple[str, ...]
    special_tokens: tuple[str, ...]
    image_token_id: int
    pad_token_id: int
    mrope: bool

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """A one-line reason when the processor refuses a ``kind`` item of that size, else None."""

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """Media tokens of one item from its header; raises :class:`MediaRuleError`.
        ``sample_images``: the number of images of the sample the item belongs to (LLaVA-OneVision
        counts an image of a multi-image sample by another rule; the other families ignore it)."""

    def find_special_token(self, messages: Sequence[dict], tools: Sequence[dict] | None = None
                           ) -> tuple[int, str] | None:
        """``(turn index, token)`` of the first refused special token in the user text, or None."""

    def field_problem(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> tuple[str, str] | None:
        """``(reason, detail)`` when the conversation's tools, tool calls, reasoning or tool turns
        cannot be packed exactly (the template does not render one: ``template_unsupported``; one
        holds a special token: ``special_token_in_text``), else None."""

    def token_ids(self, messages_list: Sequence[Sequence[dict]], special_tokens: Sequence[str | None],
                  tools_list: Sequence[Sequence[dict] | None] | None = None) -> list:
        """Unexpanded ids (one placeholder token per media item) of each conversation, batched;
        ``tools_list``: each conversation's tool schemas (``apply_chat_template(tools=...)``)."""

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem when unexpanded ``ids`` do not hold one placeholder per media item.
        The count stage passes the counts of the kinds after video as keywords ``n_<kind>s``
        (``n_audios``), and only to a family whose ``media_tokens`` counted such items: a family
        that takes another kind adds that keyword (:class:`~vlmpack.models.qwen2_5_omni.Qwen25OmniFamily`)."""

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """Length of :meth:`expand` ``(ids, media_tokens)`` without building it."""

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """int32 ``input_ids`` with every placeholder expanded to its media tokens."""

    def encode(self, messages: Sequence[dict], media_tokens: Sequence[int],
               special_tokens: str | None = None, tools: Sequence[dict] | None = None) -> np.ndarray:
        """Full int32 ``input_ids`` of one sample (:meth:`token_ids` + :meth:`expand`)."""

    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: the tokens of one sample's expanded ids that are trained on."""

    def rope_model_class(self) -> type:
        """The transformers model class whose ``get_rope_index`` defines mRoPE (``mrope`` only)."""

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """Decoded PIL RGB images of one pack -> :class:`ProcessedImages` (the processor's own call).
        ``images_per_sample``: how many of ``images`` each sample of the pack holds, in order (sum =
        ``len(images)``; None: every image a sample of its own), for families whose pixels depend on
        it (LLaVA-OneVision's multi-image path); the same rule as ``media_tokens(sample_images=)``."""

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """The model's image keyword arguments for a batch from the :meth:`process_images` outputs
        of its packs, in order (Qwen-VL: ``pixel_values`` concatenated on dim 0 and
        ``image_grid_thw``; a family whose tensors need padding across images does it here). The
        keys are what :func:`vlmpack.train.collate.model_inputs` passes to ``forward``."""

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """The videos of one pack (raw bytes, paths or binary file objects, in order) ->
        :class:`ProcessedVideos`: frames sampled by the same rule as the count, decoded with PyAV,
        resized and normalized as the family's video processor does. Raises
        :class:`MediaRuleError` / ``MediaDecodeError``, :class:`ConfigError` for a family that
        cannot train on videos."""

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """The model's video keyword arguments for a batch from the :meth:`process_videos` outputs
        of its packs, in order (Qwen-VL: ``pixel_values_videos``, ``video_grid_thw`` and, for
        Qwen2.5-VL, ``second_per_grid_ts``)."""

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:meth:`expand` for unexpanded ids that hold videos: int32 ``input_ids`` of length
        :meth:`num_tokens`, ``layouts`` the videos' :attr:`ProcessedVideos.layouts` in order,
        ``media_tokens`` and ``kinds`` (``"image"`` / ``"video"``) per media item in order of
        appearance in the content (a family whose template renders media in another order, e.g.
        LLaVA-OneVision's images before videos in a turn, needs ``kinds``; the others ignore it)."""

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``(ids int64 [n], [PIL image])``: a minimal image segment for text-only batches."""
