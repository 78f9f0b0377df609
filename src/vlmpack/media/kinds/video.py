"""The video kind: mp4/mov, Matroska/WebM and AVI containers (:data:`vlmpack.media.video.CONTAINERS`),
packed as ``vid<N>.<ext>`` members. Probe: :func:`probe_video_info`, the container header with PyAV
(:func:`vlmpack.media.video.probe_video`); decoder: the sampled frames
(:func:`vlmpack.media.frames.decode_frames`; the model family picks the indices)."""

from __future__ import annotations

import os

from vlmpack.errors import MediaDecodeError, MediaError
from vlmpack.media.frames import decode_frames
from vlmpack.media.kinds.spec import MediaInfo, MediaKind


def probe_video_info(path: str, nbytes: int, check: str, data: bytes | None = None) -> MediaInfo:
    """:func:`vlmpack.media.video.probe_video` of a file (``data`` None) or of bytes in memory."""
    from vlmpack.media.video import probe_video

    if nbytes == 0:
        raise MediaError("media_undecodable", f"video file is empty: {path}")
    if data is None and not os.access(path, os.R_OK):
        raise MediaError("media_missing", f"video not readable: {path}")
    try:
        h = probe_video(path if data is None else data, path, check)
    except MediaError:
        raise
    except Exception as e:  # noqa: BLE001 - FFmpeg/PyAV may raise anything on hostile bytes
        raise MediaError("media_undecodable",
                         f"video does not open: {type(e).__name__}: {_oneline(e)}: {path}") from None
    return MediaInfo(h.width, h.height, h.format, nbytes, h.duration_s, h.fps, h.frames)

def check_stored_video(raw: bytes, name: str, where: str) -> None:
    """Every frame of a stored video decodes, as many as its header says (the ``decode`` check of
    :func:`probe_video_info`); raises :class:`MediaDecodeError` ``"<where>: video does not decode
    (<detail>); re-pack it"`` (``name``, the member, labels the detail)."""
    try:
        probe_video_info(name, len(raw), "decode", bytes(raw))
    except MediaError as e:
        raise MediaDecodeError(f"{where}: video does not decode ({e.detail}); re-pack it") from None


def _oneline(value: object) -> str:
    return " ".join(str(value).split())


KIND = MediaKind(
    name="video",
    tag="vid",
    extensions=("mp4", "webm", "mkv", "mov", "avi"),
    probe=probe_video_info,
    decode=decode_frames,
    check_stored=check_stored_video,
)
