"""The audio kind: WAV, FLAC, MP3, M4A and Ogg (Vorbis / Opus / FLAC) files
(:data:`vlmpack.media.audio.CONTAINERS`), packed as ``aud<N>.<ext>`` members. Probe:
:func:`probe_audio_info`, the container header with PyAV (:func:`vlmpack.media.audio.probe_audio`:
sample rate, channels, samples; lossy codecs counted by decoding, see there); decoder:
:func:`vlmpack.media.audio.decode_audio` (float32 mono 16 kHz, as transformers' ``load_audio``).

A :class:`MediaInfo` of an audio item: ``width = height = 0`` (no picture), ``format`` the
container's extension, ``frames`` the sample frames per channel at the source rate (what every
token rule starts from), ``fps`` the sample rate in Hz (sample frames per second), ``duration_s``
``frames / fps``.

Registered in :data:`vlmpack.media.kinds.KINDS` after ``video`` (sample kind code 3): records
reference audio as ``audios`` / ``audio`` lists with ``<audio>`` placeholders or ``{"type":
"audio"}`` parts (:mod:`vlmpack.layouts`); a model family without an audio token rule rejects such
a sample (``media_unsupported``).
"""

from __future__ import annotations

import os

from vlmpack.errors import MediaDecodeError, MediaError
from vlmpack.media.audio import decode_audio
from vlmpack.media.kinds.spec import MediaInfo, MediaKind


def probe_audio_info(path: str, nbytes: int, check: str, data: bytes | None = None) -> MediaInfo:
    """:func:`vlmpack.media.audio.probe_audio` of a file (``data`` None) or of bytes in memory, as a
    :class:`MediaInfo` (module docstring). Raises :class:`MediaError` only: ``media_missing`` (not
    readable), ``media_undecodable``, ``media_unsupported``."""
    from vlmpack.media.audio import probe_audio

    if nbytes == 0:
        raise MediaError("media_undecodable", f"audio file is empty: {path}")
    if data is None and not os.access(path, os.R_OK):
        raise MediaError("media_missing", f"audio not readable: {path}")
    try:
        h = probe_audio(path if data is None else data, path, check)
    except MediaError:
        raise
    except Exception as e:  # noqa: BLE001 - FFmpeg/PyAV may raise anything on hostile bytes
        raise MediaError("media_undecodable",
                         f"audio does not open: {type(e).__name__}: {' '.join(str(e).split())}: {path}") from None
    return MediaInfo(0, 0, h.format, nbytes, h.duration_s, float(h.sample_rate), h.samples)


def check_stored_audio(raw: bytes, name: str, where: str) -> None:
    """A stored audio item decodes to the samples its header says (the ``decode`` check of
    :func:`probe_audio_info`); raises :class:`MediaDecodeError` ``"<where>: audio does not decode
    (<detail>); re-pack it"`` (``name``, the member, labels the detail)."""
    try:
        probe_audio_info(name, len(raw), "decode", bytes(raw))
    except MediaError as e:
        raise MediaDecodeError(f"{where}: audio does not decode ({e.detail}); re-pack it") from None


KIND = MediaKind(
    name="audio",
    tag="aud",
    extensions=("wav", "flac", "mp3", "m4a", "ogg", "oga"),
    probe=probe_audio_info,
    decode=decode_audio,
    check_stored=check_stored_audio,
)
