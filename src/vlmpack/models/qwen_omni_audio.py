"""Qwen2.5-Omni's audio token rule: samples -> Whisper feature frames -> the audio encoder's output
length = the number of ``<|AUDIO|>`` tokens of one audio item. Pure integer functions.

The rule restates transformers 5.24's ``Qwen2_5OmniProcessor._process_audio`` and what it calls:

1. the waveform is float32 mono at 16 kHz (``audio_kwargs = {"sampling_rate": 16000, ...}``;
   :func:`vlmpack.media.audio.decode_audio` yields ``samples_at(samples, sample_rate)`` samples);
2. ``WhisperFeatureExtractor.__call__(audio, padding="max_length", return_attention_mask=True)``
   with its default ``truncation=True`` and ``max_length=None``: each waveform is cut to, and
   padded to, ``n_samples = chunk_length * sampling_rate`` samples (Qwen2.5-Omni: ``chunk_length``
   300, so 4,800,000); the sample mask is taken every ``hop_length`` samples
   (``attention_mask[:, ::hop_length]``, its last entry dropped when ``hop_length`` does not divide
   ``n_samples``), so the item has ``min(ceil(min(L, n_samples) / hop_length), n_samples //
   hop_length)`` feature frames (:func:`feature_frames`);
3. ``_get_feat_extract_output_lengths`` of the processor (the same as
   ``Qwen2_5OmniAudioEncoder._get_feat_extract_output_lengths``): the encoder's convolution
   (stride 2) and its pooling (stride 2): ``t = (frames - 1) // 2 + 1``, tokens
   ``= (t - 2) // 2 + 1`` (:func:`encoder_tokens`);
4. ``replace_audio_token``: that many ``<|AUDIO|>`` tokens replace the one in the text.

The processor's own ``_get_num_audio_tokens(audio_length)`` gives the same number
(``min(ceil(L / hop_length), nb_max_frames)``, ``nb_max_frames = n_samples // hop_length``);
``tests/test_audio.py`` checks this module against ``Qwen2_5OmniProcessor.__call__`` on the
decoded waveform of every file of a real audio corpus.
"""

from __future__ import annotations

import numpy as np

from vlmpack.errors import MediaRuleError
from vlmpack.media.audio import SAMPLING_RATE, samples_at

__all__ = ["audio_tokens", "encoder_tokens", "feature_frames", "interleaved_runs"]

#: Qwen2.5-Omni's published ``preprocessor_config.json``: ``hop_length`` 160, ``chunk_length`` 300
#: at 16 kHz.
HOP_LENGTH = 160
N_SAMPLES = 300 * SAMPLING_RATE


def feature_frames(samples: int, hop_length: int = HOP_LENGTH, n_samples: int = N_SAMPLES) -> int:
    """Whisper feature frames the attention mask marks for a ``samples``-long 16 kHz waveform
    (module docstring, step 2); ``samples`` >= 0."""
    if samples < 0 or hop_length <= 0 or n_samples <= 0:
        raise ValueError(f"need samples >= 0, hop_length > 0, n_samples > 0; got {samples}, {hop_length}, {n_samples}")
    kept = min(samples, n_samples)
    return min(-(-kept // hop_length), n_samples // hop_length)


def encoder_tokens(frames: int) -> int:
    """The audio encoder's output length for ``frames`` feature frames (module docstring, step 3;
    0 for fewer than 3 frames)."""
    t = (frames - 1) // 2 + 1
    return max((t - 2) // 2 + 1, 0)


def audio_tokens(samples: int, sample_rate: int, *, hop_length: int = HOP_LENGTH, n_samples: int = N_SAMPLES,
                 rate: int = SAMPLING_RATE) -> int:
    """``<|AUDIO|>`` tokens of one audio item of ``samples`` sample frames at ``sample_rate`` Hz
    (the header's :attr:`~vlmpack.media.audio.AudioHeader.samples` / ``sample_rate``): resampled
    length at ``rate`` (:func:`vlmpack.media.audio.samples_at`) -> :func:`feature_frames` ->
    :func:`encoder_tokens`. Raises :class:`MediaRuleError` when the item has no sample or is too
    short to give a token (under 3 feature frames: 320 samples at 16 kHz, 20 ms): the processor
    would insert no ``<|AUDIO|>`` at all."""
    if samples is None or sample_rate is None or samples <= 0 or sample_rate <= 0:
        raise MediaRuleError(f"audio has no samples or rate ({samples} samples at {sample_rate} Hz)")
    n = encoder_tokens(feature_frames(samples_at(int(samples), int(sample_rate), rate), hop_length, n_samples))
    if n <= 0:
        raise MediaRuleError(f"audio of {samples} samples at {sample_rate} Hz is too short for one audio token")
    return n


def interleaved_runs(grid_thw: tuple[int, int, int], audio: int, *, merge_size: int = 2,
                     second_per_grid: float = 1.0, position_id_per_seconds: float = 25,
                     seconds_per_chunk: float = 2.0) -> list[tuple[str, int]]:
    """The token runs of a video with its sound track (``use_audio_in_video`` /
    ``load_audio_from_video``), between ``<|audio_bos|>`` and ``<|audio_eos|>``: ``[("video", n),
    ("audio", m), ...]`` alternating by time chunk, as transformers 5.24's
    ``Qwen2_5OmniProcessor.replace_video_with_audio_token`` lays them out.

    ``grid_thw``: the video's patch grid (t, h, w); ``audio``: its sound track's tokens
    (:func:`audio_tokens`); ``second_per_grid``: ``temporal_patch_size / fps`` (the processor's
    ``video_second_per_grid``: 2 / 2.0 with its default fps). Each temporal grid step's
    ``h * w / merge_size**2`` tokens sit at time ``t * second_per_grid * position_id_per_seconds``,
    the audio token ``k`` at time ``k`` (25 per second); both are cut into chunks of
    ``int(position_id_per_seconds * seconds_per_chunk)`` time units by the processor's
    ``get_chunked_index`` (restated in :func:`_chunks`, including its one-chunk-per-index advance);
    chunk ``j`` gives its video run, then its audio run. Runs of 0 tokens are left out. The
    item's tokens are ``2 + video + audio`` (the two markers + every token once)."""
    t, h, w = (int(x) for x in grid_thw)
    per_step = (h // merge_size) * (w // merge_size)
    video_times = np.repeat(np.arange(t) * second_per_grid * position_id_per_seconds, per_step)
    per_chunk = int(position_id_per_seconds * seconds_per_chunk)
    vc, ac = _chunks(video_times, per_chunk), _chunks(np.arange(audio), per_chunk)
    runs: list[tuple[str, int]] = []
    for j in range(max(len(vc), len(ac))):
        for kind, chunks in (("video", vc), ("audio", ac)):
            if j < len(chunks) and chunks[j]:
                runs.append((kind, chunks[j]))
    return runs


def _chunks(times: np.ndarray, per_chunk: int) -> list[int]:
    """Lengths of the chunks ``get_chunked_index`` cuts the non-decreasing ``times`` into: a new
    chunk starts at the first index whose time reaches ``c * per_chunk`` (``c`` = 1, 2, ...), and
    ``c`` advances by one per index that starts a chunk (so a jump over several thresholds starts
    one chunk there, and the next index starts another); the last chunk runs to the end (an empty
    input gives one chunk of 0)."""
    lengths, start, c = [], 0, 1
    for i, value in enumerate(times.tolist()):
        if value >= c * per_chunk:
            lengths.append(i - start)
            start, c = i, c + 1
    lengths.append(len(times) - start)
    return lengths
