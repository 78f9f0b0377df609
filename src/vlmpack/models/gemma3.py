"""Gemma 3 (``model_type`` ``gemma3``, transformers' ``Gemma3ForConditionalGeneration``):
:class:`Gemma3Family`, exact token counts and ``input_ids`` without decoding pixels.

The rule matched is transformers' ``Gemma3Processor`` (``processing_gemma3``) with
``Gemma3ImageProcessorPil``, called as ``apply_chat_template(..., tokenize=True)`` calls it:

- the chat template (rendered by the tokenizer; it starts with ``<bos>``) writes one
  ``<start_of_image>`` per image; the text is tokenized with ``add_special_tokens=False`` (the
  processor's ``apply_chat_template`` passes it when the text starts with the BOS token);
- every image is resized to ``size`` (896 x 896) whatever its size, and gives ``image_seq_length``
  (256) ``<image_soft_token>``, the tokens its features replace; with pan-and-scan
  (``do_pan_and_scan``) an image also gives ``crops`` more images of 256 tokens each,
  ``crops`` = :func:`~vlmpack.models.gemma3_rules.pan_and_scan_crops` of its size, so its media
  tokens are ``image_seq_length * (1 + crops)``;
- the text around the image tokens (``"\\n\\n"``, and with crops ``"Here is the original image "``
  ...) joins the text next to it: the ids are built by
  :func:`~vlmpack.models.gemma3_rules.expand_images` from the text rendered with one soft token per
  image (:meth:`Gemma3Family.render`), exact by the tokenizer's cut at added tokens (the rule and
  why in :mod:`vlmpack.models.gemma3_rules`). Its pieces come from the processor's own
  ``replace_image_token`` and ``full_image_sequence``, and :meth:`Gemma3Family.__init__` checks
  the rule against the tokenizer on the processor's own text (:class:`ConfigError` if it fails).

Pan-and-scan settings: ``Gemma3Processor`` passes its own ``images_kwargs`` (``do_pan_and_scan``
False, ``pan_and_scan_min_crop_size`` 256, ``pan_and_scan_max_num_crops`` 4,
``pan_and_scan_min_ratio_to_activate`` 1.2) at every call, over what the image processor's config
says, so only a call argument turns pan-and-scan on (``processor(..., do_pan_and_scan=True)``,
what Gemma 3's recipes pass). vlmpack reads a value saved in the image processor config
(``preprocessor_config.json``, or ``--processor-kwargs '{"do_pan_and_scan": true}'``) as that call
argument: the counts, ``input_ids`` and pixels are those of the processor *called with* these
settings, and a trainer must pass them at its call too.

Training: 1-D positions (``mrope`` False); labels: the tokens after each ``<start_of_turn>model\\n``
up to and including its ``<end_of_turn>`` (:func:`vlmpack.models.generic_rules.marker_label_mask`);
pixels from ``Gemma3ImageProcessorPil``'s own call (``pixel_values`` float32 ``[images + crops, 3,
896, 896]``, each image before its crops). ``Gemma3Model`` attends bidirectionally within each
image's (and crop's) soft tokens (``token_type_ids``): a packed row needs the masks of
:meth:`Gemma3Family.attention_masks` (a causal block mask would not train like the samples alone).

Source: transformers 5.x ``models/gemma3/processing_gemma3.py``, ``image_processing_pil_gemma3.py``,
``modeling_gemma3.py``, ``configuration_gemma3.py`` and ``processing_utils.py``
(``ProcessorMixin.apply_chat_template`` / ``_merge_kwargs``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.gemma3_rules import (
    ImageText,
    expand_images,
    newline_run,
    packed_attention_masks,
    pan_and_scan_crops,
    tail_start,
)
from vlmpack.models.generic_rules import label_markers, marker_label_mask
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["PAN_AND_SCAN_KEYS", "Gemma3Family"]

#: The pan-and-scan settings of ``Gemma3ImageProcessorPil`` (their defaults: ``Gemma3Processor.images_kwargs``).
PAN_AND_SCAN_KEYS = ("do_pan_and_scan", "pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
                     "pan_and_scan_min_ratio_to_activate")


class Gemma3Family(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one Gemma 3 model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring). Rendering, the
    special-token policy and batching are :class:`~vlmpack.models.qwen2_vl.Qwen2VLFamily`'s.

    Attributes: ``tokenizer``, ``image_processor`` (``Gemma3ImageProcessorPil``), ``images_kwargs``
    (what the processor passes to it: ``Gemma3Processor.images_kwargs`` with the directory's
    pan-and-scan settings), ``pan_and_scan`` (bool), ``image_seq_length``, ``sliding_window``
    (tokens, of the text model), ``image_token_id`` (``<image_soft_token>``), ``boi_token_id``,
    ``eoi_token_id``, ``pad_token_id``. Raises :class:`ConfigError` for a directory without a
    tokenizer, chat template or image processor config, an ``image_seq_length`` other than the
    model's ``mm_tokens_per_image``, or a tokenizer on which the image text rule does not hold.
    """

    name = "gemma3"
    counting_files = (*COUNTING_FILES, "processor_config.json")
    mrope = False
    #: no named processor options; pan-and-scan with ``--processor-kwargs '{"do_pan_and_scan": true}'``
    processor_options: dict = {}
    video_option_keys = ()
    processor_option_keys = ("image_seq_length",)

    @classmethod
    def image_processor_class(cls) -> type:
        """``Gemma3ImageProcessorPil`` (see :meth:`Qwen2VLFamily.image_processor_class`)."""
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

        return Gemma3ImageProcessorPil

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        from transformers.models.gemma3.processing_gemma3 import Gemma3Processor

        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.tokenizer = tok = load_chat_tokenizer(model_dir)
        if not (d / "preprocessor_config.json").is_file() and not (d / "processor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        self.image_processor = self.image_processor_class().from_pretrained(self.model_dir)
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        try:
            proc = json.loads((d / "processor_config.json").read_text()) if (d / "processor_config.json").is_file() \
                else {}
        except ValueError as e:
            raise ConfigError(f"{d / 'processor_config.json'}: not JSON ({e})") from None
        self.image_seq_length = int(proc.get("image_seq_length") or 256)
        per_image = int(cfg.get("mm_tokens_per_image") or self.image_seq_length)
        if per_image != self.image_seq_length:
            raise ConfigError(f"{model_dir}: processor_config.json image_seq_length {self.image_seq_length} is not "
                              f"config.json's mm_tokens_per_image {per_image}; the model would refuse the images")
        text_cfg = cfg.get("text_config") or {}
        if text_cfg.get("use_bidirectional_attention"):
            raise ConfigError(f"{model_dir}: a bidirectional Gemma 3 text model (use_bidirectional_attention) is no "
                              "causal chat model; it cannot be packed")
        self.sliding_window = int(text_cfg.get("sliding_window") or 4096)  # Gemma3TextConfig's default
        self.images_kwargs = dict(Gemma3Processor.images_kwargs)
        for key in PAN_AND_SCAN_KEYS:
            value = getattr(self.image_processor, key, None)
            if value is not None:
                self.images_kwargs[key] = value
        self.pan_and_scan = bool(self.images_kwargs["do_pan_and_scan"])
        missing = [k for k in ("boi_token", "eoi_token", "image_token") if not getattr(tok, k, None)]
        if missing:
            raise ConfigError(f"{model_dir}: the tokenizer names no {', '.join(missing)} (tokenizer_config.json's "
                              "extra_special_tokens), which Gemma3Processor reads")
        self.processor = Gemma3Processor(image_processor=self.image_processor, tokenizer=tok,
                                         image_seq_length=self.image_seq_length)
        ids = tok.convert_tokens_to_ids
        self.image_token_id = int(cfg.get("image_token_index") or ids(tok.image_token))
        self.boi_token_id, self.eoi_token_id = int(ids(tok.boi_token)), int(ids(tok.eoi_token))
        if self.image_token_id != ids(tok.image_token):
            raise ConfigError(f"{model_dir}: config.json image_token_index {self.image_token_id} is not the "
                              f"tokenizer's {tok.image_token} ({ids(tok.image_token)})")
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
        self.special_tokens = special_token_strings(tok)
        self._special_re = special_token_pattern(self.special_tokens)
        self._added = frozenset(int(k) for k in tok.added_tokens_decoder)
        self._markers = None
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        self._text = self._image_text()
        self._check_rule()

    # ------------------------------------------------------------------ the image text
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def _replacement(self, crops: int, *, one_soft: bool) -> str:
        """What ``Gemma3Processor.replace_image_token`` writes for an image with ``crops`` crops
        (``one_soft``: each block's soft tokens written once)."""
        text = self.processor.replace_image_token({"num_crops": [crops]}, 0)
        soft = self.tokenizer.image_token
        return text.replace(soft * self.image_seq_length, soft) if one_soft else text

    def _image_text(self) -> ImageText:
        """The pieces of the processor's image text (:class:`ImageText`), cut at its special tokens;
        :class:`ConfigError` when they do not have the layout :func:`expand_images` assumes."""
        tok = self.tokenizer
        block = tok.boi_token + tok.image_token + tok.eoi_token

        def pieces(crops: int) -> list[str]:
            parts = self._replacement(crops, one_soft=True).split(block)
            if len(parts) != crops + 2:
                raise ConfigError(f"{self.model_dir}: Gemma3Processor writes {len(parts) - 1} image blocks for an "
                                  f"image with {crops} crops")
            return parts

        plain, crops = pieces(0), pieces(3)
        lead, tail = plain
        if lead.strip("\n") or not crops[0].endswith(lead) or crops[-1] != tail or crops[2] != crops[3] or \
                any(c in crops[0][:-len(lead)] for c in "\n\r"):
            if self.pan_and_scan:
                raise ConfigError(f"{self.model_dir}: Gemma3Processor's pan-and-scan text {crops!r} is not laid out "
                                  "as vlmpack's rule expects (transformers changed it); pan-and-scan cannot be counted")
            crops = [lead, "", "", "", tail]  # never used: without pan-and-scan no image has crops
        newline_ids = {}
        for tid, added in tok.added_tokens_decoder.items():
            if added.content and set(added.content) == {"\n"}:
                newline_ids[int(tid)] = len(added.content)
        return ImageText(boi=self.boi_token_id, soft=self.image_token_id, eoi=self.eoi_token_id,
                         seq_len=self.image_seq_length, newline_ids=newline_ids,
                         original=tuple(self._encode(crops[0][:-len(lead)])), original_text=crops[0][:-len(lead)],
                         lead=tuple(self._encode(lead)), joins=(tuple(self._encode(crops[1])),
                                                                tuple(self._encode(crops[2]))),
                         encode=self._encode, decode=lambda ids: tok.decode(ids, clean_up_tokenization_spaces=False))

    def _check_rule(self) -> None:
        """:class:`ConfigError` unless :meth:`expand` gives the tokenizer's ids of the processor's own
        text (:meth:`_replacement`) for images after a turn start, after text on the same line, after
        a blank line and right after another image, without crops and, with pan-and-scan on, with 1
        to 3 crops (the rule of :mod:`vlmpack.models.gemma3_rules`, checked on this tokenizer)."""
        tok = self.tokenizer
        boi = tok.boi_token
        cases = [(before + boi + "Describe it.", [(0,), (1,), (3,)])
                 for before in ("<start_of_turn>user\n", "<start_of_turn>user\nLook at this:", "Two.\n\n")]
        cases += [(f"<start_of_turn>user\n{boi}{boi}Compare.", [(3, 0), (0, 2), (1, 1)]),
                  (f"<start_of_turn>user\nA:{boi}\nB:{boi}", [(2, 0), (0, 2)])]
        for text, combos in cases:
            parts = f"{tok.bos_token or ''}{text}<end_of_turn>\n".split(boi)
            base = tok("".join(p + (self._replacement(0, one_soft=True) if i < len(parts) - 1 else "")
                               for i, p in enumerate(parts)), add_special_tokens=False)["input_ids"]
            for crops in [(0,) * (len(parts) - 1), *(combos if self.pan_and_scan else ())]:
                full = "".join(p + (self._replacement(c, one_soft=False) if i < len(crops) else "")
                               for i, (p, c) in enumerate(zip(parts, [*crops, 0])))
                try:
                    got = self.expand(np.asarray(base), [self.image_seq_length * (1 + c) for c in crops]).tolist()
                except ValueError:
                    got = None
                if got != list(tok(full, add_special_tokens=False)["input_ids"]):
                    raise ConfigError(f"{self.model_dir}: the Gemma 3 image text rule does not hold for this tokenizer "
                                      f"({list(crops)} crops in {text!r}); vlmpack cannot count it exactly")

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        return self.image_seq_length * (1 + self.crops(width, height))

    def crops(self, width: int, height: int) -> int:
        """Pan-and-scan crops of a ``width`` x ``height`` image (0 with pan-and-scan off):
        :func:`~vlmpack.models.gemma3_rules.pan_and_scan_crops` with the directory's settings."""
        if not self.pan_and_scan:
            return 0
        kw = self.images_kwargs
        return pan_and_scan_crops(width, height, min_crop_size=int(kw["pan_and_scan_min_crop_size"]),
                                  max_num_crops=int(kw["pan_and_scan_max_num_crops"]),
                                  min_ratio_to_activate=float(kw["pan_and_scan_min_ratio_to_activate"]))

    def image_tokens(self, width: int, height: int) -> int:
        """``<image_soft_token>`` tokens of an image of ``width`` x ``height`` pixels (after EXIF
        orientation): ``image_seq_length * (1 + crops)``. :class:`MediaRuleError` for sizes <= 0."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """:meth:`image_tokens` of an image (``sample_images`` is ignored: every image alike);
        :class:`MediaRuleError` for a video or another kind (Gemma 3 takes images only)."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (images only)")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """None: every image is resized to ``size`` whatever its size (pan-and-scan skips crops it
        cannot make); videos are refused when counted (:meth:`media_tokens`)."""
        return None

    # ------------------------------------------------------------------ text
    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """The chat template rendered (:meth:`Qwen2VLFamily.render`) with each ``<start_of_image>``
        replaced by the processor's image text for an image without crops, one soft token in it
        (``"\\n\\n<start_of_image><image_soft_token><end_of_image>\\n\\n"``): the text whose ids
        :meth:`expand` turns into the processor's."""
        text = super().render(messages, tools)
        return text.replace(self.tokenizer.boi_token, self._replacement(0, one_soft=True))

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids as ``Gemma3Processor.apply_chat_template(tokenize=True)`` gets them: without the
        tokenizer's BOS when the text starts with it (the template writes it), else with."""
        bos = self.tokenizer.bos_token
        out: list = [None] * len(texts)
        for skip in (True, False):
            idx = [i for i, t in enumerate(texts) if bool(bos and t.startswith(bos)) == skip]
            if idx:
                kw = {"add_special_tokens": False} if skip else {}
                for i, ids in zip(idx, self.tokenizer([texts[i] for i in idx], **kw)["input_ids"]):
                    out[i] = ids
        return out

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold one ``<start_of_image><image_soft_token>
        <end_of_image>`` per image and no video; with pan-and-scan, also when the text piece right
        before an image does not encode back to itself (:func:`expand_images` re-encodes it with the
        pan-and-scan text), else None."""
        ids = np.asarray(ids)
        counts = [int(np.count_nonzero(ids == t)) for t in (self.boi_token_id, self.image_token_id, self.eoi_token_id)]
        if counts != [n_images] * 3 or n_videos:
            return (f"rendered text holds {counts[0]} <start_of_image>, {counts[1]} <image_soft_token>, {counts[2]} "
                    f"<end_of_image> for {n_images} images and {n_videos} videos (Gemma 3 takes images only)")
        starts = np.flatnonzero(ids == self.boi_token_id)
        if n_images and (starts[-1] + 2 >= len(ids) or np.any(ids[starts + 1] != self.image_token_id)
                         or np.any(ids[starts + 2] != self.eoi_token_id)):
            return "rendered text holds an image block that is not <start_of_image><image_soft_token><end_of_image>"
        if self.pan_and_scan:
            prev = 0
            for b in starts.tolist():
                q, newlines = newline_run(ids, b, prev, self._text.newline_ids)
                seg = tail_start(ids, q, prev, self._is_added)
                if newlines == 2 and seg < q:
                    piece = ids[seg:q].tolist()
                    if self._encode(self._text.decode(piece)) != piece:
                        return f"the text before image at token {b} does not encode back to its own ids"
                prev = b + 3
        return None

    def _is_added(self, token_id: int) -> bool:
        return token_id in self._added

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """The length of :meth:`expand`: ``len(ids) + sum(n_i - 1)`` when no image has crops, else
        the length of the expansion itself."""
        if all(int(n) == self.image_seq_length for n in media_tokens):
            return int(len(ids) + sum(int(n) - 1 for n in media_tokens))
        return int(len(self.expand(ids, media_tokens)))

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """int32 ``input_ids`` of ``Gemma3Processor`` from :meth:`token_ids`' ids and each image's
        media tokens (``image_seq_length * (1 + crops)``, in order):
        :func:`~vlmpack.models.gemma3_rules.expand_images`. ``ValueError`` when the ids and the
        media disagree."""
        crops = []
        for n in media_tokens:
            c, r = divmod(int(n), self.image_seq_length)
            if r or c < 1:
                raise ValueError(f"{n} media tokens is no multiple of image_seq_length {self.image_seq_length}")
            crops.append(c - 1)
        return expand_images(np.asarray(ids), crops, self._text, self._is_added).astype(np.int32)

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: the tokens after each ``<start_of_turn>model`` (and its ``"\\n"``) up to and
        including the next ``<end_of_turn>``; markers found on the template
        (:func:`vlmpack.models.generic_rules.label_markers`)."""
        if self._markers is None:
            def render(messages, *, add_generation_prompt=False):
                return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                          add_generation_prompt=add_generation_prompt)

            self._markers = label_markers(render, self.tokenizer, self.model_dir)
        return marker_label_mask(np.asarray(ids), self._markers)

    def rope_model_class(self) -> type:
        """Gemma 3 has 1-D positions (``mrope`` False): :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} uses 1-D positions; there is no mRoPE model class")

    def attention_masks(self, batch: dict, attn_implementation: str = "sdpa", *, dtype=None) -> dict:
        """The ``attention_mask`` mapping to pass to ``Gemma3ForConditionalGeneration.forward`` for a
        collated batch (``batch["input_ids"]``, ``batch["seq_idx"]``, ``[1, T]``): per sample what
        ``Gemma3Model`` builds from that sample's ``token_type_ids`` alone (causal, bidirectional
        within each image's soft tokens, the sliding window on its sliding layers):
        :func:`~vlmpack.models.gemma3_rules.packed_attention_masks`. ``{"full_attention",
        "sliding_attention"}`` of ``[1, 1, T, T]``: bool for ``sdpa``, additive ``dtype`` (default
        float32) for ``eager``. The collator's block-causal ``attention_mask`` lacks the image
        blocks; the model takes a dict as it is (``Gemma3Model.forward``)."""
        import torch

        additive = (dtype or torch.float32) if attn_implementation == "eager" else None
        return packed_attention_masks(batch["input_ids"], batch["seq_idx"], self.image_token_id, self.sliding_window,
                                      additive_dtype=additive)

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's own call with the processor's ``images_kwargs`` on decoded PIL RGB
        images: float32 ``pixel_values`` ``[sum(1 + crops_i), 3, H, W]`` (each image, then its
        crops), grids int64 ``(1 + crops_i, 1, 1)``, tokens ``image_seq_length * (1 + crops_i)``;
        no other model kwargs (``images_per_sample`` is ignored)."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self.image_processor(images=list(images), return_tensors="pt", **self.images_kwargs)
        views = 1 + np.asarray(out["num_crops"], dtype=np.int64).reshape(-1)
        grids = np.stack([views, np.ones_like(views), np.ones_like(views)], axis=1)
        return ProcessedImages(out["pixel_values"].to(torch.float32), grids, views * self.image_seq_length, {})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum views, 3, H, W]``, the packs' in order (all
        ``Gemma3ForConditionalGeneration.forward`` takes for images)."""
        return {"pixel_values": cat_rows([p.pixel_values for p in parts])}

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """Gemma 3 takes no videos: :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} takes images only, no videos")

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """Gemma 3 takes no videos: :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} takes images only, no videos")

    def video_layout(self, media: MediaSize) -> None:
        """Gemma 3 takes no videos: :class:`MediaRuleError`."""
        raise MediaRuleError(f"{self.name} takes images only, no videos")

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:meth:`expand` (ids of a Gemma 3 sample hold images only)."""
        return self.expand(ids, media_tokens)

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<start_of_image><image_soft_token>*image_seq_length<end_of_image>`` for a black image of
        ``size`` (square: no pan-and-scan crops)."""
        from PIL import Image

        size = self.image_processor.size
        h, w = int(size.height), int(size.width)
        ids = np.array([self.boi_token_id] + [self.image_token_id] * self.image_tokens(w, h) + [self.eoi_token_id],
                       dtype=np.int64)
        return ids, [Image.new("RGB", (w, h))]
