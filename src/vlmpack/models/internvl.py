"""InternVL3 / InternVL3.5 in HF format (``model_type`` ``internvl``, transformers'
``InternVLForConditionalGeneration``): :class:`InternVLFamily`, exact token counts and ``input_ids``
without decoding pixels.

The rule matched is transformers' ``InternVLProcessor.__call__`` (``processing_internvl``):

- the chat template (rendered by the tokenizer) writes one ``<IMG_CONTEXT>`` (the tokenizer's
  ``context_image_token``, id ``image_token_id``) per image;
- the image processor is ``GotOcr2ImageProcessor`` with the processor's own default
  ``crop_to_patches=True`` (``InternVLProcessor.images_kwargs``; it wins over the
  ``crop_to_patches: false`` of ``preprocessor_config.json``): an image of ``w`` x ``h`` becomes
  ``cols x rows`` tiles of ``size`` (448 x 448), the grid of ``min_patches <= cols*rows <=
  max_patches`` whose aspect ratio is nearest to ``w / h`` (``get_optimal_tiled_canvas``), plus
  one thumbnail tile when ``cols*rows > 1``; the number comes from the header through
  ``GotOcr2ImageProcessorPil.get_number_of_image_patches(h, w, images_kwargs)``, the processor's
  own rule (what vLLM uses);
- each ``<IMG_CONTEXT>`` is replaced by ``<img>`` + ``<IMG_CONTEXT>`` * (tiles x
  ``image_seq_length``) + ``</img>`` (``replace_image_token``), ``image_seq_length`` from
  ``processor_config.json`` (256 = (448 / 14)**2 * 0.5**2: patch 14, pixel shuffle 0.5), and the
  text is tokenized with the tokenizer's default call. ``<img>``/``</img>``/``<IMG_CONTEXT>`` are
  special added tokens, so the tokenizer splits the text at them and::

      len(input_ids) = len(tokenizer(rendered)["input_ids"]) + sum(n_i + 1 for each image i)

  with ``n_i`` = tiles x ``image_seq_length`` the media tokens of image i (the ``<IMG_CONTEXT>``
  copies the image features replace).

Videos (``<video>`` replaced by per-frame ``Frame{i}: <img>...</img>`` text, frames as tiles):
:mod:`vlmpack.models.internvl_video` (:class:`~vlmpack.models.internvl_video.InternVLVideos`, a
mixin of :class:`InternVLFamily`).

Training rules: labels by the ChatML scan (the template is ChatML with no default system turn),
1-D positions (no mRoPE: the language model is a plain Qwen2/Qwen3 decoder), pixels from
``GotOcr2ImageProcessorPil``'s own call (float32 ``[sum tiles, 3, 448, 448]``; the model takes only
``pixel_values``, the tiles of all images concatenated in order).

Proven on an InternVL3-1B-hf directory (``tests/test_models_internvl.py``); InternVL3.5 ``-HF``
directories with the GOT-OCR2 processor run the same code but are not tested here, and a
directory with another image processor is refused (:class:`ConfigError`).

Source: transformers 5.x ``models/internvl/processing_internvl.py``, ``video_processing_internvl.py``,
``modeling_internvl.py`` and ``models/got_ocr2/image_processing_pil_got_ocr2.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.frames_rule import PIXEL_DEFAULTS
from vlmpack.models.internvl_video import VIDEO_DEFAULTS, InternVLVideos
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

log = logging.getLogger(__name__)

__all__ = ["InternVLFamily"]

#: InternVLProcessor's defaults when the directory has no ``processor_config.json`` / extra tokens.
DEFAULT_IMAGE_SEQ_LENGTH = 256
DEFAULT_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>",
                  "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}


class InternVLFamily(InternVLVideos, Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one InternVL (HF format) model directory
    (a :class:`vlmpack.models.base.ModelFamily`; the text side is :class:`Qwen2VLFamily`'s, videos
    :class:`~vlmpack.models.internvl_video.InternVLVideos`).

    Attributes: ``tokenizer``, ``image_processor`` (``GotOcr2ImageProcessorPil``),
    ``images_kwargs`` (the processor's image defaults, ``{"crop_to_patches": True}``),
    ``image_seq_length`` (tokens per tile), ``tile_size`` (pixels), ``image_token_id``
    (``<IMG_CONTEXT>``), ``start_image_token_id`` (``<img>``), ``end_image_token_id`` (``</img>``),
    ``im_start_id``, ``im_end_id``, ``pad_token_id``. Raises :class:`ConfigError` when the
    directory lacks a tokenizer, a chat template or a preprocessor config, when its image
    processor is not GOT-OCR2's tiling one, or when ``image_seq_length`` disagrees with the vision
    config.
    """

    name = "internvl"
    counting_files = (*COUNTING_FILES, "processor_config.json")
    mrope = False
    #: named processor options (:mod:`vlmpack.models.options`): tiles are set with
    #: ``--processor-kwargs`` (``max_patches``, ``min_patches``, ``crop_to_patches``)
    processor_options = {"fps": (("video", "fps"), ("video", "do_sample_frames", True), ("video", "num_frames", None))}
    video_option_keys = (*VIDEO_DEFAULTS, *PIXEL_DEFAULTS)
    processor_option_keys = ("image_seq_length",)

    @classmethod
    def image_processor_class(cls) -> type:
        """``GotOcr2ImageProcessorPil`` (see :meth:`Qwen2VLFamily.image_processor_class`)."""
        from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil

        return GotOcr2ImageProcessorPil

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil
        from transformers.models.internvl.processing_internvl import InternVLProcessor

        self.model_dir = str(model_dir)
        d = Path(model_dir)
        self.tokenizer = load_chat_tokenizer(model_dir)
        pre = d / "preprocessor_config.json"
        if not pre.is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        kind = str(json.loads(pre.read_text()).get("image_processor_type", "GotOcr2ImageProcessor"))
        if not kind.startswith("GotOcr2ImageProcessor"):
            raise ConfigError(f"{pre}: image_processor_type {kind!r} is not GOT-OCR2's tiling processor; only "
                              "GotOcr2ImageProcessor(Fast) directories are counted")
        self.image_processor = GotOcr2ImageProcessorPil.from_pretrained(self.model_dir)
        self.images_kwargs = dict(InternVLProcessor.images_kwargs)
        size = self.image_processor.size
        self.tile_size = (int(size.height), int(size.width))
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        proc_cfg = d / "processor_config.json"
        proc = json.loads(proc_cfg.read_text()) if proc_cfg.is_file() else {}
        self.image_seq_length = int(proc.get("image_seq_length", DEFAULT_IMAGE_SEQ_LENGTH))
        self._check_vision_config(cfg)
        tok = self.tokenizer
        names = {k: getattr(tok, k, None) or v for k, v in DEFAULT_TOKENS.items()}
        ids = tok.convert_tokens_to_ids
        self.context_image_token = names["context_image_token"]
        self.image_token_id = int(cfg.get("image_token_id") or ids(self.context_image_token))
        if ids(self.context_image_token) != self.image_token_id:
            raise ConfigError(f"{model_dir}: config.json image_token_id {self.image_token_id} is not the tokenizer's "
                              f"{self.context_image_token} ({ids(self.context_image_token)})")
        self.start_image_token_id = int(ids(names["start_image_token"]))
        self.end_image_token_id = int(ids(names["end_image_token"]))
        self.video_token = names["video_token"]
        self.video_token_id = int(ids(self.video_token))
        self.video_feature_token_id = self.image_token_id  # video frames' features go on <IMG_CONTEXT> too
        self.im_start_id = int(ids("<|im_start|>"))
        self.im_end_id = int(ids("<|im_end|>"))
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else self.im_end_id)
        self._label_ids: tuple[int, int] | None = None
        # the processor's regex also takes a literal video token in the text as a video: refused too
        self.special_tokens = tuple(sorted(set(special_token_strings(tok)) | {names["video_token"]},
                                           key=lambda s: (-len(s), s)))
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        self._frames = lru_cache(maxsize=65536)(self._frames_uncached)
        self._text_lens: dict[str, int] = {}

    def _check_vision_config(self, cfg: dict) -> None:
        """``image_seq_length`` must be what the vision tower gives per tile: (image_size /
        patch_size)**2 * downsample_ratio**2 (``InternVLProcessor``'s docstring), and a tile must be
        the vision tower's input size. Keys absent from ``config.json`` are not checked."""
        vc = cfg.get("vision_config") or {}
        image_size, patch = vc.get("image_size"), vc.get("patch_size")
        if image_size is None or patch is None:
            return
        image_size = tuple(image_size) if isinstance(image_size, (list, tuple)) else (image_size, image_size)
        patch = tuple(patch) if isinstance(patch, (list, tuple)) else (patch, patch)
        ratio = float(cfg.get("downsample_ratio", 0.5))
        per_tile = round((image_size[0] // patch[0]) * (image_size[1] // patch[1]) * ratio * ratio)
        if per_tile != self.image_seq_length or tuple(image_size) != self.tile_size:
            raise ConfigError(f"{self.model_dir}: image_seq_length {self.image_seq_length} and tile {self.tile_size} "
                              f"do not match the vision config (image_size {image_size}, patch {patch}, downsample "
                              f"{ratio}: {per_tile} tokens per tile); fix processor_config.json or "
                              "preprocessor_config.json")

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        return int(self.image_processor.get_number_of_image_patches(height, width, self.images_kwargs)) \
            * self.image_seq_length

    def image_tokens(self, width: int, height: int) -> int:
        """Number of ``<IMG_CONTEXT>`` tokens for an image of ``width`` x ``height`` pixels (after
        EXIF orientation): tiles (grid + thumbnail) x ``image_seq_length``. Raises
        :class:`MediaRuleError` for non-positive sizes."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """Media tokens of one item: an image's ``<IMG_CONTEXT>`` copies (:meth:`image_tokens`), a
        video's replacement tokens (:meth:`video_tokens`); ``sample_images`` is ignored (every image
        is tiled alike). Raises :class:`MediaRuleError` for another kind and what the rules refuse."""
        if media.kind == "video":
            return self.video_tokens(media)
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name}")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """None: GOT-OCR2's tiling takes any positive size (every aspect ratio maps to a grid)."""
        return None

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem when the rendered ids do not hold exactly one ``<IMG_CONTEXT>`` per
        image, one ``<video>`` per video and no ``<img>``/``</img>`` (the expansion adds those), else
        ``None``."""
        got = int(np.count_nonzero(ids == self.image_token_id))
        vids = int(np.count_nonzero(ids == self.video_token_id))
        starts = int(np.count_nonzero((ids == self.start_image_token_id) | (ids == self.end_image_token_id)))
        if (got, starts, vids) != (n_images, 0, n_videos):
            return (f"rendered text holds {got} {self.context_image_token}, {vids} {self.video_token} and {starts} "
                    f"<img>/</img> for {n_images} images and {n_videos} videos")
        return None

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """The length of the processor's ``input_ids``: ``len(ids) + sum(n_i + 1)`` over images (each
        ``<IMG_CONTEXT>`` becomes ``<img>`` + ``n_i`` copies + ``</img>``) ``+ sum(n_j - 1)`` over
        videos (each ``<video>`` becomes its ``n_j`` replacement tokens) plus each video's join
        correction (see the module docstring). ``media_tokens``: per media item in order of
        appearance; ids without ``<video>`` take the images-only formula."""
        ids = np.asarray(ids)
        vids = np.flatnonzero(ids == self.video_token_id)
        if not len(vids):
            return int(len(ids) + sum(int(n) + 1 for n in media_tokens))
        pos = np.flatnonzero((ids == self.image_token_id) | (ids == self.video_token_id))
        if len(pos) != len(media_tokens):
            raise ValueError(f"{len(pos)} media placeholders in the ids for {len(media_tokens)} media items")
        n = len(ids)
        for p, k in zip(pos.tolist(), media_tokens):
            n += int(k) - 1 + (self._join_correction(ids, p) if ids[p] == self.video_token_id else 2)
        return int(n)

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """``input_ids`` with the i-th ``<IMG_CONTEXT>`` replaced by ``<img>``, ``media_tokens[i]``
        ``<IMG_CONTEXT>`` and ``</img>``.

        ids: int array ``[t]`` from :meth:`tokenize`; media_tokens: per image in order of
        appearance. Returns int32 ``[t + sum(media_tokens) + len(media_tokens)]``; raises
        ``ValueError`` when the ids hold another number of ``<IMG_CONTEXT>``."""
        ids = np.asarray(ids, dtype=np.int32)
        if np.any(ids == self.video_token_id):
            raise MediaRuleError("InternVL ids with videos are built by expand_videos (frame layouts needed)")
        pads = np.flatnonzero(ids == self.image_token_id)
        if len(pads) != len(media_tokens):
            raise ValueError(f"{len(pads)} {self.context_image_token} in the ids for {len(media_tokens)} images")
        parts, last = [], 0
        for p, n in zip(pads.tolist(), media_tokens):
            parts += [ids[last:p], np.array([self.start_image_token_id], dtype=np.int32),
                      np.full(int(n), self.image_token_id, dtype=np.int32),
                      np.array([self.end_image_token_id], dtype=np.int32)]
            last = p + 1
        parts.append(ids[last:])
        return np.concatenate(parts)

    # ------------------------------------------------------------------ training
    def rope_model_class(self) -> type:
        """InternVL has 1-D positions (``mrope`` is False); always raises :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: InternVL has 1-D positions, no mRoPE model class")

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's own call (with the processor's ``crop_to_patches=True``) on
        decoded PIL RGB images: float32 ``pixel_values`` ``[sum tiles, 3, H, W]`` (tiles of each
        image in order, its thumbnail last), ``grids`` int64 ``[k, 3]`` = ``(tiles, 1, 1)`` per image
        (so ``grids.prod(1).sum()`` is the number of ``pixel_values`` rows, as for Qwen-VL), tokens
        ``tiles * image_seq_length``; no other model kwargs (``images_per_sample`` is ignored)."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self.image_processor(images=images, return_tensors="pt", **self.images_kwargs)
        tiles = np.asarray(out["num_patches"], dtype=np.int64).reshape(-1)
        grids = np.stack([tiles, np.ones_like(tiles), np.ones_like(tiles)], axis=1)
        return ProcessedImages(out["pixel_values"].to(torch.float32), grids, tiles * self.image_seq_length, {})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum tiles, 3, H, W]``, the packs' tiles concatenated in order
        (all ``InternVLForConditionalGeneration.forward`` takes for images)."""
        return {"pixel_values": cat_rows([p.pixel_values for p in parts])}

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<img><IMG_CONTEXT>*image_seq_length</img>`` for a black image of one tile."""
        from PIL import Image

        h, w = self.tile_size
        n = self.image_tokens(w, h)
        ids = np.array([self.start_image_token_id] + [self.image_token_id] * n + [self.end_image_token_id],
                       dtype=np.int64)
        return ids, [Image.new("RGB", (w, h))]
