"""SmolVLM2 (``model_type`` ``smolvlm``, transformers' ``SmolVLMForConditionalGeneration``):
:class:`SmolVLMFamily`, exact token counts and ``input_ids`` from image headers, without pixels.

The rule matched is transformers' ``SmolVLMProcessor.__call__`` (``processing_smolvlm``) with
``SmolVLMImageProcessorPil`` (``image_processing_pil_smolvlm``):

- the chat template (rendered by the tokenizer) writes one ``<image>`` per image
  (``<|im_start|>User:<image>text<end_of_utterance>\\nAssistant: ...``);
- the image processor resizes an image of ``h`` x ``w`` so that its longest edge is
  ``size["longest_edge"]`` (``get_resize_output_image_size``: upscaling too, the short side made
  even, capped at 4096), then to multiples of the tile side ``M = max_image_size["longest_edge"]``
  (``resize_for_vision_encoder``), and splits that into ``rows x cols`` tiles of ``M x M`` plus
  one global image resized to ``M x M`` when it is larger than one tile (``split_images``);
  without ``do_image_splitting`` the image is one ``M x M`` tile (rows = cols = 0). Restated step
  for step in :func:`vlmpack.models.smolvlm_rules.image_grid` from the header's size (after EXIF orientation);
- each ``<image>`` is replaced by the text of ``get_image_prompt_string(rows, cols,
  image_seq_len, ...)``: per tile ``<fake_token_around_image><row_r_col_c>`` + ``image_seq_len``
  ``<image>``, ``"\\n"`` after each row, then ``"\\n<fake_token_around_image><global-img>"`` +
  ``image_seq_len`` ``<image>`` + ``<fake_token_around_image>`` (no split: the global part alone,
  without the newlines), and the text is tokenized with the tokenizer's default call.

The replacement starts and ends with ``<fake_token_around_image>``, an added token like
``<image>`` (checked when the family is built: both added, neither strips spaces), so the
tokenizer splits the text at it exactly where it split it at the ``<image>`` placeholder: the text
around an image is tokenized the same with or without the replacement, and the replacement itself
is added tokens and ``"\\n"`` / ``"\\n\\n"`` runs between added tokens, so its ids do not depend
on what surrounds it. The family tokenizes each layout's replacement once
(:meth:`SmolVLMFamily.layout_ids`, one ``<image>`` per tile, then ``image_seq_len`` copies) and::

    len(input_ids) = len(tokenizer(rendered)) + sum(L_i - 1)

with ``L_i`` the length of image i's replacement: the image's *media tokens*
(:meth:`SmolVLMFamily.media_tokens`, what the pack records per image). ``L`` depends on the rows
(one ``"\\n"`` per row), not only on the tiles, so it is the whole replacement's length, not the
``<image>`` count (a 4 x 1 grid and a 1 x 4 grid have the same tiles but not the same ``L``); the
layout is found back from ``L`` alone (:meth:`SmolVLMFamily.layout_of`: no two layouts the image
processor can give have the same ``L``, checked when the family is built), so counts recorded as
plain numbers expand exactly (``--pretokenize``, ``vlmpack verify``).

Videos: ``media_unsupported`` (the processor's video prompt, timestamps and frame sampling are not
restated here). Training: the collator encodes each sample with :meth:`SmolVLMFamily.process_sample`
(``encodes_with_processor``: its ids from the rule above with the layouts the image processor
returned, checked against the header's, and its tiles); a packed row's ``pixel_values`` are
``[1, tiles, 3, M, M]``, every tile of every sample in text order, and ``pixel_attention_mask``
``[1, tiles, M, M]`` (no padding image: ``SmolVLMModel.get_image_features`` drops all-zero images
and scatters the features of the others onto the ``<image>`` tokens in order, so one row of
tiles gives each sample its own features). 1-D positions; labels: the assistant turns'
content and their ``<end_of_utterance>`` (:meth:`SmolVLMFamily.label_mask`).

Source: transformers 5.x ``models/smolvlm/processing_smolvlm.py``,
``image_processing_pil_smolvlm.py`` and ``modeling_smolvlm.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError, PackMismatchError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedImages, ProcessedVideos, cat_rows
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.smolvlm_rules import edge, image_grid, turn_label_mask
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["SmolVLMFamily"]

#: SmolVLMProcessor's defaults (its ``__init__`` and the tokenizer attributes it reads).
DEFAULT_IMAGE_SEQ_LEN = 169
DEFAULT_TOKENS = {"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                  "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
                  "video_token": "<video>"}


class SmolVLMFamily(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one SmolVLM2 model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring). Rendering, tokenizing and
    the special-token policy are :class:`~vlmpack.models.qwen2_vl.Qwen2VLFamily`'s (the same
    tokenizer calls); the image expansion, labels and pixels are SmolVLM's.

    Attributes: ``tokenizer``, ``image_processor`` (``SmolVLMImageProcessorPil``),
    ``image_seq_len`` (``<image>`` tokens per tile), ``tile`` (tile side in pixels), ``max_side``
    (the most tiles a side of an image gets),
    ``image_token_id``, ``fake_image_token_id``, ``global_image_token_id``,
    ``end_of_utterance_id``, ``pad_token_id``. Raises :class:`ConfigError` (one line) when the
    directory lacks a tokenizer, chat template or preprocessor config, when ``image_seq_len`` or
    the tile side disagree with ``config.json``'s vision config, when an image token is not an
    added token of the tokenizer (or strips spaces), or when two layouts would give the same
    number of tokens.
    """

    name = "smolvlm"
    counting_files = (*COUNTING_FILES, "processor_config.json")
    mrope = False
    encodes_with_processor = True  # the collator calls process_sample (vlmpack.train.processor_encode)
    #: no named options; tiling with --processor-kwargs (do_image_splitting, size, max_image_size, ...)
    processor_options: dict = {}
    video_option_keys: tuple = ()
    processor_option_keys = ("image_seq_len",)

    @classmethod
    def image_processor_class(cls) -> type:
        """``SmolVLMImageProcessorPil`` (see :meth:`Qwen2VLFamily.image_processor_class`)."""
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

        return SmolVLMImageProcessorPil

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.tokenizer = tok = load_chat_tokenizer(model_dir)
        if not (d / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        self.image_processor = ip = self.image_processor_class().from_pretrained(self.model_dir)
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        try:
            proc = json.loads((d / "processor_config.json").read_text()) if (d / "processor_config.json").is_file() \
                else {}
        except ValueError as e:
            raise ConfigError(f"{d / 'processor_config.json'}: not JSON ({e})") from None
        self.image_seq_len = int(proc.get("image_seq_len", DEFAULT_IMAGE_SEQ_LEN))
        self.tile = edge(ip.max_image_size) or 0
        self._check_vision_config(cfg)
        names = {k: getattr(tok, k, None) or v for k, v in DEFAULT_TOKENS.items()}
        self.token_names = names
        self.image_token_id = self._added_id(names["image_token"])
        if int(cfg.get("image_token_id", self.image_token_id)) != self.image_token_id:
            raise ConfigError(f"{model_dir}: config.json image_token_id {cfg['image_token_id']} is not the tokenizer's "
                              f"{names['image_token']} ({self.image_token_id})")
        self.fake_image_token_id = self._added_id(names["fake_image_token"])
        self.global_image_token_id = self._added_id(names["global_image_token"])
        self.end_of_utterance_id = self._added_id(names["end_of_utterance_token"])
        self.im_start_id = int(tok.convert_tokens_to_ids("<|im_start|>"))
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else self.end_of_utterance_id)
        # the processor counts a literal video token in the text as a video: refused in user text too
        self.special_tokens = tuple(sorted(set(special_token_strings(tok)) | {names["video_token"]},
                                           key=lambda s: (-len(s), s)))
        self._special_re = special_token_pattern(self.special_tokens)
        self._label_ids: tuple | None = None
        self._layouts = lru_cache(maxsize=None)(self._layout_ids_uncached)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)
        self._by_length = self._layout_table()

    def _added_id(self, token: str) -> int:
        """The id of ``token``, which must be an added token that keeps the spaces around it (else
        the text around an image would tokenize otherwise once the placeholder is replaced)."""
        added = {t.content: (i, t) for i, t in self.tokenizer.added_tokens_decoder.items()}
        if token not in added:
            raise ConfigError(f"{self.model_dir}: {token!r} is not an added token of the tokenizer; SmolVLM's image "
                              "text cannot be counted without it")
        i, t = added[token]
        if t.lstrip or t.rstrip:
            raise ConfigError(f"{self.model_dir}: the added token {token!r} strips the spaces around it; its count "
                              "would depend on the text around it")
        return int(i)

    def _check_vision_config(self, cfg: dict) -> None:
        """``image_seq_len`` must be what a tile gives: ``(image_size // patch_size)**2 //
        scale_factor**2`` (``SmolVLMModel.image_seq_len``), and a tile must be the tower's
        ``image_size``. Keys absent from ``config.json`` are not checked."""
        vc = cfg.get("vision_config") or {}
        image_size, patch, scale = vc.get("image_size"), vc.get("patch_size"), cfg.get("scale_factor")
        if self.tile <= 0:
            raise ConfigError(f"{self.model_dir}: preprocessor_config.json has no max_image_size longest_edge")
        if image_size is None or patch is None or scale is None:
            return
        per_tile = int(((int(image_size) // int(patch)) ** 2) / (int(scale) ** 2))
        if per_tile != self.image_seq_len or int(image_size) != self.tile:
            raise ConfigError(f"{self.model_dir}: image_seq_len {self.image_seq_len} and tile {self.tile} px do not "
                              f"match the vision config (image_size {image_size}, patch {patch}, scale_factor {scale}: "
                              f"{per_tile} tokens per tile); fix processor_config.json or preprocessor_config.json")

    # ------------------------------------------------------------------ layouts
    def _layout_ids_uncached(self, rows: int, cols: int) -> np.ndarray:
        from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

        n = self.token_names
        text = get_image_prompt_string(rows, cols, 1, fake_token_around_image=n["fake_image_token"],
                                       image_token=n["image_token"], global_image_token=n["global_image_token"])
        ids = np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int32)
        is_img = ids == self.image_token_id
        tiles = rows * cols + 1
        if int(is_img.sum()) != tiles or ids[0] != self.fake_image_token_id or ids[-1] != self.fake_image_token_id:
            raise ConfigError(f"{self.model_dir}: the image text of a {rows}x{cols} grid tokenizes to "
                              f"{int(is_img.sum())} {n['image_token']} for {tiles} tiles, or does not start and end "
                              f"with {n['fake_image_token']}")
        out = np.repeat(ids, np.where(is_img, self.image_seq_len, 1))
        out.setflags(write=False)
        return out

    def layout_ids(self, rows: int, cols: int) -> np.ndarray:
        """int32 ids (read-only) of the text ``SmolVLMProcessor.replace_image_token`` puts in place
        of one ``<image>`` for a ``rows`` x ``cols`` grid (``(0, 0)``: not split), tokenized once."""
        return self._layouts(int(rows), int(cols))

    def _max_side(self) -> int:
        """The most tiles a side of an image can get: the largest side the image processor resizes
        to (``size``'s longest edge or height / width, at most 4096 px) in tiles; 4096 px without
        ``do_resize`` (a larger image is refused, :meth:`image_tokens`)."""
        from transformers.models.smolvlm.image_processing_pil_smolvlm import MAX_IMAGE_SIZE

        size = self.image_processor.size
        longest = edge(size) or max(int(getattr(size, "height", 0) or 0), int(getattr(size, "width", 0) or 0))
        px = min(longest, MAX_IMAGE_SIZE) if self.image_processor.do_resize and longest else MAX_IMAGE_SIZE
        return max(1, math.ceil(px / self.tile))

    def _layout_table(self) -> dict[int, tuple[int, int]]:
        """Replacement length ``L`` -> ``(rows, cols)`` over every layout the image processor can
        give (no split, and every grid of up to :meth:`_max_side` tiles a side); :class:`ConfigError`
        when two layouts share an ``L`` (a count would not tell them apart)."""
        self.max_side = side = self._max_side()
        table: dict[int, tuple[int, int]] = {}
        for grid in [(0, 0)] + [(r, c) for r in range(1, side + 1) for c in range(1, side + 1)]:
            n = len(self.layout_ids(*grid))
            if n in table:
                raise ConfigError(f"{self.model_dir}: grids {table[n]} and {grid} both expand to {n} tokens; their "
                                  "counts cannot be told apart")
            table[n] = grid
        return table

    def layout_of(self, tokens: int) -> tuple[int, int]:
        """``(rows, cols)`` of the image whose replacement is ``tokens`` long (:meth:`media_tokens`).
        Raises ``ValueError`` when no layout has that length (a count of another model directory)."""
        grid = self._by_length.get(int(tokens))
        if grid is None:
            raise ValueError(f"no SmolVLM image layout of {self.model_dir} is {tokens} tokens long")
        return grid

    # ------------------------------------------------------------------ media rule
    def image_grid(self, width: int, height: int) -> tuple[int, int]:
        """``(rows, cols)`` of an image of ``width`` x ``height`` pixels (after EXIF orientation):
        :func:`image_grid` with the directory's image processor settings."""
        ip = self.image_processor
        return image_grid(height, width, do_resize=bool(ip.do_resize), size=ip.size,
                          do_image_splitting=bool(ip.do_image_splitting), tile=self.tile)

    def _image_tokens_uncached(self, width: int, height: int) -> int:
        rows, cols = self.image_grid(width, height)
        if max(rows, cols) > self.max_side:
            raise MediaRuleError(f"a {width}x{height} image is split into {rows}x{cols} tiles, more than the "
                                 f"{self.max_side} a side vlmpack counts for {self.name} (do_resize off)")
        return len(self.layout_ids(rows, cols))

    def image_tokens(self, width: int, height: int) -> int:
        """Tokens the ``<image>`` placeholder of a ``width`` x ``height`` image becomes: the length of
        its replacement (:meth:`layout_ids`). Raises :class:`MediaRuleError` for non-positive sizes
        and, without ``do_resize``, for an image of more than 4096 px a side."""
        if width <= 0 or height <= 0:
            raise MediaRuleError(f"invalid image size {width}x{height}")
        return self._image_tokens(int(width), int(height))

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """:meth:`image_tokens` of an image (``sample_images`` is ignored: every image is tiled alike);
        :class:`MediaRuleError` for a video (its frame prompt is not restated) and another kind."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (images only)")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """None: the image processor takes every positive size (the resize keeps at least 1 px a
        side); videos are refused when counted (:meth:`media_tokens`)."""
        return None

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold one ``<image>`` per image, no
        ``<fake_token_around_image>`` / ``<global-img>`` (the expansion adds those) and no video."""
        got = int(np.count_nonzero(ids == self.image_token_id))
        other = int(np.count_nonzero((ids == self.fake_image_token_id) | (ids == self.global_image_token_id)))
        if (got, other, n_videos) != (n_images, 0, 0):
            return (f"rendered text holds {got} {self.token_names['image_token']} and {other} image-frame tokens for "
                    f"{n_images} images and {n_videos} videos")
        return None

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """``len(ids) + sum(L_i - 1)``: the length of :meth:`expand`."""
        return int(len(ids) + sum(int(n) - 1 for n in media_tokens))

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """int32 ``input_ids`` with the i-th ``<image>`` replaced by :meth:`layout_ids` of the layout
        whose length is ``media_tokens[i]`` (:meth:`layout_of`). ``ValueError`` when placeholders and
        ``media_tokens`` differ in number or a count is no layout's."""
        ids = np.asarray(ids, dtype=np.int32)
        pads = np.flatnonzero(ids == self.image_token_id)
        if len(pads) != len(media_tokens):
            raise ValueError(f"{len(pads)} {self.token_names['image_token']} in the ids for {len(media_tokens)} images")
        parts, last = [], 0
        for p, n in zip(pads.tolist(), media_tokens):
            parts += [ids[last:p], self.layout_ids(*self.layout_of(n))]
            last = p + 1
        parts.append(ids[last:])
        return np.concatenate(parts)

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:meth:`expand`; :class:`MediaRuleError` when ``kinds`` names a video (never counted)."""
        if kinds is not None and "video" in kinds:
            raise MediaRuleError(f"{self.name} counts images only")
        return self.expand(ids, media_tokens)

    def video_layout(self, media: MediaSize) -> None:
        """Videos are not counted: :class:`MediaRuleError`."""
        raise MediaRuleError(f"{self.name} counts images only")

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: each assistant turn's content and its ``<end_of_utterance>``. A turn starts
        at the tokens of ``"Assistant:"`` (the template's role and colon) right after
        ``<|im_start|>`` or after ``<end_of_utterance>`` + ``"\\n"``; the content after them is
        trained on up to and including the next ``<end_of_utterance>`` (to the end of ``ids``
        without one). The ``"\\n"`` after ``<end_of_utterance>`` and everything else is not.
        Raises :class:`ConfigError` when ``"\\n"`` is not one token."""
        if self._label_ids is None:
            nl = self.tokenizer.encode("\n", add_special_tokens=False)
            if len(nl) != 1:
                raise ConfigError(f"{self.model_dir}: '\\n' is not one token; the label scan needs it")
            head = tuple(self.tokenizer.encode("Assistant:", add_special_tokens=False))
            self._label_ids = (head, int(nl[0]))
        head, nl = self._label_ids
        return turn_label_mask(ids, head=head, turn_start_id=self.im_start_id, end_id=self.end_of_utterance_id,
                               newline_id=nl)

    def rope_model_class(self) -> type:
        """SmolVLM has 1-D positions (``mrope`` False): :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: {self.name} uses 1-D positions; there is no mRoPE model class")

    def process_images(self, images: list, images_per_sample: Sequence[int] | None = None) -> ProcessedImages:
        """The image processor's own call on decoded PIL RGB images, as ``SmolVLMProcessor`` makes it
        for one text holding them (one nested list, ``return_row_col_info``): float32
        ``pixel_values`` ``[tiles, 3, M, M]`` (each image's tiles in order, its global image last),
        ``grids`` int64 ``[k, 3]`` = (tiles, rows, cols), ``tokens`` int64 ``[k]`` the ``<image>``
        tokens (features) of each image, ``tiles * image_seq_len``, and ``model_kwargs``
        ``{"pixel_attention_mask": bool [tiles, M, M]}``. ``images_per_sample`` is ignored (each
        image is processed alike). Raises ``ValueError`` when the processor's tiles disagree with
        its rows and columns."""
        import torch

        if not images:
            return ProcessedImages(None, np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), {})
        out = self.image_processor(images=[list(images)], return_row_col_info=True, return_tensors="pt")
        rows, cols = [int(r) for r in out["rows"][0]], [int(c) for c in out["cols"][0]]
        tiles = np.asarray([r * c + 1 for r, c in zip(rows, cols)], dtype=np.int64)
        pixels = out["pixel_values"][0].to(torch.float32)
        if len(pixels) != int(tiles.sum()):
            raise ValueError(f"the image processor gave {len(pixels)} tiles for {int(tiles.sum())} in its grids")
        grids = np.stack([tiles, np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)], axis=1)
        mask = out["pixel_attention_mask"][0].to(torch.bool) if "pixel_attention_mask" in out else \
            torch.ones((len(pixels), *pixels.shape[-2:]), dtype=torch.bool)
        return ProcessedImages(pixels, grids, tiles * self.image_seq_len, {"pixel_attention_mask": mask})

    def process_sample(self, messages: Sequence[dict], images: list, special_tokens: str | None = None,
                       tools: Sequence[dict] | None = None) -> tuple[np.ndarray, dict]:
        """One sample for the collator (``vlmpack.train.processor_encode``): ``(input_ids int64
        [n], tensors)`` with the ids of :meth:`encode` for the layouts the image processor gave
        (``special_tokens="split"`` as :meth:`token_ids`) and the tensors of :meth:`process_images`
        (``pixel_values``, ``pixel_attention_mask``; none without images). Raises
        :class:`PackMismatchError` when an image's layout differs from its header's
        (:meth:`image_grid`: the pixels decode to another size than the one counted)."""
        proc = self.process_images(list(images))
        tokens = []
        for im, (_, r, c) in zip(images, proc.grids.tolist()):
            if (r, c) != self.image_grid(*im.size):
                raise PackMismatchError(f"a {im.size[0]}x{im.size[1]} image is split into {r}x{c} tiles by the image "
                                        f"processor but {self.image_grid(*im.size)} by its size")
            tokens.append(len(self.layout_ids(r, c)))
        ids = self.encode(messages, tokens, special_tokens, tools).astype(np.int64)
        tensors = {"pixel_values": proc.pixel_values, **proc.model_kwargs} if images else {}
        return ids, tensors

    def batch_image_inputs(self, parts: Sequence[ProcessedImages]) -> dict:
        """``pixel_values`` float32 ``[1, tiles, 3, M, M]`` and ``pixel_attention_mask`` bool
        ``[1, tiles, M, M]``: every tile of the packs in order as one row of images (what
        ``SmolVLMForConditionalGeneration.forward`` takes; see the module docstring)."""
        return {"pixel_values": cat_rows([p.pixel_values for p in parts])[None],
                "pixel_attention_mask": cat_rows([p.model_kwargs["pixel_attention_mask"] for p in parts])[None]}

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """SmolVLM videos are not supported: :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: the {self.name} family trains on images only")

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """SmolVLM videos are not supported: :class:`ConfigError`."""
        raise ConfigError(f"{self.model_dir}: the {self.name} family trains on images only")

    def placeholder(self) -> tuple[np.ndarray, list]:
        """The replacement ids of a black ``M`` x 2 px strip (the fewest tiles a split image gets:
        one row) and the strip."""
        from PIL import Image

        w, h = self.tile, 2
        ids = self.layout_ids(*self.image_grid(w, h)).astype(np.int64)
        return ids, [Image.new("RGB", (w, h))]
