"""Qwen2-VL / Qwen2.5-VL (:class:`Qwen2VLFamily`, ``model_type`` ``qwen2_vl`` / ``qwen2_5_vl``): the
:class:`~vlmpack.models.base.ModelFamily` rules, exact token counts and ``input_ids`` without
decoding pixels.

The rule matched is the one of transformers' ``Qwen2VLProcessor.__call__`` (``processing_qwen2_vl``):
the chat template is rendered with the tokenizer's own ``apply_chat_template`` (one
``<|vision_start|><|image_pad|><|vision_end|>`` per image), every ``<|image_pad|>`` is expanded to
``image_grid_thw.prod() // merge_size**2`` copies, and the text is tokenized with the tokenizer's
default call. Because ``<|image_pad|>`` is a special (added) token, the tokenizer splits the text
at it, so::

    len(input_ids) = len(tokenizer(rendered)["input_ids"]) + sum(n_i - 1 for each image i)

Videos: ``<|video_pad|>`` is expanded the same way to ``video_grid_thw.prod() // merge_size**2``
copies, the grid from the video *header* (frames, fps, size; :mod:`vlmpack.media.video`) through
the video processor's frame sampling and resize rule (:class:`vlmpack.models.qwen_video_rule.QwenVideoRule`,
a mixin of :class:`Qwen2VLFamily`).

``n_i`` comes from the image *header* (width, height after EXIF orientation) through
``Qwen2VLImageProcessorPil.get_number_of_image_patches(height, width) // merge_size**2``, the same
``smart_resize`` rule the processor applies to decoded pixels (the API vLLM uses to count
without pixels), with ``min_pixels``/``max_pixels``/``patch_size``/``merge_size`` read from the
model directory's ``preprocessor_config.json``.

Training rules: labels by the ChatML scan (:func:`vlmpack.models.chatml.assistant_label_mask`),
per-sample mRoPE from the model class's ``get_rope_index`` (:meth:`Qwen2VLFamily.rope_model_class`,
used by :mod:`vlmpack.train.rope`), pixels from ``Qwen2VLImageProcessorPil``'s own call.
Qwen3-VL (:mod:`vlmpack.models.qwen3_vl`) shares all of this and overrides the model class.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.chatml import assistant_label_mask
from vlmpack.models.qwen_image_rule import QwenImageSettings, recorded_settings
from vlmpack.models.qwen_video_rule import VIDEO_PIXEL_KEYS, QwenVideoRule
from vlmpack.models.special_tokens import (
    find_joined_special_token,
    has_cut_edge,
    render_pieces,
    scan_text_parts,
    special_token_pattern,
    special_token_strings,
    token_cuts,
    tokenize_pieces,
)
from vlmpack.models.template_render import TemplateRender, apply_template
from vlmpack.models.tiktoken_bpe import fast_encoder
from vlmpack.models.tool_fields import field_special_token, unrendered_field, used_fields
from vlmpack.records import MESSAGE_EXTRAS

log = logging.getLogger(__name__)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # pool workers: no nested Rayon threads


__all__ = ["MAX_ASPECT_RATIO", "MediaRuleError", "Qwen2VLFamily"]

#: Largest accepted ``max(w, h) / min(w, h)``: transformers' Qwen2-VL ``smart_resize`` raises above it.
MAX_ASPECT_RATIO = 200.0


class Qwen2VLFamily(QwenVideoRule):
    """Renderer, counter, encoder and training rules for one Qwen2-VL / Qwen2.5-VL model directory
    (a :class:`vlmpack.models.base.ModelFamily`).

    Attributes: ``tokenizer`` (transformers fast tokenizer), ``image_processor``
    (``Qwen2VLImageProcessorPil``), ``merge_size``, ``patch_size``, ``model_type`` (of
    ``config.json``), and the special token ids ``image_token_id``, ``video_token_id``,
    ``vision_start_token_id``, ``vision_end_token_id``, ``im_start_id``, ``im_end_id``,
    ``pad_token_id``. Raises :class:`ConfigError` when the directory lacks a tokenizer, a chat
    template or a preprocessor config.
    """

    name = "qwen2_vl"
    #: the image rule's settings (:mod:`vlmpack.models.qwen_image_rule`); ``None``: the processor's own method
    image_settings: QwenImageSettings | None = None
    #: which video rule the family follows (:mod:`vlmpack.models.qwen_video`): "qwen2" (no timestamps),
    #: "qwen3" (timestamp text per temporal patch); other families override ``process_videos``
    video_rule = "qwen2"
    counting_files = COUNTING_FILES
    mrope = True
    max_aspect_ratio = MAX_ASPECT_RATIO
    #: the named processor options this family takes and the settings each sets
    #: (:mod:`vlmpack.models.options`; ``--fps`` turns frame sampling on, as its number alone does not)
    processor_options = {
        "min_pixels": (("image", "min_pixels"),), "max_pixels": (("image", "max_pixels"),),
        "patch_size": (("image", "patch_size"), ("video", "patch_size")),
        "merge_size": (("image", "merge_size"), ("video", "merge_size")),
        "fps": (("video", "fps"), ("video", "do_sample_frames", True), ("video", "num_frames", None)),
        "min_frames": (("video", "min_frames"),), "max_frames": (("video", "max_frames"),),
        "video_max_pixels": (("video", "max_pixels"),),
    }
    #: the video processor settings the family reads (``--processor-kwargs`` may set them)
    video_option_keys = (*QwenVideoRule.video_defaults, "min_pixels", "max_pixels", *VIDEO_PIXEL_KEYS)

    @classmethod
    def image_processor_class(cls) -> type:
        """The transformers image processor class the family builds (its ``valid_kwargs`` are the
        image settings ``--processor-kwargs`` may set)."""
        from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil

    def __init__(self, model_dir: str | Path):
        self.model_dir = str(model_dir)
        self.tokenizer = load_chat_tokenizer(model_dir, light=True)
        if not (Path(model_dir) / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        self.image_settings = recorded_settings(self)  # the processor is built here only before a recipe
        settings = self.image_settings or self.image_processor
        self.merge_size = int(settings.merge_size)
        self.patch_size = int(settings.patch_size)
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        ids = self.tokenizer.convert_tokens_to_ids
        self.image_token_id = int(cfg.get("image_token_id") or ids("<|image_pad|>"))
        self.video_token_id = int(cfg.get("video_token_id") or ids("<|video_pad|>"))
        self.vision_start_token_id = int(cfg.get("vision_start_token_id") or ids("<|vision_start|>"))
        self.vision_end_token_id = int(cfg.get("vision_end_token_id") or ids("<|vision_end|>"))
        self.im_start_id = int(ids("<|im_start|>"))
        self.im_end_id = int(ids("<|im_end|>"))
        tok = self.tokenizer
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else self.im_end_id)
        self._label_ids: tuple[int, int] | None = None
        self.special_tokens = special_token_strings(self.tokenizer)
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)

    @cached_property
    def image_processor(self):
        """transformers' ``Qwen2VLImageProcessorPil`` of the directory, built on first use (pixels:
        training, ``vlmpack verify``; counting reads :attr:`image_settings`)."""
        from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil.from_pretrained(self.model_dir)

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        rule = self.image_settings
        try:
            patches = (rule.patches(height, width) if rule is not None
                       else self.image_processor.get_number_of_image_patches(height, width))
        except ValueError as e:  # smart_resize: aspect ratio > 200
            raise MediaRuleError(str(e)) from None
        return int(patches) // (self.merge_size**2)

    def image_tokens(self, width: int, height: int) -> int:
        """Number of ``<|image_pad|>`` tokens for an image of ``width`` x ``height`` pixels (as the
        processor sees it, i.e. after EXIF orientation). Raises :class:`MediaRuleError` for sizes
        ``smart_resize`` refuses (aspect ratio > 200) or non-positive sizes."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """Media tokens of one item (see :class:`MediaSize`): images by :meth:`image_tokens`,
        videos by :meth:`video_tokens` (``sample_images`` is ignored: Qwen-VL counts every image
        alike). Raises :class:`MediaRuleError` for another kind and for media the processor refuses."""
        if media.kind == "video":
            return self.video_tokens(media)
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name}")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """The size rule of ``smart_resize`` (``max(w, h) / min(w, h) <= 200``) for images, as a
        one-line reason or None; videos: None (refused at counting time)."""
        if kind != "image":
            return None
        short, long = sorted((width, height))
        if long > self.max_aspect_ratio * short:
            return f"aspect ratio {long / short:.1f} of {width}x{height} exceeds {self.max_aspect_ratio:g}"
        return None

    # ------------------------------------------------------------------ text
    @staticmethod
    def template_messages(messages: Sequence[dict]) -> list[dict]:
        """Canonical messages (see :mod:`vlmpack.records`) -> the form the chat template takes:
        ``{"type": "image"}`` / ``{"type": "video"}`` / ``{"type": "text", "text"}`` parts, and the
        turn's tool calls, reasoning and tool-call id / name (:data:`vlmpack.records.MESSAGE_EXTRAS`)
        as they are."""
        out = []
        for m in messages:
            msg = {"role": m["role"], "content": [{"type": "text", "text": p["text"]} if p["type"] == "text"
                                                  else {"type": p["type"]} for p in m["content"]]}
            if len(m) > 2:  # a turn with fields beside its role and content
                msg.update((k, m[k]) for k in MESSAGE_EXTRAS if k in m)
            out.append(msg)
        return out

    @cached_property
    def template_render(self) -> TemplateRender | None:
        """The tokenizer's chat template rendered without transformers' copies of the messages
        (:class:`~vlmpack.models.template_render.TemplateRender`), None where its check on this
        tokenizer finds a difference (then :meth:`render` calls ``apply_chat_template`` itself)."""
        return TemplateRender.for_tokenizer(self.tokenizer)

    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """The training text of one conversation: the chat template rendered with
        ``add_generation_prompt=False`` (one image-pad token per image) and ``tools`` (the tool
        schemas, None without: transformers' ``apply_chat_template(messages, tools=...)``, through
        :attr:`template_render` where its check passed)."""
        fast = self.template_render
        if fast is not None:
            return fast(self.template_messages(messages), tools)
        return apply_template(self.tokenizer, self.template_messages(messages), tools)

    def field_problem(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> tuple[str, str] | None:
        """``(reason, detail)`` when the conversation's tool use or reasoning cannot be packed exactly,
        else None (:mod:`vlmpack.models.tool_fields`): ``template_unsupported`` when the chat
        template never renders a field it uses (tools, tool calls, reasoning, tool turns), which
        would be lost; ``special_token_in_text`` when such a field holds a special token (not
        splittable, whatever ``--special-tokens`` says). A plain conversation costs one scan."""
        fields = used_fields(messages, tools)
        if not fields:
            return None
        miss = unrendered_field(self.render, fields, self.__dict__.setdefault("_field_probes", {}))
        if miss is not None:
            return "template_unsupported", (f"the sample has {miss[0]} but the chat template of {self.model_dir} "
                                            f"never renders them ({miss[1]}): packed, they would be lost")
        try:
            hit = field_special_token(messages, tools, self._special_re,
                                      lambda text: has_cut_edge(text, self._cuts()), self.render)
        except Exception:  # noqa: BLE001 - a template may raise anything; counting reports it as template_error
            return None
        if hit is not None:
            return "special_token_in_text", (f"{hit[0]} holds the special token {hit[1]!r}; the template writes it "
                                             "as it is, so it cannot be split")
        return None

    def _cuts(self):
        cuts = self.__dict__.get("_special_cuts")
        if cuts is None:
            cuts = self.__dict__["_special_cuts"] = token_cuts(self.special_tokens)
        return cuts

    #: whether a :meth:`tokenize` of a subclass's own goes through :attr:`fast_bpe` (this class's does)
    tokenize_uses_fast_bpe = False

    @cached_property
    def fast_bpe(self):
        """:class:`~vlmpack.models.tiktoken_bpe.TiktokenBPE` of the tokenizer when tiktoken gives
        its ids (recorded per directory: :func:`~vlmpack.models.tiktoken_bpe.fast_encoder`), else None
        (also for a family with a :meth:`tokenize` of its own that does not use it: one that does sets
        :attr:`tokenize_uses_fast_bpe`)."""
        if type(self).tokenize is not Qwen2VLFamily.tokenize and not self.tokenize_uses_fast_bpe:
            return None
        return fast_encoder(self.model_dir, self.tokenizer)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Batched tokenization: the ids of the tokenizer's default call (what the processor does),
        through :attr:`fast_bpe` where it gives them."""
        fast = self.fast_bpe
        return fast(texts) if fast is not None else self.tokenizer(texts)["input_ids"]

    def find_special_token(self, messages: Sequence[dict], tools: Sequence[dict] | None = None
                           ) -> tuple[int, str] | None:
        """``(turn index, token)`` of the first special token (``<|im_end|>``, ...) in the text of
        ``messages``, or None (see :mod:`vlmpack.models.special_tokens`): in one text part
        (:func:`~vlmpack.models.special_tokens.find_special_token`), else formed where the chat
        template joins a turn's parts (``"hello<|im_"`` + ``"end|>"``;
        :func:`~vlmpack.models.special_tokens.find_joined_special_token`, rendered only for a
        conversation with a part whose edge is a piece of a special token,
        :func:`~vlmpack.models.special_tokens.cut_turns`; both looked for in one pass,
        :func:`~vlmpack.models.special_tokens.scan_text_parts`; ``tools`` rendered with them). A template
        that raises finds nothing here (:meth:`token_ids` then raises the same). Tool use and
        reasoning fields: :meth:`field_problem`."""
        if self._special_re is None:
            return None
        cuts = self._cuts()
        hit, cut = scan_text_parts(messages, self._special_re, cuts)
        if hit is not None or not cut:
            return hit
        try:
            return find_joined_special_token(lambda m: self.render(m, tools), messages, self._special_re, cuts)
        except Exception:  # noqa: BLE001 - a template may raise anything; counting reports it as template_error
            return None

    def render_pieces(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[str | int]:
        """:func:`vlmpack.models.special_tokens.render_pieces` with this family's template (the
        ``--special-tokens split`` form of :meth:`render`). Raises ``TemplateSplitError``."""
        return render_pieces(lambda m: self.render(m, tools), messages, self._special_re,
                             self.tokenizer.convert_tokens_to_ids)

    def token_ids(self, messages_list: Sequence[Sequence[dict]], special_tokens: Sequence[str | None],
                  tools_list: Sequence[Sequence[dict] | None] | None = None) -> list:
        """Unexpanded token ids (one image/video pad per media item) of each conversation, batched.

        ``special_tokens[i]``: ``"split"`` tokenizes special tokens in the i-th sample's text as
        plain text (:meth:`render_pieces`); anything else is the ordinary processor path
        (:meth:`render` + :meth:`tokenize`). ``tools_list[i]``: the i-th conversation's tool
        schemas (None: none for any). Returns ``list[list[int]]``; raises what the template raises
        (and ``TemplateSplitError`` in split mode)."""
        out: list = [None] * len(messages_list)
        tools = list(tools_list) if tools_list is not None else [None] * len(messages_list)
        plain = [i for i, m in enumerate(special_tokens) if m != "split"]
        split = [i for i, m in enumerate(special_tokens) if m == "split"]
        if plain:
            for i, ids in zip(plain, self.tokenize([self.render(messages_list[i], tools[i]) for i in plain])):
                out[i] = ids
        if split:
            for i, ids in zip(split, tokenize_pieces(self.tokenizer, [self.render_pieces(messages_list[i], tools[i])
                                                                      for i in split])):
                out[i] = ids
        return out

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem when the rendered ids do not hold exactly one image pad per image,
        one video pad per video and one vision start per media item (user text that contains a
        special token such as ``<|image_pad|>``), else ``None``."""
        got_img = int(np.count_nonzero(ids == self.image_token_id))
        got_vid = int(np.count_nonzero(ids == self.video_token_id))
        got_vs = int(np.count_nonzero(ids == self.vision_start_token_id))
        if (got_img, got_vid, got_vs) != (n_images, n_videos, n_images + n_videos):
            return (f"rendered text holds {got_img} <|image_pad|>, {got_vid} <|video_pad|>, {got_vs} "
                    f"<|vision_start|> for {n_images} images and {n_videos} videos")
        return None

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """``len(ids) + sum(n_i - 1)``: the length of :meth:`expand` (each pad becomes ``n_i``)."""
        return int(len(ids) + sum(int(n) - 1 for n in media_tokens))

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """``input_ids`` with the i-th image/video pad repeated ``media_tokens[i]`` times.

        ids: int array ``[t]`` from :meth:`tokenize`; media_tokens: per media item in order of
        appearance. Returns int32 ``[t + sum(media_tokens) - len(media_tokens)]``."""
        ids = np.asarray(ids, dtype=np.int32)
        reps = np.ones(len(ids), dtype=np.int64)
        pads = np.flatnonzero((ids == self.image_token_id) | (ids == self.video_token_id))
        if len(pads) != len(media_tokens):
            raise ValueError(f"{len(pads)} media pads in the ids for {len(media_tokens)} media items")
        reps[pads] = np.asarray(media_tokens, dtype=np.int64)
        return np.repeat(ids, reps)

    def encode(self, messages: Sequence[dict], media_tokens: Sequence[int],
               special_tokens: str | None = None, tools: Sequence[dict] | None = None) -> np.ndarray:
        """Full ``input_ids`` (int32 ``[num_tokens]``) of one sample, pads expanded; equal to the
        ``input_ids`` of the transformers processor for the same conversation, tools and images
        (``special_tokens="split"``: see :meth:`token_ids`)."""
        ids = np.asarray(self.token_ids([messages], [special_tokens], [tools])[0], dtype=np.int32)
        return self.expand(ids, media_tokens)

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: assistant content + its ``<|im_end|>`` (the ChatML scan,
        :func:`vlmpack.models.chatml.assistant_label_mask`). Raises :class:`ConfigError` when
        ``"\\n"`` is not one token of the tokenizer (the scan needs it)."""
        if self._label_ids is None:
            nl = self.tokenizer.encode("\n", add_special_tokens=False)
            if len(nl) != 1:
                raise ConfigError(f"{self.model_dir}: '\\n' is not one token; the label scan needs it")
            self._label_ids = (int(self.tokenizer.convert_tokens_to_ids("assistant")), int(nl[0]))
        assistant_id, newline_id = self._label_ids
        return assistant_label_mask(ids, im_start_id=self.im_start_id, assistant_id=assistant_id,
                                    im_end_id=self.im_end_id, newline_id=newline_id)

    def rope_model_class(self) -> type:
        """transformers' ``Qwen2VLModel`` / ``Qwen2_5_VLModel`` (by ``model_type``): its
        ``get_rope_index`` defines the mRoPE positions."""
        if self.model_type == "qwen2_5_vl":
            from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
            return Qwen2_5_VLModel
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
        return Qwen2VLModel

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's own call on decoded PIL RGB images: float32 ``pixel_values``
        ``[sum(t*h*w), C*tp*p*p]``, ``image_grid_thw`` int64 ``[k, 3]``, tokens
        ``t*h*w // merge_size**2`` per image (``images_per_sample`` is ignored)."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self.image_processor(images=images, return_tensors="pt")
        grids = out["image_grid_thw"].numpy().astype(np.int64)
        return ProcessedImages(out["pixel_values"].to(torch.float32), grids,
                               grids.prod(axis=1) // self.merge_size**2,
                               {"image_grid_thw": torch.from_numpy(grids)})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum P, D]`` and ``image_grid_thw`` int64 ``[k, 3]``,
        concatenated in order (what ``Qwen2VLForConditionalGeneration.forward`` takes)."""
        import torch

        return {"pixel_values": cat_rows([p.pixel_values for p in parts]),
                "image_grid_thw": torch.from_numpy(np.concatenate([p.grids for p in parts]))}

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """The videos of one pack -> ``pixel_values_videos`` float32 ``[sum(t*h*w), C*tp*p*p]``,
        ``video_grid_thw`` int64 ``[k, 3]`` (+ ``second_per_grid_ts`` for Qwen2.5-VL):
        :func:`vlmpack.models.qwen_video.process_qwen_videos` (the video processor's sampling and
        pixel pipeline on PyAV frames)."""
        from vlmpack.models.qwen_video import process_qwen_videos

        return process_qwen_videos(self, videos)

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """:func:`vlmpack.models.qwen_video.batch_qwen_video_inputs` (what ``forward`` takes)."""
        from vlmpack.models.qwen_video import batch_qwen_video_inputs

        return batch_qwen_video_inputs(parts)

    def video_layout(self, media: MediaSize) -> None:
        """None: Qwen2-VL / Qwen2.5-VL videos need no layout beyond their token count."""
        return None

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:meth:`expand`: Qwen2-VL / Qwen2.5-VL expand a ``<|video_pad|>`` like an image pad."""
        return self.expand(ids, media_tokens)

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<|vision_start|><|image_pad|>*n<|vision_end|>`` for a black square of the smallest side
        the processor keeps (``shortest_edge`` pixels, rounded up to ``patch_size * merge_size``)."""
        import math

        from PIL import Image

        min_px = (self.image_settings.min_pixels if self.image_settings is not None
                  else int(getattr(self.image_processor.size, "shortest_edge", None) or 56 * 56))
        factor = self.patch_size * self.merge_size
        side = max(factor, math.ceil(math.sqrt(min_px) / factor) * factor)
        n = self.image_tokens(side, side)
        ids = np.array([self.vision_start_token_id] + [self.image_token_id] * n + [self.vision_end_token_id],
                       dtype=np.int64)
        return ids, [Image.new("RGB", (side, side))]

