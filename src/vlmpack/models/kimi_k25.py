"""Kimi-K2.5 (``model_type`` ``kimi_k25``, transformers' ``Kimi_K25ForConditionalGeneration``): :class:`KimiK25Family`.

The rules matched are transformers' ``Kimi_K25Processor.__call__`` (``processing_kimi_k25``, the
``ProcessorMixin`` call with its ``replace_image_token``), ``Kimi_K25ImageProcessor``
(``image_processing_kimi_k25``: ``navit_resize``, ``get_number_of_image_patches``) and
``Kimi_K25Model`` (1-D positions of its DeepSeek-V3 text model):

- chat template (the model directory's, rendered by the tokenizer): ``<|im_system|>system<|im_middle|>
  ... <|im_end|>`` (a default system turn when the conversation has none), ``<|im_user|>user<|im_middle|>``
  / ``<|im_assistant|>assistant<|im_middle|>`` turns closed by ``<|im_end|>``, no separator between
  turns; an assistant turn starts with ``<think></think>`` (or ``<think>{reasoning}</think>`` after
  the last plain reply); an image part is written
  ``<|media_begin|>image<|media_content|><|media_pad|><|media_end|>\\n``;
- ``Kimi_K25Processor`` replaces every ``<|media_pad|>`` with ``image_grid_thw.prod() //
  merge_size**2`` copies and tokenizes with the tokenizer's default call; ``<|media_pad|>`` is a
  special token, so (as for Qwen2-VL) ``len(input_ids) = len(tokenizer(rendered)) + sum(n_i - 1)``;
- ``n_i`` from the image *header* (width, height after EXIF orientation) by :func:`navit_grid`, a
  restatement of transformers' ``navit_resize`` (the image processor class is torchvision-only, so
  it cannot be asked here): the image is scaled down (never up) to at most ``max_patches`` patches of
  ``patch_size`` px and ``size["max_height"]`` patches per side, then padded to a multiple of
  ``patch_size * merge_size``; ``n_i = grid_h * grid_w // merge_size**2``. The test suite compares
  it with ``Kimi_K25Processor`` on every image sample of the demo set;
- positions are 1-D (``mrope`` False); labels (:func:`kimi_label_mask`): each assistant turn after
  its ``<|im_middle|>`` up to its ``<|im_end|>`` inclusive (``<think>...</think>`` included: the
  model writes it);
- videos and tool schemas are refused: ``Kimi_K25Processor`` writes per video chunk a timestamp and
  ``<|media_begin|>video ...`` text from ``Kimi_K25VideoProcessor``'s sampling (torchvision only),
  which vlmpack does not restate (``media_unsupported``); Kimi's tokenizer (remote code,
  ``tokenization_kimi.py``) renders tool schemas as TypeScript (``tools_ts_str``), not the template's
  JSON fallback (``template_unsupported``).

Training pixels come from ``Kimi_K25ImageProcessor`` itself (``pixel_values`` float32 ``[patches, 3,
14, 14]``, ``image_grid_thw``), which needs torchvision: without it the first image pack raises
:class:`ConfigError` (one line).

Values read from the model directory: ``preprocessor_config.json`` (``patch_size``, ``merge_size``,
``max_patches``, ``size``; missing: ``Kimi_K25ImageProcessor``'s defaults 14, 2, 16384, 512),
``config.json`` (``image_token_id``, ``vision_start_token_id``, ``vision_end_token_id``, checked
against the tokenizer's ``<|media_pad|>``, ``<|media_begin|>``, ``<|media_end|>``), the tokenizer and
chat template. Source: transformers 5.24 ``models/kimi_k25/``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.chatml import spans_mask
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["KimiK25Family", "kimi_label_mask", "navit_grid"]

#: ``config.json`` key -> token string of the template and processor (``Kimi_K25Config`` defaults
#: 163605, 163602, 163604).
TOKENS = {"image_token_id": "<|media_pad|>", "vision_start_token_id": "<|media_begin|>",
          "vision_end_token_id": "<|media_end|>"}
#: ``Kimi_K25ImageProcessor``'s class defaults (transformers 5.24).
DEFAULTS = {"patch_size": 14, "merge_size": 2, "max_patches": 16384, "max_side": 512}
NEEDS_TORCHVISION = ("transformers' Kimi_K25ImageProcessor is torchvision-only; install torchvision (the build "
                     "matching your torch) to train on Kimi-K2.5 images (counting does not need it)")


def navit_grid(height: int, width: int, *, patch_size: int, merge_size: int, max_patches: int,
               max_side: int) -> tuple[int, int]:
    """``(grid_h, grid_w)`` in patches of an image of ``height`` x ``width`` px after
    ``Kimi_K25ImageProcessor``'s resize and padding: transformers' ``navit_resize``, step for step
    (the same float operations in the same order). Scale ``min(1, sqrt(max_patches / (max(1, h //
    p) * max(1, w // p))), max_side * p / h, max_side * p / w)``; new side ``max(1, int(side *
    scale))`` capped at ``max_side * p``; padded up to a multiple of ``p * merge_size``."""
    num_patches_h = max(1.0, height // patch_size)
    num_patches_w = max(1.0, width // patch_size)
    scale_for_total_patches = math.sqrt(max_patches / (num_patches_h * num_patches_w))
    scale = min(1.0, scale_for_total_patches, (max_side * patch_size) / height, (max_side * patch_size) / width)
    new_height = min(max(1, int(height * scale)), max_side * patch_size)
    new_width = min(max(1, int(width * scale)), max_side * patch_size)
    factor = merge_size * patch_size
    pad_height = (factor - new_height % factor) % factor + new_height
    pad_width = (factor - new_width % factor) % factor + new_width
    return pad_height // patch_size, pad_width // patch_size


def _first_at_or_after(positions: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    """int64 ``[len(at)]``: for each of ``at``, the first of the sorted ``positions`` at or after it;
    ``n`` where there is none."""
    k = np.searchsorted(positions, at)
    out = np.full(len(at), n, dtype=np.int64)
    ok = k < len(positions)
    out[ok] = positions[k[ok]]
    return out


def kimi_label_mask(ids: np.ndarray, *, assistant_id: int, middle_id: int, end_id: int) -> np.ndarray:
    """bool ``[n]``: True on the tokens of Kimi assistant turns that are trained on.

    Found on the token ids of the rendered template: a turn's header is ``<|im_assistant|>``
    (``assistant_id``), its role name and ``<|im_middle|>`` (``middle_id``); its content runs from
    after that ``<|im_middle|>`` to its ``<|im_end|>`` (``end_id``) inclusive, the end-of-turn token
    the model must emit (to the end of ``ids`` when there is none). ids: int ``[n]``."""
    ids = np.asarray(ids)
    n = len(ids)
    heads = np.flatnonzero(ids == assistant_id)
    start = np.minimum(_first_at_or_after(np.flatnonzero(ids == middle_id), heads, n) + 1, n)
    stop = np.minimum(_first_at_or_after(np.flatnonzero(ids == end_id), start, n) + 1, n)
    return spans_mask(n, start, stop)


class KimiK25Family(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one Kimi-K2.5 model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring; rendering, tokenizing and
    expansion as :class:`Qwen2VLFamily`).

    Attributes: ``tokenizer``, ``patch_size``, ``merge_size``, ``max_patches``, ``max_side``
    (patches per side), ``model_type``, the token ids ``image_token_id`` (``<|media_pad|>``),
    ``video_token_id`` (``config.json``'s; never in rendered ids), ``vision_start_token_id``,
    ``vision_end_token_id``, ``pad_token_id``. Raises :class:`ConfigError` when the directory
    lacks a tokenizer, a chat template or a preprocessor config, when the preprocessor config's
    ``size`` is not ``{"max_height": s, "max_width": s}`` (the processor refuses it), or when
    ``config.json``'s token ids are not the tokenizer's.
    """

    name = "kimi_k25"
    counting_files = COUNTING_FILES
    mrope = False
    #: no named option: ``max_patches`` / ``size`` / ``patch_size`` / ``merge_size`` through ``--processor-kwargs``
    processor_options: dict = {}
    video_option_keys = ()

    @classmethod
    def image_processor_class(cls) -> type:
        """``Kimi_K25ImageProcessor`` (its ``valid_kwargs`` are what ``--processor-kwargs`` may set).
        Raises :class:`ConfigError` without torchvision (the class imports it)."""
        try:
            from transformers.models.kimi_k25.image_processing_kimi_k25 import Kimi_K25ImageProcessor
        except ImportError:
            raise ConfigError(NEEDS_TORCHVISION) from None
        return Kimi_K25ImageProcessor

    @classmethod
    def image_valid_kwargs(cls) -> type:
        """``Kimi_K25ImageProcessor.valid_kwargs`` restated without torchvision (the settings
        ``--processor-kwargs`` may give it; :func:`vlmpack.models.options.accepted_keys`): transformers'
        ``ImagesKwargs`` + ``max_patches``, ``patch_size``, ``merge_size``, as
        ``Kimi_K25ImageProcessorKwargs`` (transformers 5.24; the test compares the two in its
        torchvision child), so counting with options needs no torchvision."""
        from transformers.processing_utils import ImagesKwargs

        class Kimi_K25ImageProcessorKwargs(ImagesKwargs, total=False):  # noqa: N801 - transformers' name
            max_patches: int
            patch_size: int
            merge_size: int

        return Kimi_K25ImageProcessorKwargs

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.tokenizer = load_chat_tokenizer(model_dir)
        if not (d / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        pre = json.loads((d / "preprocessor_config.json").read_text())
        size = pre.get("size") or {"max_height": DEFAULTS["max_side"], "max_width": DEFAULTS["max_side"]}
        side = size.get("max_height") if isinstance(size, dict) else None
        if side is None or side != size.get("max_width"):
            raise ConfigError(f"{model_dir}: preprocessor_config.json size must be {{'max_height': s, 'max_width': s}} "
                              f"with equal values (Kimi_K25ImageProcessor refuses {size!r})")
        self.patch_size = int(pre.get("patch_size", DEFAULTS["patch_size"]))
        self.merge_size = int(pre.get("merge_size", DEFAULTS["merge_size"]))
        self.max_patches = int(pre.get("max_patches", DEFAULTS["max_patches"]))
        self.max_side = int(size["max_height"])
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        tok = self.tokenizer
        for key, token in TOKENS.items():
            want = tok.convert_tokens_to_ids(token)
            if not isinstance(want, int) or want == tok.unk_token_id:
                raise ConfigError(f"{model_dir}: the tokenizer has no {token} token (Kimi-K2.5's {key})")
            got = int(cfg[key]) if cfg.get(key) is not None else want
            if want != got:
                raise ConfigError(f"{model_dir}: config.json {key} {got} is not the tokenizer's {token} ({want})")
            setattr(self, key, got)
        self.video_token_id = int(cfg.get("video_token_id") or -1)
        self._turn_ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|im_assistant|>", "<|im_middle|>", "<|im_end|>")}
        if any(not isinstance(i, int) or i == tok.unk_token_id for i in self._turn_ids.values()):
            raise ConfigError(f"{model_dir}: the tokenizer lacks Kimi's turn tokens {tuple(self._turn_ids)}")
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else self._turn_ids["<|im_end|>"])
        self.special_tokens = special_token_strings(tok)
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        self._pixel_processor = None

    # ------------------------------------------------------------------ media rule
    def _image_tokens_uncached(self, width: int, height: int) -> int:
        grid_h, grid_w = navit_grid(height, width, patch_size=self.patch_size, merge_size=self.merge_size,
                                    max_patches=self.max_patches, max_side=self.max_side)
        return grid_h * grid_w // self.merge_size**2

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """``<|media_pad|>`` copies of one image (:meth:`Qwen2VLFamily.image_tokens` with the
        :func:`navit_grid` rule; ``sample_images`` is ignored). Raises :class:`MediaRuleError` for
        videos (see the module docstring), other kinds and non-positive sizes."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (Kimi-K2.5 writes "
                                 "timestamp text per video chunk, which vlmpack does not count yet)")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """None: ``navit_resize`` takes every image of positive size (it scales and pads any aspect
        ratio); videos are refused at counting time."""
        return None

    # ------------------------------------------------------------------ text
    def field_problem(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> tuple[str, str] | None:
        """``("template_unsupported", ...)`` for a conversation with tool schemas (Kimi's tokenizer
        writes them as TypeScript through remote code, ``tools_ts_str``; the template's JSON fallback
        would be counted instead), else :meth:`Qwen2VLFamily.field_problem`."""
        if tools:
            return "template_unsupported", ("the sample has tool schemas; Kimi-K2.5's tokenizer writes them as "
                                            "TypeScript (tokenization_kimi.py, remote code), which vlmpack does not "
                                            "restate: packed, they would be counted wrong")
        return super().field_problem(messages, None)

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold exactly one ``<|media_pad|>``,
        ``<|media_begin|>`` and ``<|media_end|>`` per image (user text with such a token, or media
        the template did not render), else None. Videos are never counted (``n_videos`` 0)."""
        counts = [int(np.count_nonzero(ids == t)) for t in (self.image_token_id, self.vision_start_token_id,
                                                             self.vision_end_token_id)]
        if counts != [n_images] * 3 or n_videos:
            return (f"rendered text holds {counts[0]} <|media_pad|>, {counts[1]} <|media_begin|>, {counts[2]} "
                    f"<|media_end|> for {n_images} images and {n_videos} videos")
        return None

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: :func:`kimi_label_mask` with this tokenizer's ids."""
        t = self._turn_ids
        return kimi_label_mask(ids, assistant_id=t["<|im_assistant|>"], middle_id=t["<|im_middle|>"],
                               end_id=t["<|im_end|>"])

    def rope_model_class(self) -> type:
        """Kimi-K2.5 has 1-D positions (``mrope`` False): :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} has 1-D positions (no mRoPE model class)")

    def _processor(self):
        if self._pixel_processor is None:
            self._pixel_processor = self.image_processor_class().from_pretrained(self.model_dir)
        return self._pixel_processor

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """``Kimi_K25ImageProcessor``'s own call on decoded PIL RGB images: ``pixel_values``
        float32 ``[sum(h*w), 3, patch_size, patch_size]``, ``image_grid_thw`` int64 ``[k, 3]``
        (``(1, h, w)`` in patches), tokens ``h*w // merge_size**2`` per image
        (``images_per_sample`` is ignored). Raises :class:`ConfigError` without torchvision."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self._processor()(images=images, return_tensors="pt")
        grids = out["image_grid_thw"].numpy().astype(np.int64)
        return ProcessedImages(out["pixel_values"].to(torch.float32), grids,
                               grids.prod(axis=1) // self.merge_size**2,
                               {"image_grid_thw": torch.from_numpy(grids)})

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[sum P, 3, p, p]`` and ``image_grid_thw`` int64 ``[k, 3]``,
        concatenated in order (what ``Kimi_K25ForConditionalGeneration.forward`` takes)."""
        import torch

        return {"pixel_values": cat_rows([p.pixel_values for p in parts]),
                "image_grid_thw": torch.from_numpy(np.concatenate([p.grids for p in parts]))}

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """:class:`ConfigError`: Kimi-K2.5 videos are not counted, so never packed (module docstring)."""
        raise ConfigError(f"{self.model_dir}: {self.name} videos are not supported (counted media_unsupported)")

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<|media_begin|>image<|media_content|><|media_pad|>*n<|media_end|>`` for a black
        ``patch_size * merge_size`` square (``n`` = :meth:`image_tokens`, 1)."""
        from PIL import Image

        side = self.patch_size * self.merge_size
        n = self.image_tokens(side, side)
        tok = self.tokenizer
        head = [self.vision_start_token_id, *tok.encode("image", add_special_tokens=False),
                tok.convert_tokens_to_ids("<|media_content|>")]
        ids = np.array(head + [self.image_token_id] * n + [self.vision_end_token_id], dtype=np.int64)
        return ids, [Image.new("RGB", (side, side))]
