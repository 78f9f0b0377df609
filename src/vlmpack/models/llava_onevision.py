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
- every image takes this single-image (anyres) path: the processor's and the model's rule for
  images given as one flat list (``batch_num_images`` all 1). transformers' multi-image branch
  (a conversation whose images are passed as one nested list, as ``apply_chat_template`` does:
  ``num_image_tokens + 1`` tokens per image of a square-padded base crop) needs the number of
  images of the *sample* in the media rule and is not implemented;
- positions are 1-D (``mrope`` False); labels by the ChatML scan of
  :func:`vlmpack.models.chatml.assistant_label_mask`; pixels from ``LlavaOnevisionImageProcessorPil``.

Values read from the model directory: ``preprocessor_config.json`` (``size``,
``image_grid_pinpoints``), ``processor_config.json`` (``num_image_tokens``,
``vision_feature_select_strategy``, ``vision_aspect_ratio``; missing values: the processor's
defaults, ``num_image_tokens`` from ``config.json``'s ``vision_config`` ``(image_size //
patch_size)**2``), ``config.json`` (``image_token_index``, ``video_token_index``).
Source: transformers 5.x ``models/llava_onevision/processing_llava_onevision.py``,
``image_processing_pil_llava_onevision.py`` and ``modeling_llava_onevision.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError
from vlmpack.models.base import COUNTING_FILES, MediaRuleError, MediaSize, ProcessedImages
from vlmpack.models.qwen2_vl import Qwen2VLFamily, load_chat_tokenizer
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
        for any aspect ratio; checked on 1x1, 20000x1 and 1x20000); videos are refused at counting
        time."""
        return None

    def media_tokens(self, media: MediaSize) -> int:
        """Media tokens of one image by :meth:`image_tokens`; :class:`MediaRuleError` for videos
        (not counted yet)."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} yet")
        return self.image_tokens(media.width, media.height)

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

    def process_images(self, images: list) -> ProcessedImages:
        """The image processor's own call on decoded PIL RGB images, each on the single-image path:
        ``pixel_values`` float32 ``[sum P_i, 3, crop, crop]`` (image i's ``P_i`` crops, base crop
        first, the processor's zero padding across images removed: the 4-D layout
        ``LlavaOnevisionModel.get_image_features`` takes), grids int64 ``[k, 3]`` =
        (``P_i``, grid rows, grid columns of crops), tokens per image, ``model_kwargs``
        ``{"image_sizes": int64 [k, 2] (h, w)}``."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self.image_processor(images=list(images), return_tensors="pt")
        sizes = out["image_sizes"].to(torch.int64)
        grids, parts = [], []
        from transformers.image_processing_utils import select_best_resolution

        for pv, (h, w) in zip(out["pixel_values"], sizes.tolist()):
            bh, bw = select_best_resolution([h, w], self.pinpoints)
            gh, gw = bh // self.crop, bw // self.crop
            grids.append((1 + gh * gw, gh, gw))
            parts.append(pv[:1 + gh * gw])
        tokens = np.array([self.image_tokens(w, h) for h, w in sizes.tolist()], dtype=np.int64)
        return ProcessedImages(torch.cat(parts).to(torch.float32), np.asarray(grids, dtype=np.int64), tokens,
                               {"image_sizes": sizes})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum P, 3, crop, crop]`` and ``image_sizes`` int64 ``[k, 2]``,
        concatenated in order, and ``batch_num_images`` int64 ``[k]`` of ones (every image on the
        single-image path, as counted): what ``LlavaOnevisionForConditionalGeneration.forward``
        takes."""
        import torch

        sizes = torch.cat([p.model_kwargs["image_sizes"] for p in parts])
        return {"pixel_values": torch.cat([p.pixel_values for p in parts], dim=0), "image_sizes": sizes,
                "batch_num_images": torch.ones(len(sizes), dtype=torch.int64)}

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<image>*n`` for a black ``crop`` x 14 px strip (one grid crop, a one-row unpadded map:
        ``num_image_tokens + side + 1`` tokens, the fewest anyres gives)."""
        from PIL import Image

        w, h = self.crop, 14
        ids = np.full(self.image_tokens(w, h), self.image_token_id, dtype=np.int64)
        return ids, [Image.new("RGB", (w, h))]
