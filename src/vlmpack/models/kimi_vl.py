"""Kimi-VL (``model_type`` ``kimi_vl``; moonshotai/Kimi-VL-A3B-Instruct, -Thinking, -Thinking-2506).

:class:`KimiVLFamily` counts and packs for it.

Kimi-VL ships its processor as **remote code** on the Hugging Face hub (``processing_kimi_vl.py``,
``image_processing_kimi_vl.py``); transformers 5.24 has no ``kimi_vl`` class. The rules restated
here are those of the published files (read in public copies, see
``tools/demo_data/model_files/kimi_vl/SOURCES.md``; none of their text is in vlmpack):

- chat template (the model directory's, rendered by the tokenizer): a default system turn
  ``<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>`` when the first turn is
  not a system turn; each turn ``<|im_user|>`` / ``<|im_assistant|>`` / ``<|im_system|>``, its role
  name, ``<|im_middle|>``, its content, ``<|im_end|>``; no separator, no ``<think>`` tokens (the
  Thinking models write their reasoning as plain text); an image part is
  ``<|media_start|>image<|media_content|><|media_pad|><|media_end|>`` with no newline (Kimi-K2.5's
  template writes ``<|media_begin|>`` and a ``\\n``);
- ``KimiVLProcessor.__call__`` replaces every ``<|media_pad|>`` with ``image_grid_hws[i].prod() //
  (merge_kernel_size[0] * merge_kernel_size[1])`` copies, then tokenizes with the tokenizer's
  default call; ``<|media_pad|>`` is a special token, so ``len(input_ids) = len(tokenizer(rendered))
  + sum(n_i - 1)`` (as :class:`vlmpack.models.qwen2_vl.Qwen2VLFamily`);
- ``n_i`` from the image *header* (width, height after EXIF orientation) by :func:`kimi_vl_grid`, a
  restatement of ``KimiVLImageProcessor.rescale`` with ``pad_input`` (the published
  ``preprocessor_config.json`` sets it): patches of ``patch_size`` px; when ``(w // p) * (h // p) >
  in_token_limit`` the image is resized to ``int(w * s)`` x ``int(h * s)`` with ``s = sqrt(in_token_limit /
  ((w // p) * (h // p)))``; then padded right / bottom to a multiple of ``p * merge_kernel_size``;
  ``n_i = grid_h * grid_w // (k_h * k_w)``; the same numbers as the published processor's
  ``get_image_tokens`` (written by Moonshot for vLLM);
- images whose padded grid has 512 patches or more on a side are refused by the published
  processor (``ValueError("Exceed pos emb")``, the size of MoonViT's position table):
  :meth:`KimiVLFamily.media_problem` names them, so they are rejected ``media_unsupported``;
- positions are 1-D; labels: each assistant turn after its ``<|im_middle|>`` up to its
  ``<|im_end|>`` inclusive (:func:`vlmpack.models.kimi_k25.kimi_label_mask`);
- training pixels (:meth:`KimiVLFamily.process_images`, :func:`kimi_vl_pixels`): the published
  ``KimiVLImageProcessor.preprocess`` with ``pad_input``, restated step for step (PIL bicubic
  resize, zero pad right / bottom, ``to_tensor``, ``normalize`` with the directory's
  ``image_mean`` / ``image_std``, 14 x 14 patches row by row): ``pixel_values`` float32 ``[sum(h*w),
  3, 14, 14]``, with ``image_grid_thw`` int64 ``[k, 3]`` ``(1, h, w)``;
- the model to train: the published ``KimiVLForConditionalGeneration`` is remote code for
  transformers 4.51 (no ``kimi_vl`` class in transformers 5.24); transformers'
  ``Kimi_K25ForConditionalGeneration`` with a config mapped from Kimi-VL's (``projection_layer_norm_eps``
  1e-5, MoonViT's 64 x 64 position table, ``gelu_pytorch_tanh``; :func:`kimi_vl_model_check.k25_config`
  in ``tools/``) and Kimi-VL's weights loaded through transformers' own Kimi checkpoint conversion
  (the projector's ``linear_1`` / ``linear_2`` named ``mm_projector.proj.0`` / ``.2``) gives the
  published model's logits on samples alone, one and two images (``tools/kimi_vl_model_check.py``); it takes
  ``pixel_values`` + ``image_grid_thw`` (the published model: ``image_grid_hws = image_grid_thw[:, 1:]``);
- refused: videos (the published processor has no video path: ``media_unsupported``), tool
  schemas (the published template has no tool branch; Kimi's tokenizer is remote code:
  ``template_unsupported``), ``pad_input`` false (its centre crop is not restated:
  :class:`ConfigError`).

Values read from the model directory: ``preprocessor_config.json`` (``patch_size``,
``in_token_limit``, ``merge_kernel_size``, ``pad_input``, ``image_mean``, ``image_std``; missing: the
published class defaults 14, 4096, [2, 2], False, OpenAI CLIP's mean and std), ``config.json``
(``media_placeholder_token_id``, checked against the tokenizer's ``<|media_pad|>``), the tokenizer
and chat template.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.kimi_k25 import KimiK25Family
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["KimiVLFamily", "kimi_vl_grid", "kimi_vl_pixels"]

#: The published ``KimiVLImageProcessor.__init__`` defaults.
DEFAULTS = {"patch_size": 14, "in_token_limit": 4096, "merge_kernel_size": [2, 2], "pad_input": False,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
#: MoonViT's position table side (the published ``rescale`` refuses ``side // patch_size >= 512``).
MAX_SIDE_PATCHES = 512
NO_CLASS = ("Kimi-VL's image processor is remote code (transformers has no kimi_vl class); vlmpack restates "
            "it (KimiVLFamily.process_images)")


def kimi_vl_grid(height: int, width: int, *, patch_size: int, in_token_limit: int,
                 merge_kernel_size: Sequence[int]) -> tuple[int, int]:
    """``(grid_h, grid_w)`` in patches of a ``height`` x ``width`` px image after the published
    ``KimiVLImageProcessor.rescale`` with ``pad_input`` (module docstring): scaled down when
    ``(w // p) * (h // p) > in_token_limit`` (``int(side * sqrt(limit / patches))``), then padded to
    a multiple of ``p * k`` per side. Ints in, ints out; no size check (see
    :meth:`KimiVLFamily.media_problem`)."""
    p = patch_size
    patches = (width // p) * (height // p)
    if patches > in_token_limit:
        scale = math.sqrt(in_token_limit / patches)
        width, height = int(width * scale), int(height * scale)
    fh, fw = merge_kernel_size[0] * p, merge_kernel_size[1] * p
    pad_h = (fh - height % fh) % fh
    pad_w = (fw - width % fw) % fw
    return (height + pad_h) // p, (width + pad_w) // p


def kimi_vl_pixels(image, *, patch_size: int, in_token_limit: int, merge_kernel_size: Sequence[int],
                   mean: Sequence[float], std: Sequence[float]):
    """``(pixel_values, (grid_h, grid_w))`` of one decoded PIL image: the published
    ``KimiVLImageProcessor._preprocess`` with ``pad_input``, step for step: ``rescale`` (PIL
    ``Image.resize(..., BICUBIC)`` to ``int(side * s)`` when ``(w // p) * (h // p) > in_token_limit``,
    ``s`` as :func:`kimi_vl_grid`; then torchvision ``TF.pad`` with zeros on the right / bottom to a
    multiple of ``p * k``), ``TF.to_tensor(image.convert("RGB"))`` (uint8 -> float32 ``/ 255``),
    ``TF.normalize`` (``(x - mean) / std`` per channel, float32) and ``patchify`` (``[C, H, W]`` ->
    ``[(H/p)*(W/p), C, p, p]``, patches row by row). ``pixel_values``: float32 torch tensor
    ``[grid_h * grid_w, 3, p, p]``. Raises :class:`MediaRuleError` at 512 or more patches on a side
    (the published ``ValueError("Exceed pos emb")``)."""
    import torch
    from PIL import Image

    p = patch_size
    w, h = image.size
    if (w // p) * (h // p) > in_token_limit:
        scale = math.sqrt(in_token_limit / ((w // p) * (h // p)))
        image = image.resize((int(w * scale), int(h * scale)), Image.Resampling.BICUBIC)
    a = np.asarray(image.convert("RGB"), dtype=np.uint8)
    fh, fw = merge_kernel_size[0] * p, merge_kernel_size[1] * p
    height, width = a.shape[:2]
    hh, ww = height + (fh - height % fh) % fh, width + (fw - width % fw) % fw
    if hh // p >= MAX_SIDE_PATCHES or ww // p >= MAX_SIDE_PATCHES:
        raise MediaRuleError(f"{w}x{h} gives a {hh // p}x{ww // p} patch grid; Kimi-VL's image processor refuses "
                             f"{MAX_SIDE_PATCHES} or more patches on a side (Exceed pos emb)")
    padded = np.zeros((hh, ww, 3), dtype=np.uint8)
    padded[:height, :width] = a
    x = torch.from_numpy(padded).permute(2, 0, 1).contiguous().to(torch.float32).div(255)
    x = x.sub(torch.as_tensor(mean, dtype=torch.float32).view(-1, 1, 1)).div(
        torch.as_tensor(std, dtype=torch.float32).view(-1, 1, 1))
    gh, gw = hh // p, ww // p
    patches = x.reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).contiguous().view(-1, 3, p, p)
    return patches, (gh, gw)


class KimiVLFamily(KimiK25Family):
    """Renderer, counter and encoder for one Kimi-VL model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring; rendering, tokenizing,
    expansion and labels as :class:`KimiK25Family`).

    Attributes: ``tokenizer``, ``patch_size``, ``in_token_limit``, ``merge_kernel_size`` (``[k_h,
    k_w]``), ``model_type``, the token ids ``image_token_id`` (``<|media_pad|>``),
    ``vision_start_token_id`` (``<|media_start|>``), ``vision_end_token_id`` (``<|media_end|>``),
    ``video_token_id`` (-1: none), ``pad_token_id``. Raises :class:`ConfigError` (one line) when the
    directory lacks a tokenizer, a chat template or a preprocessor config, when ``pad_input`` is
    false, or when ``config.json``'s ``media_placeholder_token_id`` is not the tokenizer's
    ``<|media_pad|>``.
    """

    name = "kimi_vl"
    counting_files = COUNTING_FILES  # (mrope, processor_options, video_option_keys: Kimi-K2.5's)

    @classmethod
    def image_processor_class(cls) -> type:
        """:class:`ConfigError`: the published ``KimiVLImageProcessor`` is remote code."""
        raise ConfigError(NO_CLASS)

    @classmethod
    def image_valid_kwargs(cls) -> type:
        """The settings ``--processor-kwargs`` may give (:func:`vlmpack.models.options.accepted_keys`):
        the published ``KimiVLImageProcessor.__init__`` arguments that change counts
        (``in_token_limit``, ``patch_size``, ``merge_kernel_size``, ``pad_input``)."""
        from typing import TypedDict

        return TypedDict("KimiVLImageProcessorKwargs", {"in_token_limit": int, "patch_size": int,
                                                        "merge_kernel_size": list, "pad_input": bool}, total=False)

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        d = Path(model_dir)
        self.model_dir = str(model_dir)
        if not (d / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        pre = {**DEFAULTS, **json.loads((d / "preprocessor_config.json").read_text())}
        if not pre["pad_input"]:
            raise ConfigError(f"{model_dir}: preprocessor_config.json pad_input is false; vlmpack restates only "
                              "KimiVLImageProcessor's pad_input path (the published Kimi-VL configs set it true)")
        kernel = pre["merge_kernel_size"]
        if not (isinstance(kernel, list) and len(kernel) == 2 and all(isinstance(k, int) and k > 0 for k in kernel)):
            raise ConfigError(f"{model_dir}: preprocessor_config.json merge_kernel_size must be [k_h, k_w], "
                              f"got {kernel!r}")
        self.patch_size = int(pre["patch_size"])
        self.in_token_limit = int(pre["in_token_limit"])
        self.merge_kernel_size = [int(k) for k in kernel]
        self.merge_size = self.merge_kernel_size[0]  # used by nothing that counts; kept for the base class
        self.image_mean = [float(v) for v in pre["image_mean"]]
        self.image_std = [float(v) for v in pre["image_std"]]
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        self.tokenizer = tok = load_chat_tokenizer(model_dir)
        ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|media_pad|>", "<|media_start|>", "<|media_content|>",
                                                          "<|media_end|>", "<|im_assistant|>", "<|im_middle|>",
                                                          "<|im_end|>")}
        missing = [t for t, i in ids.items() if not isinstance(i, int) or i == tok.unk_token_id]
        if missing:
            raise ConfigError(f"{model_dir}: the tokenizer lacks Kimi-VL's tokens {missing}")
        got = cfg.get("media_placeholder_token_id", ids["<|media_pad|>"])
        if got != ids["<|media_pad|>"]:
            raise ConfigError(f"{model_dir}: config.json media_placeholder_token_id {got} is not the tokenizer's "
                              f"<|media_pad|> ({ids['<|media_pad|>']})")
        self.image_token_id = ids["<|media_pad|>"]
        self.vision_start_token_id = ids["<|media_start|>"]
        self.vision_end_token_id = ids["<|media_end|>"]
        self._media_content_id = ids["<|media_content|>"]
        self.video_token_id = -1
        self._turn_ids = {t: ids[t] for t in ("<|im_assistant|>", "<|im_middle|>", "<|im_end|>")}
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else ids["<|im_end|>"])
        self.special_tokens = special_token_strings(tok)
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        self._pixel_processor = None

    # ------------------------------------------------------------------ media rule
    def grid(self, width: int, height: int) -> tuple[int, int]:
        """``(grid_h, grid_w)`` of a ``width`` x ``height`` image: :func:`kimi_vl_grid` with this
        directory's settings."""
        return kimi_vl_grid(height, width, patch_size=self.patch_size, in_token_limit=self.in_token_limit,
                            merge_kernel_size=self.merge_kernel_size)

    def _image_tokens_uncached(self, width: int, height: int) -> int:
        grid_h, grid_w = self.grid(width, height)
        return grid_h * grid_w // (self.merge_kernel_size[0] * self.merge_kernel_size[1])

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """``<|media_pad|>`` copies of one image (:func:`kimi_vl_grid`; ``sample_images`` is
        ignored). Raises :class:`MediaRuleError` for videos (Kimi-VL's processor has none), other
        kinds and non-positive sizes."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (Kimi-VL's "
                                 "published processor takes images only)")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """A one-line reason for an image the published processor refuses (``ValueError("Exceed pos
        emb")``: 512 or more patches on a side of the padded grid), else None; videos: None (refused
        at counting time)."""
        if kind != "image" or width <= 0 or height <= 0:
            return None
        grid_h, grid_w = self.grid(width, height)
        if max(grid_h, grid_w) >= MAX_SIDE_PATCHES:
            return (f"{width}x{height} gives a {grid_h}x{grid_w} patch grid; Kimi-VL's image processor refuses "
                    f"{MAX_SIDE_PATCHES} or more patches on a side (Exceed pos emb)")
        return None

    # ------------------------------------------------------------------ text
    def field_problem(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> tuple[str, str] | None:
        """``("template_unsupported", ...)`` for a conversation with tool schemas (Kimi-VL's published
        template renders none), else :meth:`Qwen2VLFamily.field_problem`."""
        if tools:
            return "template_unsupported", ("the sample has tool schemas; Kimi-VL's chat template renders no tool "
                                            "declarations, so the model would never see them")
        return super().field_problem(messages, None)

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold exactly one ``<|media_pad|>``,
        ``<|media_start|>`` and ``<|media_end|>`` per image, else None (videos are never counted)."""
        counts = [int(np.count_nonzero(ids == t)) for t in (self.image_token_id, self.vision_start_token_id,
                                                             self.vision_end_token_id)]
        if counts != [n_images] * 3 or n_videos:
            return (f"rendered text holds {counts[0]} <|media_pad|>, {counts[1]} <|media_start|>, {counts[2]} "
                    f"<|media_end|> for {n_images} images and {n_videos} videos")
        return None

    # ------------------------------------------------------------------ training
    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The published ``KimiVLImageProcessor.preprocess`` (``pad_input`` path) on decoded PIL images,
        restated by :func:`kimi_vl_pixels` per image: ``pixel_values`` float32 ``[sum(h*w), 3, p, p]``,
        grids int64 ``[k, 3]`` ``(1, h, w)`` in patches, tokens ``h*w // (k_h*k_w)`` per image,
        ``model_kwargs`` ``{"image_grid_thw": int64 [k, 3]}`` (``images_per_sample`` is ignored). The
        batch (:meth:`KimiK25Family.batch_image_inputs`) holds ``pixel_values`` and ``image_grid_thw``,
        the inputs of transformers' ``Kimi_K25ForConditionalGeneration`` (module docstring); the
        published remote model takes the same pixels with ``image_grid_hws = image_grid_thw[:, 1:]``.
        Raises :class:`MediaRuleError` for an image the published processor refuses (``Exceed pos emb``)."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        parts = [kimi_vl_pixels(im, patch_size=self.patch_size, in_token_limit=self.in_token_limit,
                                merge_kernel_size=self.merge_kernel_size, mean=self.image_mean, std=self.image_std)
                 for im in images]
        hws = np.array([hw for _, hw in parts], dtype=np.int64)
        grids = np.concatenate([np.ones((len(hws), 1), dtype=np.int64), hws], axis=1)
        return ProcessedImages(torch.cat([px for px, _ in parts]), grids,
                               hws.prod(axis=1) // (self.merge_kernel_size[0] * self.merge_kernel_size[1]),
                               {"image_grid_thw": torch.from_numpy(grids)})

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """:class:`ConfigError`: Kimi-VL videos are never counted, so never packed."""
        raise ConfigError(f"{self.model_dir}: {self.name} videos are not supported (counted media_unsupported)")

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<|media_start|>image<|media_content|><|media_pad|>*n<|media_end|>`` for a black
        ``patch_size * k`` square (``n`` = :meth:`image_tokens`, 1)."""
        from PIL import Image

        side = self.patch_size * max(self.merge_kernel_size)
        n = self.image_tokens(side, side)
        head = [self.vision_start_token_id, *self.tokenizer.encode("image", add_special_tokens=False),
                self._media_content_id]
        ids = np.array(head + [self.image_token_id] * n + [self.vision_end_token_id], dtype=np.int64)
        return ids, [Image.new("RGB", (side, side))]
