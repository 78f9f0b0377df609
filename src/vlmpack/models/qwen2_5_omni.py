"""The Qwen2.5-Omni family (``model_type`` ``qwen2_5_omni``, the thinker's text): images by the
Qwen2-VL rule, audio by :mod:`vlmpack.models.qwen_omni_audio`; counting, and the collator's audio
features and mRoPE positions.

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

Videos (:mod:`vlmpack.models.qwen_omni_video`): ``<|VIDEO|>`` becomes the Qwen2-VL video rule's
``t * h * w // merge_size**2`` copies (the processor's own video size, not the directory's), or,
with the processor kwarg ``use_audio_in_video``, ``<|audio_bos|>`` + video and sound-track runs
interleaved by time + ``<|audio_eos|>``, the track counted from its header like an audio item (a
video without one is refused). Training on videos: the Qwen2.5-VL pixel path at the Omni size
(:meth:`Qwen25OmniFamily.process_videos`); with ``use_audio_in_video`` each video's sound track is
an audio item too, at the video's place (:mod:`vlmpack.train.kind_media`), and the positions come
from ``get_rope_index(..., use_audio_in_video=True)``.

Training side: the collator's audio inputs are the processor's (:meth:`Qwen25OmniFamily.process_media`:
``WhisperFeatureExtractor.__call__`` on each sample's waveforms, decoded at 16 kHz, as
``Qwen2_5OmniProcessor._process_audio`` calls it: ``input_features`` and ``feature_attention_mask``;
the tokens from the mask by ``_get_feat_extract_output_lengths``), the images the Qwen2-VL ones.
Positions: the thinker's own ``get_rope_index``
(``Qwen2_5OmniPreTrainedModelForConditionalGeneration``, whose inputs are not those of the Qwen-VL
models: :class:`OmniRopeIndexer`, the collator's indexer through :meth:`Qwen25OmniFamily.mrope_indexer`)
once per sample, as ``Qwen2_5OmniThinkerModel.compute_3d_position_ids`` calls it for the sample alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.media.audio import SAMPLING_RATE
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedMedia, ProcessedVideos, cat_rows
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.qwen_omni_audio import audio_tokens, encoder_tokens
from vlmpack.models.qwen_omni_video import (
    OMNI_VIDEO_SIZE,
    PROCESSOR_FPS,
    PROCESSOR_KEYS,
    expand_omni,
    omni_video_settings,
    sound_track_tokens,
)
from vlmpack.models.video_config import video_settings

#: The model inputs of audio items, as ``Qwen2_5OmniProcessor`` names them (the feature extractor's
#: ``attention_mask`` renamed ``feature_attention_mask`` by its ``_process_audio``).
AUDIO_KEYS = ("input_features", "feature_attention_mask")

__all__ = ["OmniRopeIndexer", "Qwen25OmniFamily"]


class Qwen25OmniFamily(Qwen2VLFamily):
    """Qwen2.5-Omni: :class:`Qwen2VLFamily` with the Omni processor's token strings, an audio rule
    and its video rule (module docstring). Raises :class:`ConfigError` for a directory whose tokenizer
    lacks a named token, whose ``preprocessor_config.json`` lacks the feature extractor's
    ``hop_length`` / ``chunk_length`` / ``sampling_rate``, or whose ``processor_config.json`` holds
    a bad ``use_audio_in_video`` / ``seconds_per_chunk`` / ``position_id_per_seconds``.

    Attributes beyond :class:`Qwen2VLFamily`'s: ``audio_token_id``, ``audio_start_token_id``,
    ``audio_end_token_id``, ``hop_length``, ``n_samples``, ``omni_video``
    (:func:`~vlmpack.models.qwen_omni_video.omni_video_settings`) and ``audio_in_video``."""

    name = "qwen2_5_omni"
    #: no named processor option (image / video settings of the Omni processor are not mapped)
    processor_options: dict = {}
    video_option_keys = ()
    #: the processor call kwargs ``--processor-kwargs`` may set (:mod:`vlmpack.models.qwen_omni_video`)
    processor_option_keys = tuple(PROCESSOR_KEYS)
    #: ``processor_config.json`` holds them (``use_audio_in_video`` changes video counts)
    counting_files = (*COUNTING_FILES, "processor_config.json")

    def __init__(self, model_dir: str | Path):
        super().__init__(model_dir)
        tok = self.tokenizer
        ids = {}
        for attr in ("image_token", "audio_token", "video_token", "vision_bos_token", "vision_eos_token",
                     "audio_bos_token", "audio_eos_token"):
            token = getattr(tok, attr, None)
            token_id = tok.convert_tokens_to_ids(token) if isinstance(token, str) else None
            if token_id is None or token_id == tok.unk_token_id:
                raise ConfigError(f"{model_dir}: the tokenizer names no {attr} (Qwen2_5OmniProcessor reads it)")
            ids[attr] = int(token_id)
        self.image_token_id, self.audio_token_id, self.video_token_id = (
            ids["image_token"], ids["audio_token"], ids["video_token"])
        self.vision_start_token_id, self.vision_end_token_id = ids["vision_bos_token"], ids["vision_eos_token"]
        self.audio_start_token_id, self.audio_end_token_id = ids["audio_bos_token"], ids["audio_eos_token"]
        self.omni_video = omni_video_settings(model_dir)
        self.audio_in_video = bool(self.omni_video["audio_in_video"])
        fe = json.loads((Path(model_dir) / "preprocessor_config.json").read_text())
        try:
            self.hop_length = int(fe["hop_length"])
            self.n_samples = int(fe["chunk_length"]) * int(fe["sampling_rate"])  # WhisperFeatureExtractor.__init__
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{model_dir}: preprocessor_config.json has no hop_length / chunk_length / "
                              "sampling_rate of the Whisper feature extractor (audio token counts)") from None

    @property
    def video_config(self) -> dict:
        """The directory's video processor settings (:class:`QwenVideoRule`) with ``size`` =
        :data:`~vlmpack.models.qwen_omni_video.OMNI_VIDEO_SIZE`, what the processor's call passes."""
        cfg = getattr(self, "_video_config", None)
        if cfg is None:
            cfg = video_settings(Path(self.model_dir), self.video_defaults)
            cfg["size"] = dict(OMNI_VIDEO_SIZE)
            self._video_config = cfg
        return cfg

    @property
    def second_per_grid(self) -> float:
        """``temporal_patch_size / 2.0``: the processor's ``video_second_per_grid``."""
        return int(self.video_config["temporal_patch_size"]) / PROCESSOR_FPS

    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """``<|IMAGE|>`` copies of an image (:meth:`Qwen2VLFamily.image_tokens`), ``<|AUDIO|>``
        copies of an audio item from its header (``frames`` sample frames at ``fps`` Hz:
        :func:`~vlmpack.models.qwen_omni_audio.audio_tokens`), the tokens a video's ``<|VIDEO|>``
        becomes (:meth:`video_tokens`; with ``use_audio_in_video`` ``2 +`` those ``+`` its sound
        track's, :func:`~vlmpack.models.qwen_omni_video.sound_track_tokens`: ``media`` must then
        name its file, ``path``); ``sample_images`` is ignored. Raises :class:`MediaRuleError`
        for another kind and what the rules refuse."""
        if media.kind == "audio":
            return audio_tokens(media.frames, int(media.fps or 0), hop_length=self.hop_length,
                                n_samples=self.n_samples)
        if media.kind == "video":
            n = self.video_tokens(media)
            if not self.audio_in_video:
                return n
            return 2 + n + sound_track_tokens(media, hop_length=self.hop_length, n_samples=self.n_samples)
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name}")
        return self.image_tokens(media.width, media.height)

    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int, *, n_audios: int = 0) -> str | None:
        """A one-line problem unless the rendered ids hold one ``<|IMAGE|>`` per image, one
        ``<|vision_bos|>`` per image and video, one ``<|AUDIO|>`` per audio item and one
        ``<|VIDEO|>`` per video, else None."""
        got = [int(np.count_nonzero(ids == t)) for t in (self.image_token_id, self.vision_start_token_id,
                                                         self.audio_token_id, self.video_token_id)]
        if got != [n_images, n_images + n_videos, n_audios, n_videos]:
            return (f"rendered text holds {got[0]} <|IMAGE|>, {got[1]} <|vision_bos|>, {got[2]} <|AUDIO|>, {got[3]} "
                    f"<|VIDEO|> for {n_images} images, {n_audios} audio items and {n_videos} videos")
        return None

    def expand(self, ids: np.ndarray, media_tokens: Sequence[int]) -> np.ndarray:
        """``input_ids`` with the i-th ``<|IMAGE|>`` / ``<|AUDIO|>`` / ``<|VIDEO|>`` repeated
        ``media_tokens[i]`` times (media in order of appearance), as the processor's replacements
        do. int32 ``[t + sum(media_tokens) - len(media_tokens)]``; ``ValueError`` when the counts
        disagree, or for a video with ``use_audio_in_video`` (its layout needs the grid:
        :meth:`expand_videos`)."""
        return expand_omni(self, ids, media_tokens, None)

    def encode(self, messages: Sequence[dict], media_tokens: Sequence[int],
               special_tokens: str | None = None, tools: Sequence[dict] | None = None) -> np.ndarray:
        """:meth:`Qwen2VLFamily.encode`. Raises :class:`ConfigError` (one line) for a sample with a
        video when ``use_audio_in_video`` is on: its interleaved runs need the video's grid, which
        the recorded counts do not give (:meth:`expand_videos` with :meth:`video_layout` does)."""
        ids = np.asarray(self.token_ids([messages], [special_tokens], [tools])[0], dtype=np.int32)
        if self.audio_in_video and np.any(ids == self.video_token_id):
            raise ConfigError(f"{self.model_dir}: with use_audio_in_video the input_ids of a video need its grid "
                              "(expand_videos with video_layout); encode() has only the recorded counts")
        return self.expand(ids, media_tokens)

    def video_layout(self, media: MediaSize) -> tuple[int, int, int] | None:
        """With ``use_audio_in_video``: the video's grid ``(t, h, w)`` (:meth:`video_grid`), which
        lays out its interleaved runs; None otherwise."""
        return self.video_grid(media) if self.audio_in_video else None

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """:func:`~vlmpack.models.qwen_omni_video.expand_omni` with the videos' ``layouts``
        (:meth:`video_layout`); ``special_tokens`` and ``kinds`` are not needed."""
        return expand_omni(self, ids, media_tokens, layouts)

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """The videos of one pack -> ``pixel_values_videos`` float32 ``[sum(t*h*w), C*tp*p*p]``,
        ``video_grid_thw`` int64 ``[k, 3]`` (:func:`vlmpack.models.qwen_video.process_qwen_videos`:
        the Qwen2-VL video processor's sampling and pixel pipeline on PyAV frames, at the Omni
        processor's size) and ``video_second_per_grid`` float32 ``[k]`` (:attr:`second_per_grid`,
        ``Qwen2_5OmniProcessor._process_videos``); with ``use_audio_in_video`` ``layouts`` = the grids
        (:meth:`video_layout`; the tracks: :func:`vlmpack.train.kind_media.with_sound_tracks`)."""
        import torch

        from vlmpack.models.qwen_video import process_qwen_videos

        out = process_qwen_videos(self, videos)
        if self.audio_in_video:  # the interleaved runs of expand_videos need each video's grid (video_layout)
            out.layouts = [tuple(int(x) for x in g) for g in np.asarray(out.grids).tolist()]
        out.model_kwargs["video_second_per_grid"] = torch.full((len(out.grids),), self.second_per_grid,
                                                               dtype=torch.float32)
        return out

    def batch_video_inputs(self, parts: Sequence[ProcessedVideos]) -> dict:
        """``pixel_values_videos``, ``video_grid_thw`` (:func:`vlmpack.models.qwen_video.batch_qwen_video_inputs`)
        and ``video_second_per_grid`` float32 ``[k]`` concatenated in order (what
        ``Qwen2_5OmniThinkerForConditionalGeneration.forward`` takes)."""
        import torch

        from vlmpack.models.qwen_video import batch_qwen_video_inputs

        out = batch_qwen_video_inputs(parts)
        out["video_second_per_grid"] = torch.cat([p.model_kwargs["video_second_per_grid"] for p in parts])
        return out

    def feature_extractor(self):
        """The directory's feature extractor as ``Qwen2_5OmniProcessor.from_pretrained`` builds it
        (``AutoFeatureExtractor.from_pretrained``: ``WhisperFeatureExtractor`` of
        ``preprocessor_config.json``), built once. Raises :class:`ConfigError` when it cannot be
        built or does not take 16 kHz (the rate the processor passes and the token rule assumes)."""
        fe = getattr(self, "_feature_extractor", None)
        if fe is None:
            from transformers import AutoFeatureExtractor

            try:
                fe = AutoFeatureExtractor.from_pretrained(str(self.model_dir))
            except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
                raise ConfigError(f"{self.model_dir}: the feature extractor cannot be built ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''})") from None
            if int(getattr(fe, "sampling_rate", 0)) != SAMPLING_RATE:
                raise ConfigError(f"{self.model_dir}: the feature extractor takes {fe.sampling_rate} Hz; "
                                  f"Qwen2_5OmniProcessor feeds it {SAMPLING_RATE} Hz")
            self._feature_extractor = fe
        return fe

    def process_media(self, kind: str, items: Sequence, items_per_sample: Sequence[int] | None = None
                      ) -> ProcessedMedia:
        """The audio items of one pack -> :class:`ProcessedMedia` as ``Qwen2_5OmniProcessor`` makes
        them for each sample alone: ``items`` float32 mono waveforms at 16 kHz
        (:func:`vlmpack.media.audio.decode_audio`, what the processor is fed), ``items_per_sample``
        how many of them each sample holds (sum ``len(items)``; None: one per sample). Per sample with
        audio, ``WhisperFeatureExtractor.__call__(waves, sampling_rate=16000, padding="max_length",
        return_attention_mask=True, return_tensors="pt")`` (``_process_audio``): every item cut /
        padded to ``n_samples`` (300 s), log-mel ``input_features`` float32 ``[k, feature_size,
        n_samples // hop_length]`` (per-item dynamic range: the extractor's batched max is per row)
        and ``feature_attention_mask`` int32 ``[k, n_samples // hop_length]``, concatenated in sample
        order; ``tokens`` int64 ``[k]`` = ``_get_feat_extract_output_lengths(mask.sum(-1))``
        (:func:`~vlmpack.models.qwen_omni_audio.encoder_tokens`). Raises :class:`ConfigError` for
        a kind other than audio or a feature extractor that cannot be built, ``ValueError`` when
        ``items_per_sample`` does not sum to ``len(items)``."""
        if kind != "audio":
            raise ConfigError(f"{self.model_dir}: {self.name} cannot train on {kind} items")
        fe = self.feature_extractor()
        counts = list(items_per_sample) if items_per_sample is not None else [1] * len(items)
        if sum(counts) != len(items):
            raise ValueError(f"items_per_sample sums to {sum(counts)} for {len(items)} audio items")
        feats, masks, start = [], [], 0
        for n in counts:
            if n:
                out = fe(list(items[start:start + n]), sampling_rate=SAMPLING_RATE, padding="max_length",
                         return_attention_mask=True, return_tensors="pt")
                feats.append(out["input_features"])
                masks.append(out["attention_mask"])
            start += n
        if not feats:
            return ProcessedMedia(kind, np.zeros(0, dtype=np.int64), {})
        mask = cat_rows(masks)
        tokens = np.array([encoder_tokens(int(x)) for x in mask.sum(-1).tolist()], dtype=np.int64)
        return ProcessedMedia(kind, tokens, dict(zip(AUDIO_KEYS, (cat_rows(feats), mask))))

    def batch_media_inputs(self, kind: str, parts: Sequence[ProcessedMedia]) -> dict:
        """The thinker's audio keyword arguments for a batch: ``input_features`` and
        ``feature_attention_mask`` of its packs' :meth:`process_media` outputs concatenated on dim
        0, in order (``Qwen2_5OmniThinkerForConditionalGeneration.forward`` takes them so)."""
        parts = [p for p in parts if p.model_kwargs]
        return {key: cat_rows([p.model_kwargs[key] for p in parts]) for key in AUDIO_KEYS} if parts else {}

    def rope_model_class(self) -> type:
        """transformers' ``Qwen2_5OmniThinkerForConditionalGeneration``: its ``get_rope_index``
        defines the positions; its inputs differ from the Qwen-VL models' (no
        ``mm_token_type_ids``, ``audio_seqlens``), so the collator takes :meth:`mrope_indexer`."""
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration

        return Qwen2_5OmniThinkerForConditionalGeneration

    def mrope_indexer(self, impl: str = "transformers") -> OmniRopeIndexer:
        """The collator's per-sample mRoPE (:class:`OmniRopeIndexer`); ``impl`` must be
        ``"transformers"`` (no vectorised rule is restated): :class:`ConfigError` otherwise."""
        if impl != "transformers":
            raise ConfigError(f"rope_impl {impl!r} is not available for {self.name}; use rope_impl='transformers'")
        return OmniRopeIndexer(self)


class OmniRopeIndexer:
    """Per-sample mRoPE positions of Qwen2.5-Omni packs, from transformers' own
    ``Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index`` (the thinker's), called once
    per sample on a light stand-in that holds the directory's ``thinker_config`` (no weights), with
    what ``Qwen2_5OmniThinkerModel.compute_3d_position_ids`` passes for the sample alone: its ids, an
    all-ones attention mask, its image grids and video grids (None without: the method then gives
    text positions to the whole sample), ``use_audio_in_video`` (the family's ``audio_in_video``),
    ``audio_seqlens`` and ``second_per_grids``.
    ``audio_seqlens``: the sample's rows of ``feature_attention_mask.sum(-1)`` (the forward's
    ``audio_feature_lengths``; audio items and sound tracks in content order: :meth:`pack_positions`);
    without audio rows each run of ``n`` ``<|AUDIO|>`` in the ids is given ``4 * n - 1`` frames (the
    method reads them only through ``((s - 1) // 2 + 1 - 2) // 2 + 1`` = ``n``).
    The token ids the method reads from its config (``image_token_id``, ``video_token_id``,
    ``audio_token_id``, ``vision_start_token_id``, ``audio_start_token_id``) are set to the
    tokenizer's named tokens, the ids ``Qwen2_5OmniProcessor`` writes into the text (a published
    ``thinker_config`` names the same ids; the model could not place its features otherwise).
    Raises :class:`ConfigError` for a directory without a thinker vision config."""

    def __init__(self, family: Qwen25OmniFamily):
        from transformers import AutoConfig
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            Qwen2_5OmniPreTrainedModelForConditionalGeneration as Omni,
        )

        cfg = AutoConfig.from_pretrained(str(family.model_dir))
        thinker = getattr(cfg, "thinker_config", cfg)
        try:
            merge = int(thinker.vision_config.spatial_merge_size)
        except AttributeError:
            raise ConfigError(f"{family.model_dir}: config.json has no thinker vision_config.spatial_merge_size "
                              "(Qwen2.5-Omni's mRoPE reads it)") from None
        shim = type("_OmniRopeShim", (), {name: getattr(Omni, name) for name in (
            "get_rope_index", "get_llm_pos_ids_for_vision", "get_chunked_index")})()
        thinker = copy.deepcopy(thinker)
        for name, value in (("image_token_id", family.image_token_id), ("video_token_id", family.video_token_id),
                            ("audio_token_id", family.audio_token_id),
                            ("vision_start_token_id", family.vision_start_token_id),
                            ("audio_start_token_id", family.audio_start_token_id)):
            setattr(thinker, name, int(value))
        shim.config, shim.spatial_merge_size = thinker, merge
        self._shim = shim
        self.audio_token_id = int(family.audio_token_id)
        self.second_per_grid = float(family.second_per_grid)
        self.use_audio_in_video = bool(family.audio_in_video)

    reads_media = True  # the collator passes a pack's processed media to :meth:`pack_positions`

    def sample_positions(self, ids: np.ndarray, grids: np.ndarray, video_grids: np.ndarray | None = None,
                         audio_seqlens: Sequence[int] | None = None) -> np.ndarray:
        """int64 ``[3, n]`` positions of one sample: ``ids`` int ``[n]``, ``grids`` int ``[k, 3]``
        its images' (t, h, w) in order, ``video_grids`` int ``[v, 3]`` its videos' (each with
        ``second_per_grids`` = the family's :attr:`Qwen25OmniFamily.second_per_grid`, what the
        processor gives), ``audio_seqlens`` its audio items' feature frames (class docstring; None:
        from the ids). ``ValueError`` when the method fails or does not cover the ids."""
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        if audio_seqlens is None:
            at = np.flatnonzero(ids == self.audio_token_id)
            runs = np.diff(np.concatenate(([0], np.flatnonzero(np.diff(at) != 1) + 1, [len(at)]))) if len(at) else []
            audio_seqlens = [4 * int(n) - 1 for n in runs]
        t_ids = torch.from_numpy(ids)[None]
        kw: dict[str, Any] = {"audio_seqlens": torch.tensor([int(n) for n in audio_seqlens], dtype=torch.long)}
        grid_t = torch.as_tensor(np.asarray(grids, dtype=np.int64)).reshape(-1, 3) if len(grids) else None
        vgrid_t = None
        if video_grids is not None and len(video_grids):
            vgrid_t = torch.as_tensor(np.asarray(video_grids, dtype=np.int64)).reshape(-1, 3)
            kw["second_per_grids"] = torch.full((len(vgrid_t),), self.second_per_grid, dtype=torch.float32)
        try:
            pos, _ = self._shim.get_rope_index(t_ids, grid_t, vgrid_t, torch.ones_like(t_ids), self.use_audio_in_video,
                                               **kw)
        except (IndexError, RuntimeError, ValueError) as e:
            raise ValueError(f"the thinker's get_rope_index fails on the sample ({type(e).__name__}: {e})") from None
        if pos.shape != (3, 1, len(ids)):
            raise ValueError(f"the thinker's get_rope_index gives {tuple(pos.shape)} positions for {len(ids)} ids")
        return pos[:, 0].numpy()

    def pack_positions(self, ids: np.ndarray, lengths: Sequence[int], grids: Sequence[np.ndarray],
                       video_grids: Sequence | None = None, video_seconds: Sequence | None = None, *,
                       media: dict | None = None, media_per_sample: dict | None = None) -> np.ndarray:
        """int64 ``[3, T]``: :meth:`sample_positions` of each sample (``lengths`` tokens each, ``grids``
        and ``video_grids`` per sample), concatenated (the collator's call of
        :meth:`vlmpack.train.rope.MRopeIndexer.pack_positions`; ``video_seconds`` is not read: every
        video has the processor's ``second_per_grid``). ``media`` / ``media_per_sample``: the pack's
        (:class:`vlmpack.train.encode.EncodedPack`), each sample's rows of the audio
        ``feature_attention_mask.sum(-1)`` its ``audio_seqlens``. ``ValueError`` as :meth:`sample_positions`."""
        out, start = [], 0
        vgrids = list(video_grids) if video_grids is not None else [None] * len(lengths)
        audio, seqlens = (media or {}).get("audio"), [None] * len(lengths)
        if audio is not None and audio.model_kwargs:
            frames = np.asarray(audio.model_kwargs["feature_attention_mask"].sum(-1)).tolist()
            bounds = np.cumsum([0, *(media_per_sample or {}).get("audio", [])]).tolist()
            if bounds[-1] != len(frames) or len(bounds) != len(lengths) + 1:
                raise ValueError(f"{len(frames)} audio feature rows for {bounds[-1]} audio items of "
                                 f"{len(bounds) - 1} samples ({len(lengths)} in the pack)")
            seqlens = [frames[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        for n, g, vg, sl in zip(lengths, grids, vgrids, seqlens):
            out.append(self.sample_positions(ids[start:start + n], g, vg, sl))
            start += n
        return np.concatenate(out, axis=1) if out else np.zeros((3, 0), dtype=np.int64)
