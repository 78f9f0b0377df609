"""The generic family: any model directory whose own transformers processor builds and answers
``_get_num_multimodal_tokens`` (:class:`GenericFamily`, used for a ``model_type`` that no dedicated
family in :data:`vlmpack.models.FAMILIES` claims).

Counting, from image *headers* only (no pixels decoded):

- the processor is built as ``AutoProcessor.from_pretrained`` builds it, images only where
  torchvision is missing (:func:`vlmpack.models.processor_build.build_processor`);
- the text is the processor's chat template rendered with one ``{"type": "image"}`` part per image
  (``ProcessorMixin.apply_chat_template(tokenize=False)``), tokenized as the processor tokenizes it
  (``add_special_tokens=False`` when the rendered text already starts with the BOS token, as
  ``apply_chat_template(tokenize=True)`` does);
- an image of ``h`` x ``w`` pixels adds ``n = processor._get_num_multimodal_tokens(image_sizes=[(h,
  w)]).num_image_tokens[0]`` tokens plus a per-processor constant ``k``, so
  ``len(input_ids) = len(tokenizer(text)) + sum(n_i + k)``. Each :meth:`GenericFamily.media_tokens`
  is ``n + k + 1``: what the one placeholder token of the text becomes.

``k`` is *calibrated* when the family is built (:func:`vlmpack.models.generic_rules.calibrate`):
the processor runs on blank images of five sizes (12 x 12 to 900 x 1500 px) in three conversations
(image first, between text, two images in one turn) and a raw text, and must give the same ``k``
everywhere, and the text it puts in place of the placeholder must start and end with an added
token, so that it can never merge with the text around it. A processor that fails this (Gemma 3's
``"\\n\\n"`` around its image tokens, Idefics3 with row/column tags that are not added tokens, Aya
Vision's ``TILE_k`` text, PaliGemma's ``"\\n"`` after the whole text) is refused
with one line naming the reason: its count would not be exact, it needs a dedicated family. A
processor whose ``k`` holds for one image but not for two (LLaVA-OneVision's multi-image path)
counts samples with one image and rejects samples with several (``media_unsupported``).

Labels: the assistant header is what ``add_generation_prompt=True`` adds to a rendered user turn,
the end of turn the first added token after an assistant reply; :meth:`GenericFamily.label_mask`
trains on the tokens after each header up to and including that end token (the ChatML rule of
:func:`vlmpack.models.chatml.assistant_label_mask`, found on any template).

Training: :meth:`GenericFamily.process_sample` calls the processor itself on each sample's text and
decoded images (``input_ids``, ``pixel_values`` and its other image tensors), and the collator
packs the samples with ``position_ids`` restarting at 0 and ``cu_seqlens`` (what transformers'
``DataCollatorWithFlattening`` relies on); positions are 1-D (``mrope`` False).

Source: transformers 5.x ``processing_utils.ProcessorMixin`` (``apply_chat_template``,
``__call__``), each processor's ``_get_num_multimodal_tokens`` and ``_get_image_token_count`` /
``replace_image_token`` logic, checked by calibration rather than restated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages
from vlmpack.models.generic_rules import (
    calibrate,
    cat_padded,
    label_markers,
    marker_label_mask,
    num_image_tokens,
    template_image_string,
)
from vlmpack.models.processor_build import build_processor
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["GenericFamily"]


class GenericFamily(Qwen2VLFamily):
    """A :class:`~vlmpack.models.base.ModelFamily` built from the model directory's own processor
    (module docstring). Raises :class:`ConfigError` (one line) when the processor cannot be built
    here, has no ``_get_num_multimodal_tokens``, has no chat template, or fails calibration.

    Extra attributes: ``processor``; ``offset`` (``k``); ``multi_image`` (False: samples with
    several images are ``media_unsupported``); ``repeats`` (:meth:`expand` available);
    ``image_string`` (what the template writes for an image); ``processor_class`` (its class name)."""

    name = "generic"
    mrope = False
    encodes_with_processor = True  # the collator calls process_sample (vlmpack.train.processor_encode)

    def __init__(self, model_dir: str | Path):
        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.processor = build_processor(model_dir)
        cls = type(self.processor)  # the directory's class (or its subclass of the same name accepting no video)
        self.processor_class = cls.__name__
        if not hasattr(cls, "_get_num_multimodal_tokens"):
            raise ConfigError(f"{model_dir}: {cls.__name__} has no _get_num_multimodal_tokens, so its media tokens "
                              "cannot be counted from sizes; this model needs a dedicated family")
        if getattr(self.processor, "image_processor", None) is None:
            raise ConfigError(f"{model_dir}: {cls.__name__} has no image processor")
        if not getattr(self.processor, "chat_template", None):
            raise ConfigError(f"{model_dir}: {cls.__name__} has no chat template (chat_template.jinja/.json or "
                              "tokenizer_config.json's chat_template)")
        self.tokenizer = self.processor.tokenizer
        try:
            self.model_type = str(json.loads((d / "config.json").read_text()).get("model_type"))
        except (OSError, ValueError):
            raise ConfigError(f"{model_dir}: cannot read config.json") from None
        self.counting_files = (*COUNTING_FILES, "processor_config.json")
        self.special_tokens = special_token_strings(self.tokenizer)
        self._special_re = special_token_pattern(self.special_tokens)
        self.image_string = template_image_string(self._render_plain)
        placeholder = next((t for t in (getattr(self.processor, "image_placeholder_token", None),
                                        getattr(self.processor, "image_token", None))
                            if t and t in self.image_string), None)
        if placeholder is None:
            raise ConfigError(f"{model_dir}: the chat template writes {self.image_string!r} for an image, which holds "
                              f"no image token of {cls.__name__}")
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids(placeholder))
        tok = self.tokenizer
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else
                                tok.eos_token_id if tok.eos_token_id is not None else 0)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        cal = calibrate(self)
        if cal.problem:
            raise ConfigError(f"{model_dir}: {cls.__name__}'s image tokens cannot be counted exactly from sizes "
                              f"({cal.problem}); this model needs a dedicated family")
        self.offset, self.multi_image, self.repeats = cal.offset, cal.multi_image, cal.repeats
        self._markers = None

    # ------------------------------------------------------------------ text
    def _render_plain(self, messages: list[dict], *, add_generation_prompt: bool = False) -> str:
        out = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return out[0] if isinstance(out, list) else out

    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """The chat template of the processor rendered with ``add_generation_prompt=False`` and
        ``tools`` (``ProcessorMixin.apply_chat_template(tokenize=False)``)."""
        out = self.processor.apply_chat_template(self.template_messages(messages), tools=list(tools) if tools else None,
                                                 tokenize=False, add_generation_prompt=False)
        return out[0] if isinstance(out, list) else out

    def text_kwargs(self, text: str) -> dict:
        """The tokenizer keywords the processor's ``apply_chat_template(tokenize=True)`` uses for
        ``text``: ``add_special_tokens=False`` when it already starts with the BOS token."""
        bos = self.tokenizer.bos_token
        return {"add_special_tokens": False} if bos and text.startswith(bos) else {}

    tokenize_uses_fast_bpe = True

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of rendered texts, batched per :meth:`text_kwargs` group; through
        :attr:`fast_bpe` where it gives the tokenizer's ids (then the post-processor adds no token,
        :func:`~vlmpack.models.tiktoken_bpe.problem`, so ``add_special_tokens=False`` changes nothing
        and both groups get the default call's ids)."""
        fast = self.fast_bpe
        if fast is not None:
            return fast(texts)
        out: list = [None] * len(texts)
        groups: dict[bool, list[int]] = {}
        for i, t in enumerate(texts):
            groups.setdefault(bool(self.text_kwargs(t)), []).append(i)
        for no_special, idx in groups.items():
            kw = {"add_special_tokens": False} if no_special else {}
            for i, ids in zip(idx, self.tokenizer([texts[i] for i in idx], **kw)["input_ids"]):
                out[i] = ids
        return out

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        try:
            n = num_image_tokens(self.processor, height, width)
        except Exception as e:  # noqa: BLE001 - the processor's own refusal of a size
            raise MediaRuleError(f"{self.processor_class} refuses a {width}x{height} image "
                                 f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        return n + self.offset + 1

    def image_tokens(self, width: int, height: int) -> int:
        """Tokens the placeholder of an image of ``width`` x ``height`` pixels becomes: ``n + k + 1``
        (module docstring). Raises :class:`MediaRuleError` for sizes the processor refuses."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """A one-line reason for a video or audio item (the generic family counts images), or an
        image size the processor refuses; else None."""
        if kind != "image":
            return f"the generic family ({self.processor_class}) counts images only, not {kind}s"
        try:
            self.image_tokens(width, height)
        except MediaRuleError as e:
            return str(e)
        return None

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """:meth:`image_tokens` of an image; :class:`MediaRuleError` for another kind and, when the
        processor's offset does not hold for several images in one sample, for ``sample_images`` > 1."""
        if media.kind != "image":
            raise MediaRuleError(f"the generic family ({self.processor_class}) counts images only, not {media.kind}s")
        if sample_images > 1 and not self.multi_image:
            raise MediaRuleError(f"{self.processor_class} counts an image of a multi-image sample by another rule "
                                 "than its _get_num_multimodal_tokens; samples with one image only")
        return self.image_tokens(media.width, media.height)

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold exactly one placeholder per image and
        the sample has no video."""
        got = int(np.count_nonzero(ids == self.image_token_id))
        if got != n_images or n_videos:
            return f"rendered text holds {got} image placeholders for {n_images} images and {n_videos} videos"
        return None

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """int32 ``input_ids`` with the i-th placeholder repeated ``media_tokens[i]`` times, for a
        processor whose ids are exactly that (``repeats``, found by the calibration: LLaVA,
        LLaVA-NeXT, Qwen-VL; used by ``--pretokenize``, ``vlmpack inspect`` and ``verify``). Else
        :class:`ConfigError`: a placeholder becomes the processor's own text (tile tags, ...), only
        the processor builds those ids (the collator: :meth:`process_sample`). ``ValueError`` when
        placeholders and ``media_tokens`` differ in number."""
        if not self.repeats:
            raise ConfigError(f"{self.model_dir}: {self.processor_class} puts more than its image token in place of "
                              "an image; its input_ids come from the processor on the decoded images (the collator), "
                              "so --pretokenize and 'vlmpack inspect' need a dedicated family")
        ids = np.asarray(ids, dtype=np.int32)
        pads = np.flatnonzero(ids == self.image_token_id)
        if len(pads) != len(media_tokens):
            raise ValueError(f"{len(pads)} image placeholders in the ids for {len(media_tokens)} images")
        reps = np.ones(len(ids), dtype=np.int64)
        reps[pads] = np.asarray(media_tokens, dtype=np.int64)
        return np.repeat(ids, reps)

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: the tokens after each assistant header up to and including its end-of-turn
        token (module docstring). :class:`ConfigError` when the template shows no such markers."""
        if self._markers is None:
            self._markers = label_markers(self._render_plain, self.tokenizer, self.model_dir)
        return marker_label_mask(np.asarray(ids), self._markers)

    def rope_model_class(self) -> type:
        """The generic family has 1-D positions: :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: the generic family uses 1-D positions; there is no mRoPE model class")

    def process_sample(self, messages: Sequence[dict], images: list, special_tokens: str | None = None,
                       tools: Sequence[dict] | None = None) -> tuple[np.ndarray, dict]:
        """The processor's own call on one sample: ``(input_ids int64 [n], image tensors)``, the
        tensors the processor returns besides ``input_ids`` / ``attention_mask`` (``pixel_values``
        and e.g. ``image_sizes``), each with one leading row per image or per sample as the
        processor gives them. ``special_tokens="split"`` is refused (:class:`ConfigError`)."""
        if special_tokens == "split":
            raise ConfigError(f"{self.model_dir}: the generic family cannot train on --special-tokens split samples")
        text = self.render(messages, tools)
        out = self.processor(text=[text], images=[list(images)] if images else None, return_tensors="pt",
                             **self.text_kwargs(text))
        ids = out["input_ids"][0].numpy().astype(np.int64)
        tensors = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", "token_type_ids",
                                                              "mm_token_type_ids")}
        return ids, tensors

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's call on decoded images (the collator's placeholder image; packs
        go through :meth:`process_sample`): ``pixel_values`` and the other tensors it returns."""
        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = dict(self.processor.image_processor(images=list(images), return_tensors="pt"))
        pixels = out.pop("pixel_values")
        tokens = np.asarray([self.image_tokens(*im.size) for im in images], dtype=np.int64)
        return ProcessedImages(pixels, np.tile(np.asarray([[1, 0, 0]], dtype=np.int64), (len(images), 1)), tokens, out)

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` and the processor's other image tensors of every pack, concatenated on
        dim 0, zero-padded on the other dims to the largest (as the processors pad a batch, e.g.
        LLaVA-NeXT's patch counts)."""
        out = {"pixel_values": cat_padded([p.pixel_values for p in parts])}
        for k in parts[0].model_kwargs:
            out[k] = cat_padded([p.model_kwargs[k] for p in parts])
        return out

    def placeholder(self) -> tuple[np.ndarray, list]:
        """Not available for the generic family (no placeholder image for text-only batches)."""
        raise ConfigError(f"{self.model_dir}: the generic family has no placeholder image for text-only batches")
