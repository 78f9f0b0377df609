"""Audio header probing and the training-side decode to 16 kHz mono, with PyAV.

:func:`probe_audio` opens a container (WAV, FLAC, MP3, M4A (AAC/ALAC in mp4), Ogg (Vorbis, Opus,
FLAC), and the Matroska / mp4 containers of a video's sound track; :data:`CONTAINERS`) with PyAV,
takes its first audio stream (``container.streams.audio[0]``, the stream FFmpeg-based readers such
as torchcodec's ``AudioDecoder`` take) and returns an :class:`AudioHeader`. The rules:

- ``sample_rate`` (Hz) and ``channels``: the stream's codec parameters.
- ``samples``: the number of sample frames (per channel, at ``sample_rate``) the decoder yields,
  the quantity every token rule starts from (:func:`samples_at`). Where the container states it
  exactly, it is read without decoding (``samples_from="header"``): WAV with PCM data (data chunk
  size / block size, FFmpeg's ``AVStream.duration`` in ``1/sample_rate``) and FLAC (STREAMINFO's
  total sample count). Lossy codecs do not state it: the decoder trims or keeps encoder delay and
  padding by rules of its own, and what the container says is measured off on the real corpus of
  ``tests/test_audio.py`` (FFmpeg 8, libavformat 62.12, of PyAV 18.1): AAC in M4A / mp4 decodes
  to 96-986 samples more than the container's duration on all 7 files (whole 1024-sample frames);
  an MP3 without a Xing header states a bit-rate estimate (4 samples off on one of 9 MP3s; with a
  Xing/LAME header FFmpeg's duration equalled the decode on every file, which nothing guarantees
  for other encoders); Ogg Vorbis decodes 128 fewer or 223 more samples than its last granule
  position on 5 of 27 files (libsndfile, transformers' soundfile backend, follows the granule:
  the two readers disagree); Opus (Ogg -312, WebM -1307 samples) and FLAC in Matroska (-3) are
  off too. For those the stream is decoded (no resampling) and its samples counted
  (``samples_from="decode"``), at every ``check`` level.
- ``duration_s``: ``samples / sample_rate``.

``check="verify"`` and ``"decode"`` also decode a header-counted stream and require the decoded
count to equal the header's (a FLAC file cut mid-stream, whose STREAMINFO promises more, is
refused: ``media_undecodable``). A WAV file whose ``data`` chunk declares more samples than the
file holds is refused at every level (:func:`riff_data_samples`: FFmpeg clamps the size to the
bytes present, so neither its header nor its decode tells). A decode-counted stream is refused
when it stops decoding with an error, or when it decodes to fewer samples than its container's
stated duration minus the codec's delay and padding allowance (:data:`LOSSY_SLACK` codec frames:
a file cut short).

:func:`decode_audio` is the training-side decoder: float32 mono at 16 kHz, as transformers'
``audio_utils.load_audio`` hands the feature extractor: channels averaged (its soundfile path:
``waveform.mean(axis=0)``; torchcodec: ``num_channels=1``), resampled to ``sampling_rate`` and
padded / cut to ``ceil(samples * sampling_rate / sample_rate)`` samples (its soundfile path, which
is ``librosa.load``'s rule); :func:`samples_at` is that length from the header, so the count of a
packed item equals what the collator decodes. The resampler is FFmpeg's (swresample, as
torchcodec uses), not soxr: the values differ slightly from transformers' soundfile path, the
length (all a token count depends on) does not.

Errors: :class:`vlmpack.errors.MediaError` with ``media_undecodable`` (not a container PyAV
reads, no audio stream, no samples, cut short, a decode error) or ``media_unsupported`` (a
container outside :data:`CONTAINERS`, no decoder for the codec, PyAV not installed); never
another exception for bad bytes. :func:`decode_audio` raises
:class:`vlmpack.errors.MediaDecodeError` (one line starting with ``where``).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CONTAINERS", "AudioHeader", "decode_audio", "probe_audio", "probe_sound_track", "samples_at"]

#: FFmpeg demuxer name -> the file extensions (first = default) vlmpack accepts for it.
CONTAINERS = {
    "wav": ("wav",),
    "flac": ("flac",),
    "mp3": ("mp3",),
    "mov,mp4,m4a,3gp,3g2,mj2": ("m4a", "mp4", "mov"),
    "ogg": ("ogg", "oga", "opus"),
    "matroska,webm": ("mka", "mkv", "webm"),
}
#: Demuxer -> codec-name prefixes whose sample count the header states exactly (module docstring).
EXACT_HEADER = {"wav": ("pcm_",), "flac": ("flac",)}
#: A decode-counted stream may decode to this many codec frames fewer than its container's stated
#: duration (encoder delay + end padding) before it counts as cut short.
LOSSY_SLACK = 3
#: transformers' Whisper / Qwen-Omni feature extractors take 16 kHz.
SAMPLING_RATE = 16000


@dataclass(frozen=True, slots=True)
class AudioHeader:
    """Header facts of one audio stream: ``sample_rate`` (Hz), ``channels``, ``samples`` (sample
    frames per channel at ``sample_rate``, as decoded), ``duration_s`` (``samples / sample_rate``),
    ``format`` (extension-like container name: ``wav``/``flac``/``mp3``/``m4a``/``ogg``...),
    ``codec`` (FFmpeg decoder name), ``samples_from`` (``"header"`` | ``"decode"``) and
    ``stated`` (the container's duration in samples, None when it states none)."""

    sample_rate: int
    channels: int
    samples: int
    duration_s: float
    format: str
    codec: str
    samples_from: str
    stated: int | None


def samples_at(samples: int, sample_rate: int, rate: int = SAMPLING_RATE) -> int:
    """Samples of a ``samples``-long stream at ``sample_rate`` Hz once resampled to ``rate`` Hz:
    ``ceil(samples * rate / sample_rate)`` (``samples`` itself when the rates agree), exact
    integer arithmetic. transformers' ``audio_utils._load_audio_soundfile`` (= ``librosa.load``)
    pads / cuts the resampled waveform to this length; :func:`decode_audio` does the same."""
    if sample_rate <= 0:
        raise ValueError(f"sample rate must be positive, got {sample_rate}")
    return samples if sample_rate == rate else -(-samples * rate // sample_rate)


def _error(reason: str, detail: str):
    from vlmpack.errors import MediaError

    return MediaError(reason, detail)


def _oneline(value: object) -> str:
    return " ".join(str(value).split())


def _source(obj: Any):
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(obj))
    return os.fspath(obj) if isinstance(obj, (str, os.PathLike)) else obj


def probe_audio(source, name: str = "", check: str = "header") -> AudioHeader:
    """The :class:`AudioHeader` of the first audio stream at ``source`` (a path or ``bytes``);
    ``name`` labels errors and picks the format name (its extension). ``check``: ``"header"``,
    ``"verify"`` or ``"decode"`` (module docstring). Raises ``MediaError`` only."""
    def read(av, container, label):
        header = _read_header(av, container, label, check)
        return header, riff_data_samples(_head(source)) if header.format == "wav" else None

    header, declared = _opened(source, name, "audio", read)
    if declared is not None and declared > header.samples:
        label = name or (source if isinstance(source, str) else "<bytes>")
        raise _error("media_undecodable", f"audio has {header.samples} samples, its data chunk says {declared} "
                     f"(cut short): {label}")
    return header


def _opened(source, name: str, what: str, read):
    """``read(av, container, label)`` on ``source`` opened with PyAV, its errors as ``MediaError``
    (``what``: "audio" or "video", the word of the messages): PyAV missing or no decoder
    ``media_unsupported``; empty, not opening or failing while read ``media_undecodable``."""
    try:
        import av
    except ImportError:
        raise _error("media_unsupported", f"audio needs PyAV (pip install 'vlmpack[video]'): {name}") from None
    label = name or (source if isinstance(source, str) else "<bytes>")
    if isinstance(source, (bytes, bytearray, memoryview)) and not len(source):
        raise _error("media_undecodable", f"{what} file is empty: {label}")
    try:
        with av.open(_source(source), metadata_errors="ignore") as container:
            return read(av, container, label)
    except av.FFmpegError as e:
        if isinstance(e, av.DecoderNotFoundError):
            raise _error("media_unsupported", f"no decoder for this audio: {_oneline(e)}: {label}") from None
        raise _error("media_undecodable", f"{what} does not open: {_oneline(e)}: {label}") from None
    except (OSError, EOFError, ValueError, IndexError, ZeroDivisionError) as e:
        raise _error("media_undecodable", f"{what} does not open: {type(e).__name__}: {_oneline(e)}: {label}") from None


class _TrackView:
    """An open container seen without its overall duration, which is its longest stream's (the
    pictures of a video whose sound is shorter): :func:`_stated_samples` then takes the audio
    stream's own duration or none."""

    duration = None

    def __init__(self, container):
        self._container = container

    def __getattr__(self, name):
        return getattr(self._container, name)


def probe_sound_track(source, name: str = "", check: str = "header") -> AudioHeader | None:
    """The :class:`AudioHeader` of the sound track of a video (its first audio stream, read as
    :func:`probe_audio` reads it; mp4 / mov, Matroska / WebM), or None when the container has no
    audio stream (a silent video). The track counts as cut short only against its own stated
    duration (mp4: the track's; Matroska / WebM state none per track, so a decode error alone
    tells there), never against the container's, which is the pictures' when they run longer.
    Raises ``MediaError`` as :func:`probe_audio` does (``media_undecodable``: cut short, no
    sample, not a container PyAV reads; ``media_unsupported``: a container or codec outside
    :data:`CONTAINERS`, PyAV missing)."""
    def read(av, container, label):
        return _read_header(av, _TrackView(container), label, check) if container.streams.audio else None

    return _opened(source, name, "video", read)


def _head(source, n: int = 1 << 16) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:n])
    with open(source, "rb") as fh:
        return fh.read(n)


def riff_data_samples(head: bytes) -> int | None:
    """Sample frames a WAV file's ``data`` chunk declares (its size / the ``fmt `` chunk's block
    align), from the file's first bytes ``head``; None when ``head`` is not RIFF/WAVE, the chunks
    are not found in it, or the size is a streaming placeholder (0 or 0xFFFFFFFF). FFmpeg's WAV
    demuxer clamps the data size to the bytes present, so a cut file looks whole to it."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    at, align = 12, 0
    while at + 8 <= len(head):
        cid, size = head[at:at + 4], int.from_bytes(head[at + 4:at + 8], "little")
        if cid == b"fmt " and at + 22 <= len(head):
            align = int.from_bytes(head[at + 20:at + 22], "little")
        elif cid == b"data":
            return size // align if align and size not in (0, 0xFFFFFFFF) else None
        at += 8 + size + (size & 1)
    return None


def _read_header(av, container, label: str, check: str) -> AudioHeader:
    demuxer = container.format.name
    if not container.streams.audio:
        raise _error("media_undecodable", f"no audio stream in {label} (a silent video or not a sound file)")
    if demuxer not in CONTAINERS:
        raise _error("media_unsupported", f"{demuxer} is not an accepted audio container "
                     f"({', '.join(e for x in CONTAINERS.values() for e in x)}): {label}")
    stream = container.streams.audio[0]
    ctx = stream.codec_context
    codec = ctx.name if ctx is not None else ""
    if ctx is None or not codec:
        raise _error("media_unsupported", f"no decoder for the audio codec of {label}")
    rate, channels = int(ctx.sample_rate or 0), int(ctx.channels or 0)
    if rate <= 0 or channels <= 0:
        raise _error("media_undecodable", f"audio stream has {rate} Hz, {channels} channels: {label}")
    stated = _stated_samples(stream, container, rate)
    exact = codec.startswith(EXACT_HEADER.get(demuxer, ())) and stated is not None
    if exact and check == "header":
        samples, source = stated, "header"
    else:
        samples = decoded_samples(av, container, stream, label)
        source = "decode"
        if exact and samples != stated:
            why = "cut short, or a wrong count in its header" if samples < stated else "a wrong count in its header"
            raise _error("media_undecodable", f"audio decodes to {samples} samples, its header says {stated} ({why}): "
                         f"{label}")
        if exact:
            source = "header"
        elif stated is not None and samples < stated - LOSSY_SLACK * max(int(ctx.frame_size or 0), 1152):
            raise _error("media_undecodable", f"audio decodes to {samples} samples, its container says {stated} "
                         f"(cut short): {label}")
    if samples <= 0:
        raise _error("media_undecodable", f"audio stream has no samples: {label}")
    return AudioHeader(rate, channels, samples, samples / rate, _format_name(demuxer, label), codec, source, stated)


def _stated_samples(stream, container, rate: int) -> int | None:
    """The stream's duration as its container states it, in samples at ``rate`` (None if none):
    ``AVStream.duration * time_base`` (exact when the time base is ``1/rate``), else the
    container's duration (microseconds), rounded."""
    tb = stream.time_base
    if stream.duration and tb:
        value = stream.duration * tb * rate
        return int(value) if value.denominator == 1 else round(float(value))
    if container.duration:
        return round(container.duration * rate / 1_000_000)
    return None


def decoded_samples(av, container, stream, label: str) -> int:
    """Sample frames PyAV decodes from ``stream`` of the open ``container`` from its start (the
    count :func:`decode_audio` yields at the source rate). Raises ``MediaError``
    ``media_undecodable`` when decoding fails part way, naming the samples decoded before."""
    n = 0
    try:
        container.seek(0)
        for frame in container.decode(stream):
            n += frame.samples
    except (av.FFmpegError, OSError, EOFError, ValueError, IndexError) as e:
        raise _error("media_undecodable", f"audio stops decoding after {n} samples ({type(e).__name__}: "
                     f"{_oneline(e)}): {label}") from None
    return n


def decode_audio(obj: Any, *, where: str = "", sampling_rate: int = SAMPLING_RATE) -> np.ndarray:
    """float32 ``[ceil(samples * sampling_rate / sample_rate)]``: the first audio stream of ``obj``
    (raw bytes, a path, a binary file object) decoded from its start, channels averaged, resampled
    to ``sampling_rate`` Hz (FFmpeg's swresample) and padded with zeros / cut to that length
    (module docstring: transformers' ``load_audio``). Raises :class:`MediaDecodeError` (one line,
    starting with ``where``) when it does not open, has no audio stream or fails to decode."""
    import av

    from vlmpack.errors import MediaDecodeError

    chunks: list[np.ndarray] = []
    try:
        if hasattr(obj, "seek"):
            obj.seek(0)
        with av.open(_source(obj), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise MediaDecodeError(f"{where}: no audio stream; re-pack it")
            stream = container.streams.audio[0]
            rate = int(stream.codec_context.sample_rate or 0)
            to_float = None
            container.seek(0)
            for frame in container.decode(stream):
                if to_float is None:  # planar float at the source rate and layout: a format change only
                    to_float = av.AudioResampler(format="fltp", layout=frame.layout.name, rate=frame.sample_rate)
                for out in to_float.resample(frame):
                    chunks.append(out.to_ndarray().mean(axis=0, dtype=np.float32))
            if to_float is not None:
                for out in to_float.resample(None):
                    chunks.append(out.to_ndarray().mean(axis=0, dtype=np.float32))
    except MediaDecodeError:
        raise
    except (av.FFmpegError, OSError, EOFError, ValueError, IndexError) as e:
        raise MediaDecodeError(f"{where}: audio does not decode ({type(e).__name__}: {_oneline(e)}); the shard or "
                               "file is corrupt or changed after packing: re-pack it") from None
    mono = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    if rate <= 0 or not len(mono):
        raise MediaDecodeError(f"{where}: audio has no samples; re-pack it")
    want = samples_at(len(mono), rate, sampling_rate)
    if rate != sampling_rate:
        mono = _resample(av, mono, rate, sampling_rate)
    out = np.zeros(want, np.float32)
    out[: min(want, len(mono))] = mono[:want]
    return out


def _resample(av, mono: np.ndarray, rate: int, target: int) -> np.ndarray:
    """float32 mono ``mono`` at ``rate`` Hz resampled to ``target`` Hz with FFmpeg's swresample
    (flushed: the resampler's delay line is emptied at the end)."""
    frame = av.AudioFrame.from_ndarray(mono[None, :], format="flt", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=target)
    parts = [f.to_ndarray()[0] for f in resampler.resample(frame)]
    parts += [f.to_ndarray()[0] for f in resampler.resample(None)]
    return np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, np.float32)


def _format_name(demuxer: str, label: str) -> str:
    ext = os.path.splitext(label)[1].lower().lstrip(".")
    names = CONTAINERS[demuxer]
    return ext if ext in names else names[0]

