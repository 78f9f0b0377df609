"""The Qwen2.5-Omni family (``model_type`` ``qwen2_5_omni``, the thinker's text): images by the
Qwen2-VL rule, audio by :mod:`vlmpack.models.qwen_omni_audio`; counting only.

What ``Qwen2_5OmniProcessor.__call__`` (transformers 5.24) does to the rendered conversation, and
what this family restates:

- each ``<|IMAGE|>`` of the text becomes ``image_grid_thw.prod() // merge_size**2`` copies
  (``replace_image_token``; the grid of ``Qwen2VLImageProcessor``: :meth:`Qwen2VLFamily.image_tokens`,
  the same ``preprocessor_config.json`` keys);
- each ``<|AUDIO|>`` becomes ``num_audio_tokens`` copies (``replace_audio_token``; the Whisper
  feature extractor's ``hop_length`` and ``chunk_length * sampling_rate`` of the same file:
  :func:`vlmpack.models.qwen_omni_audio.audio_tokens` from the audio header);
- the token strings and ids are the tokenizer's named tokens (``image_token``, ``audio_token``,
  ``video_token``, ``vision_bos_token``, ``vision_eos_token``: the processor reads them from the
  tokenizer, not from ``config.json``), the rest is the chat template (``<|vision_bos|><|IMAGE|>
  <|vision_eos|>`` per image, ``<|audio_bos|><|AUDIO|><|audio_eos|>`` per audio in the published one).

Videos are refused (``media_unsupported``): the processor's video path needs
``Qwen2VLVideoProcessor`` (torchvision) and, with ``load_audio_from_video``, the interleaving of
:func:`~vlmpack.models.qwen_omni_audio.interleaved_runs`, neither wired here. Training (collator,
mRoPE of the thinker with audio positions) is not built: :meth:`Qwen25OmniFamily.rope_model_class`
raises :class:`ConfigError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import MediaSize
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.qwen_omni_audio import audio_tokens

__all__ = ["Qwen25OmniFamily"]


class Qwen25OmniFamily(Qwen2VLFamily):
    """Qwen2.5-Omni: :class:`Qwen2VLFamily` with the Omni processor's token strings, an audio rule
    and no video (module docstring). Raises :class:`ConfigError` for a directory whose tokenizer
    lacks a named token or whose ``preprocessor_config.json`` lacks the feature extractor's
    ``hop_length`` / ``chunk_length`` / ``sampling_rate``."""

    name = "qwen2_5_omni"
    #: no named processor option (image / video settings of the Omni processor are not mapped)
    processor_options: dict = {}
    video_option_keys = ()

    def __init__(self, model_dir: str | Path):
        super().__init__(model_dir)
        tok = self.tokenizer
        ids = {}
        for attr in ("image_token", "audio_token", "video_token", "vision_bos_token", "vision_eos_token"):
            token = getattr(tok, attr, None)
            token_id = tok.convert_tokens_to_ids(token) if isinstance(token, str) else None
            if token_id is None or token_id == tok.unk_token_id:
                raise ConfigError(f"{model_dir}: the tokenizer names no {attr} (Qwen2_5OmniProcessor reads it)")
            ids[attr] = int(token_id)
        self.image_token_id, self.audio_token_id, self.video_token_id = (
            ids["image_token"], ids["audio_token"], ids["video_token"])
        self.vision_start_token_id, self.vision_end_token_id = ids["vision_bos_token"], ids["vision_eos_token"]
        fe = json.loads((Path(model_dir) / "preprocessor_config.json").read_text())
        try:
            self.hop_length = int(fe["hop_length"])
            self.n_samples = int(fe["chunk_length"]) * int(fe["sampling_rate"])  # WhisperFeatureExtractor.__init__
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{model_dir}: preprocessor_config.json has no hop_length / chunk_length / "
                              "sampling_rate of the Whisper feature extractor (audio token counts)") from None

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """``<|IMAGE|>`` copies of an image (:meth:`Qwen2VLFamily.image_tokens`), ``<|AUDIO|>``
        copies of an audio item from its header (``frames`` sample frames at ``fps`` Hz:
        :func:`~vlmpack.models.qwen_omni_audio.audio_tokens`); ``sample_images`` is ignored.
        Raises :class:`MediaRuleError` for a video, another kind and what the rules refuse."""
        if media.kind == "audio":
            return audio_tokens(media.frames, int(media.fps or 0), hop_length=self.hop_length,
                                n_samples=self.n_samples)
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (images and "
                                 "audio only: its video processor needs torchvision)")
        return self.image_tokens(media.width, media.height)

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int, *, n_audios: int = 0) -> str | None:
        """A one-line problem unless the rendered ids hold one ``<|IMAGE|>`` and one
        ``<|vision_bos|>`` per image, one ``<|AUDIO|>`` per audio item and one ``<|VIDEO|>`` per
        video (none reach here: :meth:`media_tokens` refuses them), else None."""
        got = [int(np.count_nonzero(ids == t)) for t in (self.image_token_id, self.vision_start_token_id,
                                                         self.audio_token_id, self.video_token_id)]
        if got != [n_images, n_images, n_audios, n_videos]:
            return (f"rendered text holds {got[0]} <|IMAGE|>, {got[1]} <|vision_bos|>, {got[2]} <|AUDIO|>, {got[3]} "
                    f"<|VIDEO|> for {n_images} images, {n_audios} audio items and {n_videos} videos")
        return None

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """``input_ids`` with the i-th ``<|IMAGE|>`` / ``<|AUDIO|>`` repeated ``media_tokens[i]``
        times (media in order of appearance), as the processor's replacements do. int32
        ``[t + sum(media_tokens) - len(media_tokens)]``; ``ValueError`` when the counts disagree."""
        ids = np.asarray(ids, dtype=np.int32)
        reps = np.ones(len(ids), dtype=np.int64)
        pads = np.flatnonzero((ids == self.image_token_id) | (ids == self.audio_token_id))
        if len(pads) != len(media_tokens):
            raise ValueError(f"{len(pads)} media pads in the ids for {len(media_tokens)} media items")
        reps[pads] = np.asarray(media_tokens, dtype=np.int64)
        return np.repeat(ids, reps)

    def rope_model_class(self) -> type:
        """Not built: the thinker's mRoPE with audio positions is not restated (module docstring)."""
        raise ConfigError(f"{self.model_dir}: training {self.name} (collator, mRoPE with audio) is not supported; "
                          "vlmpack counts and packs it only")
