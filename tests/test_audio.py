"""Audio: the header probe, the 16 kHz decoder and Qwen2.5-Omni's audio token rule, against
transformers' own ``Qwen2_5OmniProcessor`` on a real audio corpus.

The corpus (``tools/demo_data/audio_corpus.py``): Debian's sound files (alsa-utils WAV,
sound-theme-freedesktop Ogg Vorbis), espeak-ng speech of the demo set's texts, their conversions
to WAV / FLAC / MP3 / M4A / Ogg Opus at 8-48 kHz, mono and stereo, and videos with a sound track.

1. For every file, the samples the header probe gives (``check="header"``: read from the header
   for WAV/FLAC, decoded for lossy codecs) are the samples the training decoder yields:
   ``len(decode_audio(file)) == samples_at(samples, sample_rate)``; at ``check="decode"`` the
   header's count is confirmed by decoding.
2. For every file, the token count from the header alone (:func:`audio_tokens`) equals the number of
   ``<|AUDIO|>`` tokens of ``Qwen2_5OmniProcessor.__call__`` (the published Whisper feature
   extractor settings, ``model_files/qwen2_5_omni``) on the decoded waveform, and the processor's
   own ``_get_num_audio_tokens``; the first difference stops the test.
3. The broken files get their reason codes; ``check_stored`` refuses a cut file.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from cache_dir import CACHE
from conftest import cache_lock

from vlmpack.errors import MediaDecodeError, MediaError, MediaRuleError
from vlmpack.media.audio import decode_audio, probe_audio, samples_at
from vlmpack.media.kinds.audio import KIND as AUDIO
from vlmpack.models.qwen_omni_audio import audio_tokens, encoder_tokens, feature_frames


@pytest.fixture(scope="module")
def audio_corpus(real_data):
    from demo_data.audio_corpus import build_audio_corpus

    with cache_lock():
        return build_audio_corpus(CACHE / "audio_corpus", real_data)


@pytest.fixture(scope="module")
def broken_audio(audio_corpus, real_data):
    from demo_data.audio_corpus import build_broken_audio

    with cache_lock():
        return build_broken_audio(CACHE / "audio_corpus", CACHE / "audio_broken", real_data)


@pytest.fixture(scope="module")
def omni_processor():
    from demo_data.qwen2_5_omni_dir import build_qwen2_5_omni_dir

    from vlmpack.models.processor_build import build_processor

    with cache_lock():
        path = build_qwen2_5_omni_dir(CACHE / "qwen2_5_omni")
    return build_processor(path)


@pytest.fixture(scope="module")
def headers(audio_corpus):
    return {p: probe_audio(str(p), p.name, "header") for p in audio_corpus}


@pytest.fixture(scope="module")
def waves(audio_corpus):
    """File -> :func:`decode_audio` of it (decoded once for the tests below)."""
    return {p: decode_audio(str(p), where=p.name) for p in audio_corpus}


@contextlib.contextmanager
def shape_only_fbank(fe, real_files: int):
    """The feature extractor's log-mel computation for real on the first ``real_files`` calls
    (each also computed by the stand-in and compared: same shape and dtype), then a stand-in of
    the same shape: zeros ``[batch, feature_size, samples // hop_length]``, which is what
    ``_torch_extract_fbank_features`` returns (its STFT's last frame dropped). The attention mask
    and the token count never read the features, only the padded length does."""
    real = fe._torch_extract_fbank_features
    calls = [0]

    def standin(waveform, device="cpu"):
        return np.zeros((waveform.shape[0], fe.feature_size, waveform.shape[-1] // fe.hop_length), np.float32)

    def extract(waveform, device="cpu"):
        calls[0] += 1
        if calls[0] > real_files:
            return standin(waveform, device)
        got, stand = real(waveform, device), standin(waveform, device)
        assert (got.shape, got.dtype) == (stand.shape, stand.dtype)
        return got

    fe._torch_extract_fbank_features = extract
    try:
        yield calls
    finally:
        del fe._torch_extract_fbank_features


def test_corpus_covers_the_containers(audio_corpus, headers):
    """The corpus holds every accepted audio container and codec family, several rates and channel counts."""
    formats = {h.format for h in headers.values()}
    assert {"wav", "flac", "mp3", "m4a", "ogg", "oga", "mp4", "mkv", "webm"} <= formats
    codecs = {h.codec for h in headers.values()}
    assert {"pcm_s16le", "pcm_u8", "pcm_f32le", "flac", "mp3float", "aac", "alac", "opus", "vorbis"} <= codecs
    assert {8000, 11025, 16000, 22050, 44100, 48000} <= {h.sample_rate for h in headers.values()}
    assert {1, 2} <= {h.channels for h in headers.values()}
    assert max(h.duration_s for h in headers.values()) > 300  # past the feature extractor's 300 s


def test_header_samples_are_what_the_decoder_yields(audio_corpus, headers, waves):
    """Every file: the decoder's 16 kHz length is the header's samples resampled; WAV / FLAC are
    counted from the header, confirmed by ``check="decode"``; lossy codecs are counted by decoding."""
    for p in audio_corpus:
        h = headers[p]
        assert h.samples_from == ("header" if p.suffix in (".wav", ".flac") else "decode"), (p.name, h)
        if h.samples_from == "header":
            assert probe_audio(str(p), p.name, "decode") == h, p.name
        wave = waves[p]
        assert wave.dtype == np.float32 and wave.ndim == 1, p.name
        assert len(wave) == samples_at(h.samples, h.sample_rate) == math.ceil(h.samples * 16000 / h.sample_rate), \
            (p.name, len(wave), h)
        assert np.isfinite(wave).all() and np.abs(wave).max() > 0, p.name


def test_lossy_headers_do_not_state_the_decoded_samples(audio_corpus, headers):
    """Why lossy codecs are decoded at every check level: the durations their containers state
    differ from the samples FFmpeg decodes (AAC: whole frames past the stated end; an MP3 without a
    Xing header: a bit-rate estimate; Vorbis: around the last granule; Opus: pre-skip), while WAV
    and FLAC state exactly what decodes (previous test)."""
    off = {p.name: (headers[p].stated, headers[p].samples) for p in audio_corpus
           if headers[p].stated != headers[p].samples}
    for ext in (".mp3", ".m4a", ".oga", ".ogg", ".webm", ".mp4"):
        assert any(n.endswith(ext) for n in off), (ext, off)
    assert "turns_vbr_noxing.mp3" in off and all(p.name in off for p in audio_corpus if headers[p].codec == "aac")
    assert not any(n.endswith((".wav", ".flac")) for n in off)


def test_tokens_from_the_header_equal_the_processor(audio_corpus, headers, waves, omni_processor):
    """Every file: the count from the header alone equals the ``<|AUDIO|>`` tokens
    ``Qwen2_5OmniProcessor`` inserts for the decoded waveform, and its ``_get_num_audio_tokens``
    (the log-mel features computed for real on the first files, shape-true after:
    :func:`shape_only_fbank`)."""
    proc = omni_processor
    fe = proc.feature_extractor
    assert (fe.hop_length, fe.n_samples, fe.sampling_rate, fe.feature_size) == (160, 4_800_000, 16000, 128)
    text = proc.audio_bos_token + proc.audio_token + proc.audio_eos_token
    seen = set()
    with shape_only_fbank(fe, real_files=3) as calls:
        for p in audio_corpus:
            h = headers[p]
            want = audio_tokens(h.samples, h.sample_rate, hop_length=fe.hop_length, n_samples=fe.n_samples)
            wave = waves[p]
            out = proc(text=[text], audio=[wave], return_tensors="np")
            got = int((out["input_ids"][0] == proc.audio_token_id).sum())
            assert got == want == proc._get_num_audio_tokens(len(wave)), (p.name, got, want, h)
            assert out["input_features"].shape == (1, 128, 30000)
            assert int(out["feature_attention_mask"][0].sum()) == feature_frames(len(wave), fe.hop_length,
                                                                                  fe.n_samples)
            seen.add(want)
    assert calls[0] == len(audio_corpus)
    assert max(seen) == 7500  # the speech longer than 300 s is cut by the feature extractor, as counted


def test_rule_on_every_length_near_the_boundaries():
    """``feature_frames`` equals the feature extractor's attention mask (real arithmetic, a short
    ``chunk_length`` so the padded input is small) for lengths around every hop and the cut, and
    ``encoder_tokens`` the processor's ``_get_feat_extract_output_lengths``."""
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import _get_feat_extract_output_lengths

    fe = WhisperFeatureExtractor(feature_size=128, chunk_length=1, hop_length=160)
    lengths = sorted({1, 2, *[k * 160 + d for k in range(1, 101) for d in (-1, 0, 1)], 16001, 20000})
    masks = fe([np.ones(n, np.float32) for n in lengths], padding="max_length", return_attention_mask=True,
               sampling_rate=16000)["attention_mask"]
    for n, mask in zip(lengths, masks):
        assert feature_frames(n, 160, fe.n_samples) == int(mask.sum()), n
    for f in range(0, 40):
        assert encoder_tokens(f) == max(int(_get_feat_extract_output_lengths(np.int64(f))), 0), f
    with pytest.raises(MediaRuleError, match="too short"):
        audio_tokens(320, 16000)
    assert audio_tokens(321, 16000) == 1
    with pytest.raises(MediaRuleError, match="no samples"):
        audio_tokens(0, 44100)


@pytest.mark.parametrize("name,reason,detail", [
    ("cut.wav", "media_undecodable", "cut short"),
    ("cut.flac", "media_undecodable", ""),
    ("cut.mp3", "media_undecodable", "cut short"),
    ("empty_data.wav", "media_undecodable", "no samples"),
    ("no_audio.mp4", "media_undecodable", "no audio stream"),
    ("not_audio.wav", "media_undecodable", ""),
])
def test_broken_files_get_a_reason(broken_audio, name, reason, detail):
    """A truncated file, one without samples or without a sound track: one ``MediaError`` line with
    its reason, at the pack's default check (``verify``); ``check_stored`` refuses it too."""
    path = broken_audio[name]
    with pytest.raises(MediaError) as e:
        AUDIO.probe(str(path), path.stat().st_size, "verify", None)
    assert e.value.reason == reason and detail in e.value.detail and "\n" not in e.value.detail, e.value.detail
    with pytest.raises(MediaDecodeError) as d:
        AUDIO.check_stored(path.read_bytes(), "aud0" + path.suffix, "shard/pack sample 's' part aud0")
    assert str(d.value).startswith("shard/pack sample 's' part aud0: ") and "\n" not in str(d.value)


def test_kind_entry_on_a_real_file(audio_corpus):
    """The ``audio`` kind entry (not registered yet): probe from a path and from bytes agree, the
    decoder gives the 16 kHz waveform, ``check_stored`` passes the whole file and refuses a cut copy."""
    path = next(p for p in audio_corpus if p.name == "turns.flac")
    data = path.read_bytes()
    info = AUDIO.probe(str(path), len(data), "verify", None)
    assert info == AUDIO.probe(str(path), len(data), "header", data)
    assert (info.width, info.height, info.format, info.nbytes) == (0, 0, "flac", len(data))
    assert info.fps == 22050 and info.frames > 0 and info.duration_s == info.frames / 22050
    assert len(AUDIO.decode(data, where="x")) == samples_at(info.frames, 22050)
    AUDIO.check_stored(data, "aud0.flac", "where")
    with pytest.raises(MediaDecodeError, match=r"^where: audio does not decode"):
        AUDIO.check_stored(data[: len(data) // 2], "aud0.flac", "where")
    assert AUDIO.tag == "aud" and not any(t.startswith("aud") or "aud".startswith(t) for t in ("img", "vid"))


def test_interleaving_of_a_video_with_its_sound_equals_the_processor(omni_processor):
    """:func:`interleaved_runs` lays out the same string as ``replace_video_with_audio_token``
    (``use_audio_in_video``) for grids, sound lengths and frame rates around its chunk edges; the
    method reads only the grid and ``merge_size`` of the video processor (which needs torchvision
    here), so a stand-in object gives it that one number."""
    from types import SimpleNamespace

    from vlmpack.models.qwen_omni_audio import interleaved_runs

    proc = omni_processor
    saved, proc.video_processor = proc.video_processor, SimpleNamespace(merge_size=2)
    tokens = {"video": proc.video_token, "audio": proc.audio_token}
    try:
        for grid in ((1, 2, 2), (2, 4, 6), (3, 2, 4), (7, 6, 6), (16, 4, 4)):
            for audio in (0, 1, 49, 50, 51, 200, 1000):
                for fps in (0.5, 1.0, 2.0, 3.0):
                    got = proc.replace_video_with_audio_token(
                        {"video_grid_thw": [np.array(grid)], "video_second_per_grid": [2 / fps]}, 0,
                        {"num_audio_tokens": [audio]}, 0, position_id_per_seconds=25, seconds_per_chunk=2.0)
                    runs = interleaved_runs(grid, audio, second_per_grid=2 / fps)
                    want = "".join(tokens[k] * n for k, n in runs)
                    assert got == proc.audio_bos_token + want + proc.audio_eos_token, (grid, audio, fps, runs)
                    assert sum(n for _, n in runs) == grid[0] * grid[1] * grid[2] // 4 + audio
    finally:
        proc.video_processor = saved


def test_decoder_values_on_16k_pcm(audio_corpus, waves):
    """No resampling at 16 kHz: the waveform is the file's 16-bit PCM / 32768 (what soundfile's
    ``read(dtype="float32")`` gives, transformers' soundfile path), value for value; a stereo file
    is the mean of its two channels before resampling (same length rule)."""
    import wave as wavmod

    path = next(p for p in audio_corpus if p.name == "turns_16k.wav")
    with wavmod.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    np.testing.assert_array_equal(waves[path], pcm.astype(np.float32) / 32768)
    stereo = next(p for p in audio_corpus if p.name == "turns_44k_stereo.wav")
    with wavmod.open(str(stereo)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2).astype(np.float32) / 32768
    mono = pcm.mean(axis=1)
    got = waves[stereo]
    assert len(got) == math.ceil(len(mono) * 16000 / 44100)
    # resampled by FFmpeg: the same sound at 16 kHz (RMS within 2 %, correlation with a crude decimation > 0.9)
    assert abs(np.sqrt(np.mean(got ** 2)) / np.sqrt(np.mean(mono ** 2)) - 1) < 0.02
    idx = np.minimum((np.arange(len(got)) * 44100 / 16000).astype(int), len(mono) - 1)
    assert np.corrcoef(got, mono[idx])[0, 1] > 0.9
