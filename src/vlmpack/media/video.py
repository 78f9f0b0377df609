"""Video header probing with PyAV: size, frame count, duration and frame rate without decoding.

:func:`probe_video` opens a container (mp4 / mov, Matroska / WebM, AVI; :data:`CONTAINERS`) with
PyAV (``av``, the optional extra ``vlmpack[video]``), takes its first video stream (the one
transformers' and qwen-vl-utils' readers take, ``container.streams.video[0]``) and returns a
:class:`VideoHeader`. The rules, and where each comes from:

- ``width`` x ``height``: the stream's coded size (``codec_context.width/height``). Rotation
  metadata (a display matrix) is *not* applied: the readers the processors use (PyAV's
  ``frame.to_ndarray`` in transformers' ``read_video_pyav``, decord, torchvision) return the frames
  unrotated, so that is the size the processor resizes (the test suite checks decoded frames of
  rotated clips keep this size).
- ``frames``: the container's own count (``AVStream.nb_frames``: mp4/mov sample table, AVI index)
  when it has one; Matroska/WebM store none, so the video packets are counted by demuxing
  (reading packet headers, no decoding; empty packets, which carry no frame, are skipped).
  ``frames_from`` says which (``"header"`` / ``"packets"``).
- ``duration_s``: the time the video stream spans, from the start of its first frame to the end
  of its last: ``AVStream.duration * time_base`` when the container records it together with a
  frame count; else (Matroska/WebM, or a header without a duration) from the demuxed packets,
  ``max(pts + duration) - min(pts)``; else the container's duration; else None.
- ``fps``: the stream's average frame rate ``frames / duration_s`` (what FFmpeg reports as
  ``avg_frame_rate`` for mp4/mov/avi, computed the same way; readers such as transformers'
  ``read_video_pyav`` and qwen-vl-utils' torchvision/decord backends pass that rate to the frame
  sampler). Without a duration: FFmpeg's ``average_rate``, else ``guessed_rate``; None if neither.

A full decode of a sound file gives the same three numbers (count of decoded frames, span of their
timestamps, their ratio): ``tests/test_video.py`` checks it on a corpus of real files and every
family's count rule. A file cut mid-stream, or whose header promises more or fewer frames than
decode, does not: ``check="verify"`` (pack's default) and ``check="decode"`` decode every frame at
probe time (:func:`decoded_frames`) and refuse such a file (``media_undecodable``, with both counts),
so every video that is packed decodes, in the collator (:func:`vlmpack.media.frames.decode_frames`,
transformers' ``read_video_pyav``) and in ``vlmpack verify``, to the frames it was counted with.
(transformers' reader samples the indices from the header's count and keeps those that decode, so
on such a file it would train on fewer frames than were counted: the sample is refused instead.)
``check="header"`` trusts the header: the training side then stops on such a video with
:class:`vlmpack.errors.MediaDecodeError`.

Errors: :class:`vlmpack.media.probe.MediaError` with ``media_undecodable`` (not a container
PyAV reads, no video stream, no frames, a size of 0, a decode error) or ``media_unsupported`` (a
container outside :data:`CONTAINERS`, no decoder for the codec, PyAV not installed); never
another exception for bad bytes.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from fractions import Fraction

logger = logging.getLogger(__name__)

#: FFmpeg demuxer name -> the file extensions (first = default) vlmpack accepts for it.
CONTAINERS = {
    "mov,mp4,m4a,3gp,3g2,mj2": ("mp4", "mov", "m4v"),
    "matroska,webm": ("mkv", "webm"),
    "avi": ("avi",),
}


@dataclass(frozen=True, slots=True)
class VideoHeader:
    """Header facts of one video: ``width``/``height`` (pixels, coded size, as decoded frames have
    it), ``frames`` (int, frames of the first video stream), ``duration_s`` (float seconds or
    None), ``fps`` (float, average frames per second, or None), ``format`` (extension-like
    container name: ``mp4``/``mov``/``mkv``/``webm``/``avi``, the name of the written part),
    ``codec`` (FFmpeg decoder name), ``frames_from`` (``"header"`` | ``"packets"``)."""

    width: int
    height: int
    frames: int
    duration_s: float | None
    fps: float | None
    format: str
    codec: str
    frames_from: str


def _error(reason: str, detail: str):
    from vlmpack.errors import MediaError

    return MediaError(reason, detail)


def probe_video(source, name: str = "", check: str = "header") -> VideoHeader:
    """The :class:`VideoHeader` of the video at ``source`` (a path or ``bytes``); ``name`` is used
    in error details and to pick the format name (its extension). ``check`` ``"verify"`` or
    ``"decode"`` also decodes every frame and requires the decoded count to equal ``frames``
    (:func:`decoded_frames`); ``"header"`` decodes none. Raises ``MediaError`` (see the module
    docstring)."""
    try:
        import av
    except ImportError:
        raise _error("media_unsupported", f"video needs PyAV (pip install 'vlmpack[video]'): {name}") from None
    label = name or (source if isinstance(source, str) else "<bytes>")
    if isinstance(source, (bytes, bytearray, memoryview)):
        if not len(source):
            raise _error("media_undecodable", f"video file is empty: {label}")
        src = io.BytesIO(bytes(source))
    else:
        src = source
    try:
        with av.open(src, metadata_errors="ignore") as container:
            return _read_header(av, container, label, check)
    except av.FFmpegError as e:
        if isinstance(e, av.DecoderNotFoundError):
            raise _error("media_unsupported", f"no decoder for this video: {_oneline(e)}: {label}") from None
        raise _error("media_undecodable", f"video does not open: {_oneline(e)}: {label}") from None
    except (OSError, EOFError, ValueError, IndexError, ZeroDivisionError) as e:
        raise _error("media_undecodable", f"video does not open: {type(e).__name__}: {_oneline(e)}: {label}") from None


def _read_header(av, container, label: str, check: str) -> VideoHeader:
    demuxer = container.format.name
    if demuxer not in CONTAINERS:
        raise _error("media_unsupported", f"{demuxer} is not an accepted video container "
                     f"(mp4, mov, mkv, webm, avi): {label}")
    if not container.streams.video:
        raise _error("media_undecodable", f"no video stream in {label}")
    stream = container.streams.video[0]
    ctx = stream.codec_context
    codec = ctx.name if ctx is not None else ""
    if ctx is None or not codec:
        raise _error("media_unsupported", f"no decoder for the video codec of {label}")
    width, height = int(ctx.width or 0), int(ctx.height or 0)
    if width <= 0 or height <= 0:
        raise _error("media_undecodable", f"video stream has size {width}x{height}: {label}")
    tb = stream.time_base
    frames = int(stream.frames or 0)
    duration: float | None = None
    if frames > 0:
        frames_from = "header"
        if stream.duration and tb:
            duration = float(stream.duration * tb)
    else:
        frames_from = "packets"
        frames, span = _count_packets(container, stream)
        duration = span
    if frames <= 0:
        raise _error("media_undecodable", f"video stream has no frames: {label}")
    if duration is None and container.duration:
        duration = container.duration / 1_000_000  # AV_TIME_BASE
    if duration is not None and duration > 0:
        fps: float | None = frames / duration
    else:
        duration = None
        rate = stream.average_rate or stream.guessed_rate
        fps = float(rate) if rate else None
    if check != "header":
        decoded = decoded_frames(av, container, stream, frames, label)
        if decoded != frames:
            why = "cut short, or a wrong count in its header" if decoded < frames else "a wrong count in its header"
            raise _error("media_undecodable", f"video decodes to {decoded} frames, its header says {frames} ({why}): "
                         f"{label}")
    return VideoHeader(width, height, frames, duration, fps, _format_name(demuxer, label), codec, frames_from)


def decoded_frames(av, container, stream, frames: int, label: str) -> int:
    """The number of frames PyAV decodes from ``stream`` of the open ``container`` from its start,
    as transformers' ``read_video_pyav`` iterates them (``container.seek(0)``, then
    ``container.decode(video=0)``). ``frames`` (the header's count) is only named in the error.
    Raises ``MediaError`` ``media_undecodable`` when decoding fails part way (a file cut
    mid-stream: the reader raises there too), naming the frames decoded before."""
    n = 0
    try:
        container.seek(0)
        for _ in container.decode(stream):
            n += 1
    except (av.FFmpegError, OSError, EOFError, ValueError, IndexError) as e:
        raise _error("media_undecodable", f"video stops decoding after {n} of the {frames} frames its header "
                     f"says ({type(e).__name__}: {_oneline(e)}): {label}") from None
    return n


def _count_packets(container, stream) -> tuple[int, float | None]:
    """``(frames, span in seconds or None)`` from demuxing the video stream (no decoding)."""
    n, lo, hi = 0, None, None
    for pkt in container.demux(stream):
        if pkt.size == 0:  # the flush packet PyAV yields at the end, or an empty (dropped) frame
            continue
        n += 1
        if pkt.pts is not None:
            end = pkt.pts + (pkt.duration or 0)
            lo = pkt.pts if lo is None else min(lo, pkt.pts)
            hi = end if hi is None else max(hi, end)
    tb = stream.time_base
    span = float(Fraction(hi - lo) * tb) if lo is not None and tb and hi > lo else None
    return n, span


def _format_name(demuxer: str, label: str) -> str:
    ext = os.path.splitext(label)[1].lower().lstrip(".")
    names = CONTAINERS[demuxer]
    return ext if ext in names else names[0]


def _oneline(value: object) -> str:
    return " ".join(str(value).split())
