"""Qwen3-VL (``model_type`` ``qwen3_vl``, and the MoE ``qwen3_vl_moe``): :class:`Qwen3VLFamily`.

Qwen3-VL keeps Qwen2-VL's processing of images and text, so :class:`Qwen3VLFamily` is
:class:`vlmpack.models.qwen2_vl.Qwen2VLFamily` with the Qwen3-VL model class; what differs lives in
the model directory and is read from it:

- image rule: ``Qwen3VLProcessor`` uses transformers' ``Qwen2VLImageProcessor`` (``smart_resize``,
  aspect ratio <= 200), here with ``patch_size`` 16, ``merge_size`` 2 and ``size`` =
  ``{shortest_edge: 65536, longest_edge: 16777216}`` from ``preprocessor_config.json``; image
  tokens = ``get_number_of_image_patches(h, w) // merge_size**2``, one ``<|image_pad|>`` expanded
  to that many copies (``Qwen3VLProcessor.replace_image_token``);
- chat template: Qwen3-VL's own (no default system turn), rendered by the tokenizer;
- mRoPE: ``Qwen3VLModel.get_rope_index`` (``Qwen3VLMoeModel`` for ``qwen3_vl_moe``); for images it
  is Qwen2-VL's rule (text advances 1; an image of grid (t, h, w) takes the merged grid and
  advances ``max(h, w) / merge``), so :func:`vlmpack.train.rope.mrope_positions_numpy` holds
  (checked against the class at start when ``rope_impl="numpy"``);
- videos (``Qwen3VLVideoProcessor``, settings of ``video_preprocessor_config.json``): frames are
  sampled at ``fps`` (default 2) as ``int(total / video_fps * fps)`` clamped to
  ``[min_frames, max_frames]`` and ``total``, at ``np.linspace(0, total - 1, n).round()``; the
  frames are resized together by Qwen3-VL's own ``smart_resize`` (``t * h * w`` within ``size``);
  ``Qwen3VLProcessor`` then replaces the rendered ``<|vision_start|><|video_pad|><|vision_end|>``
  with, per temporal group ``i``, the text ``"<{t_i:.1f} seconds>"`` (``t_i`` the mean time of the
  group's first and last frame, ``_calculate_timestamps``) followed by
  ``<|vision_start|>`` + ``h * w // merge**2`` pads + ``<|vision_end|>``. :meth:`Qwen3VLFamily.video_tokens`
  counts that whole replacement minus the two vision tokens already in the rendered ids; the first
  timestamp's ``"<"`` can merge with the text before the video into one pre-token (after a space or
  punctuation), which :meth:`Qwen3VLFamily.num_tokens` corrects from the ids. ``input_ids`` with
  the timestamp text: :meth:`Qwen3VLFamily.expand_videos` with each video's
  :meth:`Qwen3VLFamily.video_layout` (:meth:`Qwen3VLFamily.expand` alone refuses videos).

Qwen3.5 (``qwen3_5``, ``qwen3_5_moe``): :class:`Qwen3_5Family`. transformers maps both to
``Qwen3VLProcessor`` and ``Qwen2VLImageProcessor`` (``processing_auto`` / ``image_processing_auto``)
and ``Qwen3_5Model.get_rope_index`` places image tokens by Qwen3-VL's rule, so counting, expansion,
labels and mRoPE are Qwen3-VL's with the directory's own tokenizer (``Qwen3_5Tokenizer``, 248k
vocabulary) and chat template. Its text model interleaves full-attention layers with Gated
DeltaNet (linear-attention) layers; those respect sample boundaries only through the varlen
kernels of flash-linear-attention (``cu_seq_lens_q``): transformers' torch fallback
(``torch_chunk_gated_delta_rule`` and the causal conv1d before it) ignores them and carries state
from one sample into the next, so ``PackCollator`` refuses such a model directory without a
``flash_attention_*`` backend and flash-linear-attention, unless ``allow_linear_attention_leak``
is set (see :meth:`Qwen3_5Family.linear_attention_layers`).

Source: transformers 5.x ``models/qwen3_vl/processing_qwen3_vl.py`` and ``modeling_qwen3_vl.py``,
``models/qwen3_5/modeling_qwen3_5.py`` and ``models/qwen3_5_moe/modeling_qwen3_5_moe.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vlmpack.errors import MediaRuleError
from vlmpack.models.base import MediaSize
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.qwen_video_rule import VIDEO_PIXEL_KEYS
from vlmpack.models.video_config import video_size_edges


class Qwen3VLFamily(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one Qwen3-VL model directory (see the
    module docstring; everything else as :class:`Qwen2VLFamily`)."""

    name = "qwen3_vl"
    video_rule = "qwen3"
    #: transformers' ``Qwen3VLVideoProcessor`` class defaults (``video_processing_qwen3_vl.py``).
    video_defaults = {"size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768}, "patch_size": 16,
                      "temporal_patch_size": 2, "merge_size": 2, "min_frames": 4, "max_frames": 768,
                      "do_sample_frames": True, "fps": 2, "num_frames": None,
                      "cap_pixels_per_frame": None, "max_video_tokens": 768}
    #: :attr:`Qwen2VLFamily.processor_options` but for videos: ``size.longest_edge`` bounds a whole
    #: video (``t * h * w`` pixels, ``Qwen3VLVideoProcessor``'s ``smart_resize``), not one frame
    processor_options = {**{k: v for k, v in Qwen2VLFamily.processor_options.items() if k != "video_max_pixels"},
                         "total_pixels": (("video", "size.longest_edge"),)}
    video_option_keys = (*video_defaults, *VIDEO_PIXEL_KEYS)

    def video_indices(self, frames: int, fps: float | None) -> np.ndarray:
        """int ``[n]``: the frame indices ``Qwen3VLVideoProcessor.sample_frames`` keeps (all frames
        without ``do_sample_frames``; a video without a frame rate counts as 24 fps, as there)."""
        c = self.video_config
        if not c["do_sample_frames"]:
            return np.arange(frames)
        num, rate = c["num_frames"], c["fps"]
        vfps = fps if fps is not None else 24
        if num is None and rate is not None:
            num = min(max(int(frames / vfps * rate), c["min_frames"]), c["max_frames"], frames)
        if num is None:
            num = min(max(frames, c["min_frames"]), c["max_frames"])
        return np.linspace(0, frames - 1, num).round().astype(int)

    def video_frames(self, frames: int, fps: float | None) -> int:
        """Frames kept of a ``frames``-frame video at ``fps``: ``len(video_indices(...))``."""
        return len(self.video_indices(frames, fps))

    def video_grid(self, media: MediaSize) -> tuple[int, int, int]:
        """``(t, h, w)`` patches: the kept frames padded to ``temporal_patch_size``, resized by
        Qwen3-VL's ``smart_resize(num_frames, h, w)`` (``cap_pixels_per_frame``: the per-frame cap of
        ``Qwen3VLVideoProcessor.resize``). Raises :class:`MediaRuleError` (fewer kept frames than
        ``temporal_patch_size``, aspect ratio > 200, no frames)."""
        if not media.frames or media.frames <= 0 or media.width <= 0 or media.height <= 0:
            raise MediaRuleError(f"video has no frames or size ({media.frames} frames, {media.width}x{media.height})")
        c = self.video_config
        n = self.video_frames(int(media.frames), media.fps)
        tp, patch, merge = int(c["temporal_patch_size"]), int(c["patch_size"]), int(c["merge_size"])
        factor = patch * merge
        lo, hi = video_size_edges(c["size"])
        if c["cap_pixels_per_frame"]:
            per_frame = max(min(c["max_video_tokens"] * factor * factor, hi // n), int(lo * 1.05))
            hi = per_frame * n
        try:
            h, w = _smart_resize3(n, int(media.height), int(media.width), tp, factor, lo, hi)
        except ValueError as e:
            raise MediaRuleError(str(e)) from None
        return -(-n // tp), h // patch, w // patch

    def video_timestamps(self, media: MediaSize) -> list[str]:
        """The timestamp text of each temporal group, ``"<{t:.1f} seconds>"``
        (``Qwen3VLProcessor._calculate_timestamps`` over the kept indices, padded by repeating the
        last to a multiple of ``merge_size``, at the video's fps, 24 when unknown)."""
        c = self.video_config
        merge = int(c["merge_size"])
        idx = self.video_indices(int(media.frames), media.fps).tolist()
        idx += [idx[-1]] * (-len(idx) % merge)
        fps = media.fps if media.fps is not None else 24
        ts = [i / fps for i in idx]
        return [f"<{(ts[i] + ts[i + merge - 1]) / 2:.1f} seconds>" for i in range(0, len(ts), merge)]

    def video_tokens(self, media: MediaSize) -> int:
        """Tokens a video adds beyond its rendered ``<|video_pad|>`` (so that
        :meth:`num_tokens` stays ``len(ids) + sum(n_i - 1)``): per temporal group its timestamp
        text (tokenized alone), ``<|vision_start|>``, ``h * w // merge**2`` pads and
        ``<|vision_end|>``, minus the rendered start/end tokens. Raises :class:`MediaRuleError`."""
        t, h, w = self.video_grid(media)
        stamps = self.video_timestamps(media)
        if len(stamps) < t:
            raise MediaRuleError(f"{len(stamps)} timestamps for {t} temporal groups")
        per = h * w // int(self.video_config["merge_size"]) ** 2
        return sum(self._text_len(s) for s in stamps[:t]) + t * (per + 2) - 2

    def _text_len(self, text: str) -> int:
        cache = self.__dict__.setdefault("_text_lens", {})
        n = cache.get(text)
        if n is None:
            n = cache[text] = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return n

    def num_tokens(self, ids: np.ndarray, media_tokens: Sequence[int]) -> int:
        """``len(ids) + sum(n_i - 1)`` plus, for each video, what its first timestamp's ``"<"``
        changes when it joins the text right before the video into one pre-token (Qwen's
        pre-tokenizer: a space or punctuation run before ``"<"``): ``len(tok(s + "<")) - len(tok(s))
        - len(tok("<"))`` with ``s`` the text between the previous added token and the video."""
        n = super().num_tokens(ids, media_tokens)
        ids = np.asarray(ids)
        pads = np.flatnonzero(ids == self.video_token_id)
        if not len(pads):
            return n
        added = getattr(self, "_added_ids", None)
        if added is None:
            added = self._added_ids = np.array(sorted(self.tokenizer.added_tokens_decoder), dtype=np.int64)
        for p in pads:
            start = p - 1  # the rendered <|vision_start|>
            seg_from = start
            while seg_from > 0 and not np.isin(ids[seg_from - 1], added):
                seg_from -= 1
            if seg_from == start:
                continue
            text = self.tokenizer.decode(ids[seg_from:start].tolist(), clean_up_tokenization_spaces=False)
            last = text[-1:]
            if last and (last == " " or not (last.isalnum() or last.isspace())):
                n += self._text_len(text + "<") - self._text_len(text) - self._text_len("<")
        return n

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """As :meth:`Qwen2VLFamily.expand` for images; raises :class:`MediaRuleError` when ``ids``
        hold a video (its timestamp text is not built into ``input_ids`` yet)."""
        if np.any(np.asarray(ids) == self.video_token_id):
            raise MediaRuleError("Qwen3-VL video input_ids (timestamp text) are not built yet")
        return super().expand(ids, media_tokens)

    def video_layout(self, media: MediaSize) -> tuple[list[str], int]:
        """``(timestamp text per temporal group, pads per group)`` of one video from its header:
        what :meth:`expand_videos` needs (:meth:`video_timestamps` of the ``t`` groups of
        :meth:`video_grid`, ``h * w // merge**2``). Raises :class:`MediaRuleError`."""
        t, h, w = self.video_grid(media)
        merge = int(self.video_config["merge_size"])
        return self.video_timestamps(media)[:t], h * w // merge ** 2

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """``input_ids`` with the videos' timestamp text, as ``Qwen3VLProcessor`` builds them:
        :func:`vlmpack.models.qwen_video.expand_qwen3_videos` (``layouts`` from
        :meth:`process_videos`)."""
        from vlmpack.models.qwen_video import expand_qwen3_videos

        return expand_qwen3_videos(self, ids, media_tokens, layouts, special_tokens)

    def rope_model_class(self) -> type:
        """transformers' ``Qwen3VLModel`` (``Qwen3VLMoeModel`` for ``qwen3_vl_moe``)."""
        if self.model_type == "qwen3_vl_moe":
            from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeModel
            return Qwen3VLMoeModel
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel
        return Qwen3VLModel



class Qwen3_5Family(Qwen3VLFamily):
    """Qwen3.5 (``qwen3_5``, ``qwen3_5_moe``): :class:`Qwen3VLFamily`'s rules (the same processor
    classes) with the Qwen3.5 model classes for mRoPE; see the module docstring for the Gated
    DeltaNet layers."""

    name = "qwen3_5"

    def linear_attention_layers(self) -> list[int]:
        """Indices of the text model's Gated DeltaNet layers: ``layer_types`` of ``config.json``'s
        ``text_config`` as transformers' ``Qwen3_5TextConfig`` / ``Qwen3_5MoeTextConfig`` fills
        it (a missing list: every layer but each ``full_attention_interval``-th)."""
        import json
        from pathlib import Path

        text = dict(json.loads((Path(self.model_dir) / "config.json").read_text()).get("text_config") or {})
        if self.model_type == "qwen3_5_moe":
            from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig as Cfg
        else:
            from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig as Cfg
        text.pop("model_type", None)
        return [i for i, t in enumerate(Cfg(**text).layer_types) if t == "linear_attention"]

    def rope_model_class(self) -> type:
        """transformers' ``Qwen3_5Model`` (``Qwen3_5MoeModel`` for ``qwen3_5_moe``)."""
        if self.model_type == "qwen3_5_moe":
            from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeModel
            return Qwen3_5MoeModel
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Model
        return Qwen3_5Model


def _smart_resize3(num_frames: int, height: int, width: int, temporal_factor: int, factor: int,
                   min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' ``video_processing_qwen3_vl.smart_resize`` (restated; the test runs the
    original against it): ``t * h * w`` pixels within ``[min_pixels, max_pixels]``."""
    if num_frames < temporal_factor:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > 200:
        ratio = max(height, width) / min(height, width)
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {ratio}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar
