"""LLaVA-OneVision (``model_type`` ``llava_onevision``): :class:`LlavaOnevisionFamily`.

The rules of transformers' ``LlavaOnevisionProcessor`` (``processing_llava_onevision``) and
``LlavaOnevisionImageProcessor`` / ``LlavaOnevisionForConditionalGeneration``, counted from the
image *header* (width, height after EXIF orientation), without pixels:

- chat template: rendered by the tokenizer (one ``<image>`` per image, all images of a turn first,
  ``<|im_start|>role\\n ... <|im_end|>\\n`` turns); the processor expands each ``<image>`` to
  ``n_i`` copies and tokenizes with the tokenizer's default call. ``<image>`` is a special added
  token, so ``len(input_ids) = len(tokenizer(rendered)) + sum(n_i - 1)`` (as for Qwen-VL);
- ``n_i`` = ``LlavaOnevisionProcessor._get_number_of_features(h, w, 384, 384)`` (anyres): the best
  of ``image_grid_pinpoints`` for (h, w) (``select_best_resolution``) gives a grid of
  ``scale_h x scale_w`` crops of ``size`` px; their ``side x side`` feature map
  (``side = sqrt(num_image_tokens)``, 27 for SigLIP 384/14) is unpadded to the image's aspect ratio
  (``_get_unpadded_features``), downsampled by ``ratio = sqrt(H*W / (max_num_patches * side**2))``
  when ``ratio > 1.1`` (``vision_aspect_ratio`` ``anyres_max_<max_num_patches>``), plus one
  newline token per row, plus ``num_image_tokens`` base features; minus 1 when
  ``vision_feature_select_strategy`` is ``"default"`` (a CLS feature dropped). The model packs its
  features with the same arithmetic (``LlavaOnevisionModel.pack_image_features``);
- that anyres path is taken by the image of a single-image sample; every image of a sample with
  several images takes transformers' multi-image path instead (``batch_num_images[i] > 1``, what
  ``apply_chat_template`` and the processor give a conversation whose images are one nested list,
  and what the checkpoints were trained with): the base crop alone, ``num_image_tokens + 1``
  tokens (features + one newline; minus 1 for ``"default"``) —
  ``LlavaOnevisionProcessor.replace_image_token`` (``is_multi_image``),
  ``LlavaOnevisionImageProcessor`` (``need_patching``) and
  ``LlavaOnevisionModel.get_image_features`` / ``pack_image_features`` (one patch: base + newline).
  The rule needs the sample's image count (``media_tokens(sample_images=)``,
  ``process_images(images_per_sample=)``); a pack's collator passes ``batch_num_images`` per
  *sample*, so a packed row of several samples is processed as each sample alone;
- videos: the chat template writes one ``<video>`` per video (after the turn's images); the video
  processor (``LlavaOnevisionVideoProcessor``) keeps ``F`` frames (every frame by default,
  ``do_sample_frames`` False; else ``BaseVideoProcessor.sample_frames``:
  :func:`vlmpack.models.frames_rule.default_frame_indices`, from the header's frame count and
  average fps), each resized to ``size`` (384 x 384) whatever its size, and
  ``LlavaOnevisionProcessor.replace_video_token`` expands ``<video>`` to ``F * ceil(side / 2)**2 +
  1`` copies (features 2x2-pooled per frame, one newline; no -1 for the ``"default"`` strategy
  there), so ``len(input_ids) = len(tokenizer(rendered)) + sum(n_i - 1)`` over images and videos
  alike. Training: ``pixel_values_videos`` ``[videos, F, 3, 384, 384]`` (the counted frames, resized
  and normalized as ``LlavaOnevisionVideoProcessor``: :mod:`vlmpack.models.frames_pixels`), whose
  features ``get_video_features`` pools per frame and ends with one newline per video; one tensor,
  so a batch's videos must keep the same ``F`` (:class:`ConfigError` otherwise);
- positions are 1-D (``mrope`` False); labels by the ChatML scan of
  :func:`vlmpack.models.chatml.assistant_label_mask`; pixels from ``LlavaOnevisionImageProcessorPil``.

Values read from the model directory: ``preprocessor_config.json`` (``size``,
``image_grid_pinpoints``), ``processor_config.json`` (``num_image_tokens``,
``vision_feature_select_strategy``, ``vision_aspect_ratio``; missing values: the processor's
defaults, ``num_image_tokens`` from ``config.json``'s ``vision_config`` ``(image_size //
patch_size)**2``), ``config.json`` (``image_token_index``, ``video_token_index``), the video processor
settings (``do_sample_frames``, ``num_frames``, ``fps``) in transformers' order
(:func:`vlmpack.models.frames_rule.frame_settings`).
Source: transformers 5.x ``models/llava_onevision/processing_llava_onevision.py``,
``image_processing_pil_llava_onevision.py``, ``video_processing_llava_onevision.py``,
``video_processing_utils.py`` / ``video_utils.py`` and ``modeling_llava_onevision.py``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.frames_rule import PIXEL_DEFAULTS, SAMPLING_DEFAULTS, default_frame_indices, frame_settings
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["LlavaOnevisionFamily", "anyres_image_tokens"]


def anyres_image_tokens(height: int, width: int, *, pinpoints: Sequence[Sequence[int]], crop: int,
                        side: int, max_num_patches: int) -> int:
    """Feature tokens of one anyres image of ``height`` x ``width`` pixels (base crop included,
    without the ``"default"`` strategy's -1): transformers'
    ``LlavaOnevisionProcessor._get_number_of_features(height, width, crop, crop)`` with
    ``image_grid_pinpoints`` = ``pinpoints`` ([h, w] pairs), ``num_image_tokens`` = ``side**2`` and
    ``vision_aspect_ratio`` = ``f"anyres_max_{max_num_patches}"``, step for step (same integer and
    float operations, so the same results)."""
    from transformers.image_processing_utils import select_best_resolution

    best_h, best_w = select_best_resolution([height, width], [list(p) for p in pinpoints])
    cur_h, cur_w = side * (best_h // crop), side * (best_w // crop)
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    unpadded, newlines = cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (max_num_patches * side**2))
    if ratio > 1.1:
        unpadded = int(cur_h // ratio) * int(cur_w // ratio)
        newlines = int(cur_h // ratio)
    return unpadded + newlines + side * side


class LlavaOnevisionFamily(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one LLaVA-OneVision model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring). Rendering, tokenizing,
    special-token policy, pad expansion and the ChatML label scan are those of
    :class:`~vlmpack.models.qwen2_vl.Qwen2VLFamily` (same tokenizer calls, ``<image>`` as the pad).

    Attributes: ``tokenizer``, ``image_processor`` (``LlavaOnevisionImageProcessorPil``), ``crop``
    (crop side in px), ``side`` (features per crop side), ``max_num_patches``, ``select_strategy``,
    ``image_token_id``, ``video_token_id``, ``im_start_id``, ``im_end_id``, ``pad_token_id``.
    Raises :class:`ConfigError` when the directory lacks a tokenizer, a chat template, a
    preprocessor config or has an unreadable processor config.
    """

    name = "llava_onevision"
    counting_files = (*COUNTING_FILES, "processor_config.json")
    mrope = False
    #: named processor options (:mod:`vlmpack.models.options`); crops with ``--processor-kwargs``
    #: (``image_grid_pinpoints``, ``vision_aspect_ratio``, ...)
    processor_options = {"fps": (("video", "fps"), ("video", "do_sample_frames", True), ("video", "num_frames", None))}
    video_option_keys = (*SAMPLING_DEFAULTS, *PIXEL_DEFAULTS)
    processor_option_keys = ("num_image_tokens", "vision_feature_select_strategy", "vision_aspect_ratio")

    @classmethod
    def image_processor_class(cls) -> type:
        """``LlavaOnevisionImageProcessorPil`` (see :meth:`Qwen2VLFamily.image_processor_class`)."""
        from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
            LlavaOnevisionImageProcessorPil,
        )

        return LlavaOnevisionImageProcessorPil

    def __init__(self, model_dir: str | Path):
        from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
            LlavaOnevisionImageProcessorPil,
        )

        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.tokenizer = load_chat_tokenizer(model_dir)
        if not (d / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        self.image_processor = LlavaOnevisionImageProcessorPil.from_pretrained(self.model_dir)
        cfg = json.loads((d / "config.json").read_text())
        try:
            proc = json.loads((d / "processor_config.json").read_text()) if (d / "processor_config.json").is_file() \
                else {}
        except ValueError as e:
            raise ConfigError(f"{d / 'processor_config.json'}: not JSON ({e})") from None
        self.model_type = str(cfg.get("model_type"))
        size = self.image_processor.size
        self.crop = int(size.height or size.shortest_edge)
        vis = cfg.get("vision_config") or {}
        n_feat = proc.get("num_image_tokens") or (int(vis.get("image_size", 384)) // int(vis.get("patch_size", 14)))**2
        self.side = math.isqrt(int(n_feat))
        self.select_strategy = str(proc.get("vision_feature_select_strategy")
                                   or cfg.get("vision_feature_select_strategy") or "full")
        aspect = str(proc.get("vision_aspect_ratio") or "anyres_max_9")
        self.max_num_patches = int(aspect.strip("anyres_max_"))  # noqa: B005 - the processor's own parsing
        self.pinpoints = [list(map(int, p)) for p in self.image_processor.image_grid_pinpoints]
        ids = self.tokenizer.convert_tokens_to_ids
        self.image_token_id = int(cfg.get("image_token_index") or ids(proc.get("image_token", "<image>")))
        self.video_token_id = int(cfg.get("video_token_index") or ids(proc.get("video_token", "<video>")))
        self.im_start_id = int(ids("<|im_start|>"))
        self.im_end_id = int(ids("<|im_end|>"))
        tok = self.tokenizer
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else self.im_end_id)
        self._label_ids = None
        self.special_tokens = special_token_strings(self.tokenizer)
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        n = anyres_image_tokens(height, width, pinpoints=self.pinpoints, crop=self.crop, side=self.side,
                                max_num_patches=self.max_num_patches)
        return n - 1 if self.select_strategy == "default" else n

    def image_tokens(self, width: int, height: int) -> int:
        """Number of ``<image>`` tokens for an image of ``width`` x ``height`` pixels (after EXIF
        orientation) on the single-image (anyres) path. Raises :class:`MediaRuleError` for
        non-positive sizes."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """None: the LLaVA-OneVision image processor takes every image size (anyres picks a grid
        for any aspect ratio; checked on 1x1, 20000x1 and 1x20000); videos: every frame is resized
        to ``size``."""
        return None

    def multi_image_tokens(self) -> int:
        """``<image>`` tokens of any image of a sample with several images (the multi-image path):
        ``num_image_tokens + 1`` (base features + one newline), minus 1 for the ``"default"``
        strategy, as ``LlavaOnevisionProcessor.replace_image_token``; independent of the size."""
        n = self.side * self.side + 1
        return n - 1 if self.select_strategy == "default" else n

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """Media tokens of one image: :meth:`image_tokens` (anyres) when its sample holds one image,
        :meth:`multi_image_tokens` when it holds ``sample_images`` > 1 (see the module docstring);
        of a video: :meth:`video_tokens` (``sample_images`` is ignored: ``batch_num_images`` counts
        images only). :class:`MediaRuleError` for another kind, non-positive sizes and videos the
        processor cannot sample."""
        if media.kind == "video":
            return self.video_tokens(media)
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name}")
        n = self.image_tokens(media.width, media.height)  # validates the size on both paths
        return self.multi_image_tokens() if sample_images > 1 else n

    # ------------------------------------------------------------------ video rule
    @property
    def video_config(self) -> dict:
        """``do_sample_frames``, ``num_frames``, ``fps`` of the model directory's video processor
        (:func:`vlmpack.models.frames_rule.frame_settings` over ``LlavaOnevisionVideoProcessor``'s
        defaults: no sampling)."""
        cfg = self.__dict__.get("_video_config")
        if cfg is None:
            cfg = self.__dict__["_video_config"] = frame_settings(self.model_dir, SAMPLING_DEFAULTS)
        return cfg

    def video_frames(self, frames: int, fps: float | None) -> int:
        """Frames ``LlavaOnevisionVideoProcessor`` keeps of a ``frames``-frame video at average
        ``fps`` (:func:`vlmpack.models.frames_rule.default_frame_indices`). Raises
        :class:`MediaRuleError`."""
        return len(default_frame_indices(int(frames or 0), fps, self.video_config))

    def video_tokens(self, media: MediaSize) -> int:
        """``<video>`` tokens of a video: ``F * ceil(side / 2)**2 + 1`` (``F`` =
        :meth:`video_frames`, ``side = int(sqrt(num_image_tokens))``), as
        ``LlavaOnevisionProcessor.replace_video_token`` (and ``_get_num_multimodal_tokens(
        video_sizes=...)``); independent of the frame size (every frame is resized to ``size``).
        Raises :class:`MediaRuleError` for a size of 0 or a sampling the processor refuses."""
        if media.width <= 0 or media.height <= 0:
            raise MediaRuleError(f"invalid video size {media.width}x{media.height}")
        pooled = math.ceil(self.side / 2)
        return self.video_frames(int(media.frames or 0), media.fps) * pooled * pooled + 1

    def video_layout(self, media: MediaSize) -> None:
        """None: a ``<video>`` expands to its token count alone."""
        return None

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:meth:`expand` with the media in the order the template renders them: a turn's images
        come before its videos (``chat_template.json``), so the i-th ``<image>`` of the ids takes the
        i-th image of ``media_tokens`` and the j-th ``<video>`` the j-th video, ``kinds`` telling
        which is which (content order; None: ``media_tokens`` already in ids order). Raises
        ``ValueError`` when placeholders and media disagree."""
        ids = np.asarray(ids)
        if kinds is None:
            return self.expand(ids, media_tokens)
        if len(kinds) != len(media_tokens):
            raise ValueError(f"{len(kinds)} media kinds for {len(media_tokens)} media items")
        queues = {k: iter([n for n, kk in zip(media_tokens, kinds) if kk == k]) for k in ("image", "video")}
        pads = ids[(ids == self.image_token_id) | (ids == self.video_token_id)]
        try:
            ordered = [next(queues["image" if p == self.image_token_id else "video"]) for p in pads.tolist()]
        except StopIteration:
            raise ValueError(f"the ids hold more placeholders of a kind than {dict(Counter(kinds))}") from None
        if len(ordered) != len(media_tokens):
            raise ValueError(f"{len(ordered)} media placeholders in the ids for {len(media_tokens)} media items")
        return self.expand(ids, ordered)

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """A pack's frames as ``LlavaOnevisionVideoProcessor`` gives them (the counter's indices,
        :func:`~vlmpack.models.frames_rule.default_frame_indices`; each frame resized to the
        ``crop`` x ``crop`` the tower takes): float32 ``[sum F, 3, crop, crop]``, grids ``(F, 1,
        1)``, features = tokens = :meth:`video_tokens` (``<video>`` copies):
        :func:`vlmpack.models.frames_pixels.process_frame_videos`."""
        from vlmpack.models.frames_pixels import process_frame_videos

        pooled = math.ceil(self.side / 2)
        return process_frame_videos(self, videos, lambda n, fps: default_frame_indices(n, fps, self.video_config),
                                    (self.crop, self.crop), lambda f: f * pooled * pooled + 1)

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """``pixel_values_videos`` float32 ``[videos, F, 3, crop, crop]``, one row per video in order
        (what ``LlavaOnevisionForConditionalGeneration.forward`` takes); :class:`ConfigError` when the
        batch's videos keep different frame counts
        (:func:`vlmpack.models.frames_pixels.stack_frame_videos`)."""
        from vlmpack.models.frames_pixels import stack_frame_videos

        return stack_frame_videos(parts, self.model_dir)

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem when the rendered ids do not hold exactly one ``<image>`` per image and
        one ``<video>`` per video, else ``None``."""
        got_img = int(np.count_nonzero(ids == self.image_token_id))
        got_vid = int(np.count_nonzero(ids == self.video_token_id))
        if (got_img, got_vid) != (n_images, n_videos):
            return (f"rendered text holds {got_img} <image>, {got_vid} <video> for {n_images} images and "
                    f"{n_videos} videos")
        return None

    # ------------------------------------------------------------------ training
    def rope_model_class(self) -> type:
        """LLaVA-OneVision has 1-D positions (``mrope`` False): :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} uses 1-D positions; there is no mRoPE model class")

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's own call on decoded PIL RGB images, grouped per sample as the
        processor groups a batch (``images_per_sample``; None: one image per sample): an image of a
        single-image sample on the anyres path, every image of a multi-image sample on the base-crop
        path (``need_patching``). ``pixel_values`` float32 ``[sum P_i, 3, crop, crop]`` (image i's
        ``P_i`` crops, base crop first; ``P_i`` = 1 on the multi-image path; the processor's zero
        padding across images removed: the 4-D layout ``LlavaOnevisionModel.get_image_features``
        takes), grids int64 ``[k, 3]`` = (``P_i``, grid rows, grid columns of crops; (1, 0, 0) for
        a base crop alone), tokens per image, ``model_kwargs`` ``{"image_sizes": int64 [k, 2]
        (h, w), "batch_num_images": int64 [samples with images]}``. Raises ``ValueError`` when
        ``images_per_sample`` does not sum to ``len(images)``."""
        import torch
        from transformers.image_processing_utils import select_best_resolution

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        counts = [1] * len(images) if images_per_sample is None else [int(n) for n in images_per_sample if n]
        if sum(counts) != len(images):
            raise ValueError(f"images_per_sample sums to {sum(counts)} for {len(images)} images")
        bounds = np.cumsum([0, *counts]).tolist()
        nested = [list(images[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        # return_tensors=None: the processor's per-image arrays (each zero-padded to the batch's most
        # crops), so the padding is cut before the one copy into the batch tensor instead of after
        # BatchFeature has stacked the padded batch (LLaVA-OneVision's every-image sweep: 47 of its
        # 138 s were that stack and a torch.cat of the slices)
        out = self.image_processor(images=nested, return_tensors=None)
        sizes = torch.tensor([[int(h), int(w)] for h, w in out["image_sizes"]], dtype=torch.int64).reshape(-1, 2)
        multi = [n > 1 for n in counts for _ in range(n)]
        grids, parts, tokens = [], [], []
        for pv, (h, w), is_multi in zip(out["pixel_values"], sizes.tolist(), multi):
            if is_multi:
                grids.append((1, 0, 0))
                tokens.append(self.multi_image_tokens())
            else:
                bh, bw = select_best_resolution([h, w], self.pinpoints)
                gh, gw = bh // self.crop, bw // self.crop
                grids.append((1 + gh * gw, gh, gw))
                tokens.append(self.image_tokens(w, h))
            parts.append(pv[:grids[-1][0]])
        pixels = torch.from_numpy(np.concatenate(parts).astype(np.float32, copy=False))
        return ProcessedImages(pixels, np.asarray(grids, dtype=np.int64),
                               np.asarray(tokens, dtype=np.int64),
                               {"image_sizes": sizes, "batch_num_images": torch.tensor(counts, dtype=torch.int64)})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum P, 3, crop, crop]``, ``image_sizes`` int64 ``[k, 2]`` and
        ``batch_num_images`` int64 (images per *sample*, the samples of every pack in order),
        concatenated in order: what ``LlavaOnevisionForConditionalGeneration.forward`` takes
        (``get_image_features`` uses ``batch_num_images`` only to pick each image's path, so
        per-sample counts make a packed row behave as its samples alone)."""
        import torch

        return {"pixel_values": cat_rows([p.pixel_values for p in parts]),
                "image_sizes": torch.cat([p.model_kwargs["image_sizes"] for p in parts]),
                "batch_num_images": torch.cat([p.model_kwargs["batch_num_images"] for p in parts])}

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<image>*n`` for a black ``crop`` x 14 px strip (one grid crop, a one-row unpadded map:
        ``num_image_tokens + side + 1`` tokens, the fewest anyres gives)."""
        from PIL import Image

        w, h = self.crop, 14
        ids = np.full(self.image_tokens(w, h), self.image_token_id, dtype=np.int64)
        return ids, [Image.new("RGB", (w, h))]
