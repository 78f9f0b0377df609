"""A corpus of real audio files for the header-vs-decode proof of audio token counts (outside the wheel).

:func:`build_audio_corpus` collects, into one folder:

- the sound files Debian ships: ``alsa-utils`` (``/usr/share/sounds/alsa/*.wav``: spoken channel
  names and noise, 48 kHz PCM) and ``sound-theme-freedesktop`` (``/usr/share/sounds/freedesktop/
  stereo/*.oga``: Ogg Vorbis event sounds);
- speech synthesised by Debian's ``espeak-ng`` (run from its extracted ``.deb`` with the shared
  libraries of the packages in :data:`DEB`, none installed; 22,050 Hz mono WAV) reading texts of
  the demo set (its ``chitchat`` turns, from the PyPI package the demo builder takes them from):
  from one word to a monologue of 5.5 minutes (longer than Qwen2.5-Omni's feature
  extractor takes: ``n_samples`` 4,800,000 at 16 kHz);
- those converted here with PyAV (``av``) to what the kind accepts: WAV (PCM s16 / u8 / f32,
  8 to 48 kHz, mono / stereo), FLAC, MP3 (LAME, with and without its Xing/LAME header), M4A (AAC
  and ALAC), Ogg Opus and FLAC; and speech muxed as the sound track of short videos (mp4 h264 + AAC,
  Matroska h264 + FLAC, WebM VP9 + Opus) whose pictures pan over a demo image
  (:func:`demo_data.video_corpus._frames`).

:func:`build_broken_audio` adds the files the reason codes are for (:data:`BROKEN`): a WAV, a FLAC
and an MP3 cut mid-stream, a WAV whose data chunk holds no sample, a video without a sound track,
and a PNG named ``.wav``.

Every file is written once (``<name>.partial`` renamed when complete) and kept; the builder never
deletes a file it did not write. Needs ``apt-get download`` (after ``apt-get update``), ``dpkg-deb``,
PyAV and Pillow; Debian packages are cached beside the demo set's (``cache/debs``, ``cache/deb``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

AUDIO_EXTS = (".wav", ".flac", ".mp3", ".m4a", ".ogg", ".oga")
AV_EXTS = (".mp4", ".mkv", ".webm")

#: Debian 12 packages (pinned: the versions inspected on 2026-11-26): the sounds, espeak-ng and the
#: shared libraries its binary loads (libpcaudio -> PulseAudio -> libsndfile and its codecs).
DEB = {
    "alsa-utils": "1.2.8-1",
    "sound-theme-freedesktop": "0.8-2",
    "espeak-ng": "1.51+dfsg-10+deb12u2",
    "espeak-ng-data": "1.51+dfsg-10+deb12u2",
    "libespeak-ng1": "1.51+dfsg-10+deb12u2",
    "libpcaudio0": "1.2-2",
    "libsonic0": "0.2.0-12",
    "libpulse0": "16.1+dfsg1-2+b1",
    "libsndfile1": "1.2.0-1+deb12u1",
    "libasyncns0": "0.8-6+b3",
    "libflac12": "1.4.2+ds-2",
    "libvorbis0a": "1.3.7-1",
    "libvorbisenc2": "1.3.7-1",
    "libopus0": "1.3.1-3",
    "libogg0": "1.3.5-3",
    "libmpg123-0": "1.31.2-1+deb12u1",
    "libmp3lame0": "3.100-6",
}

#: Speech texts: name -> (first demo ``chitchat`` record read, 0-based in file order; most words):
#: the records' turns from there on, joined, cut to that many words.
SPEECH = {
    "speech_word": (0, 1),
    "speech_short": (0, 12),
    "speech_turns": (1, 120),
    "speech_long": (1, 1150),
}


@dataclass(frozen=True)
class Conv:
    """One conversion of a corpus file: ``name`` (output file name), ``source`` (corpus file name),
    ``fmt`` (FFmpeg muxer), ``codec`` (encoder), ``rate`` (Hz, 0 = the source's), ``layout``
    (``mono`` / ``stereo``), ``sample_fmt`` (encoder input format, '' = the codec's first),
    ``options`` (encoder), ``container`` (muxer options)."""

    name: str
    source: str
    fmt: str
    codec: str
    rate: int = 0
    layout: str = "mono"
    sample_fmt: str = ""
    options: dict = field(default_factory=dict)
    container: dict = field(default_factory=dict)


CONVERSIONS: tuple[Conv, ...] = (
    Conv("turns_16k.wav", "speech_turns.wav", "wav", "pcm_s16le", 16000),
    Conv("turns_44k_stereo.wav", "speech_turns.wav", "wav", "pcm_s16le", 44100, "stereo"),
    Conv("turns_8k_u8.wav", "speech_turns.wav", "wav", "pcm_u8", 8000),
    Conv("short_48k_f32.wav", "speech_short.wav", "wav", "pcm_f32le", 48000, "stereo"),
    Conv("word_11k.wav", "speech_word.wav", "wav", "pcm_s16le", 11025),
    Conv("turns.flac", "speech_turns.wav", "flac", "flac"),
    Conv("turns_48k_stereo.flac", "speech_turns.wav", "flac", "flac", 48000, "stereo"),
    Conv("front_center.flac", "Front_Center.wav", "flac", "flac"),
    Conv("long_16k.flac", "speech_long.wav", "flac", "flac", 16000),
    Conv("turns_44k_stereo.mp3", "speech_turns.wav", "mp3", "libmp3lame", 44100, "stereo"),
    Conv("turns_22k.mp3", "speech_turns.wav", "mp3", "libmp3lame"),
    Conv("turns_16k_vbr.mp3", "speech_turns.wav", "mp3", "libmp3lame", 16000, options={"q": "4"}),
    Conv("turns_noxing.mp3", "speech_turns.wav", "mp3", "libmp3lame", 24000, container={"write_xing": "0"}),
    Conv("turns_vbr_noxing.mp3", "speech_turns.wav", "mp3", "libmp3lame", 44100, options={"q": "2"},
         container={"write_xing": "0"}),
    Conv("short.mp3", "speech_short.wav", "mp3", "libmp3lame", 32000),
    Conv("word.mp3", "speech_word.wav", "mp3", "libmp3lame"),
    Conv("noise.mp3", "Noise.wav", "mp3", "libmp3lame", 48000),
    Conv("long.mp3", "speech_long.wav", "mp3", "libmp3lame"),
    Conv("turns_44k.m4a", "speech_turns.wav", "ipod", "aac", 44100, "stereo"),
    Conv("turns_16k.m4a", "speech_turns.wav", "ipod", "aac", 16000),
    Conv("short_48k.m4a", "speech_short.wav", "ipod", "aac", 48000),
    Conv("word.m4a", "speech_word.wav", "ipod", "aac", 22050),
    Conv("rear_left.m4a", "Rear_Left.wav", "ipod", "aac"),
    Conv("turns_alac.m4a", "speech_turns.wav", "ipod", "alac", 44100, "stereo"),
    Conv("long.m4a", "speech_long.wav", "ipod", "aac", 24000),
    Conv("turns.ogg", "speech_turns.wav", "ogg", "libopus", 48000),
    Conv("short_stereo.ogg", "speech_short.wav", "ogg", "libopus", 48000, "stereo"),
    Conv("side_right.ogg", "Side_Right.wav", "ogg", "flac"),
)


@dataclass(frozen=True)
class Muxed:
    """A short video with a sound track: ``name``, ``fmt`` (muxer), video ``vcodec`` / ``size`` /
    ``rate`` (fps) / ``image`` (demo image), sound track ``source`` (corpus file) encoded with
    ``acodec`` at ``arate`` Hz; ``seconds`` of picture (the sound may be longer or shorter)."""

    name: str
    fmt: str
    vcodec: str
    acodec: str
    arate: int
    source: str
    image: str
    seconds: float
    size: tuple[int, int] = (160, 96)
    rate: int = 10
    options: dict = field(default_factory=dict)


MUXED: tuple[Muxed, ...] = (
    Muxed("speech_h264_aac.mp4", "mp4", "libx264", "aac", 44100, "speech_turns.wav", "astronaut.png", 6.0),
    Muxed("speech_h264_flac.mkv", "matroska", "libx264", "flac", 22050, "speech_short.wav", "coffee.png", 2.0),
    Muxed("speech_vp9_opus.webm", "webm", "libvpx-vp9", "libopus", 48000, "speech_turns.wav", "rocket.jpg", 3.5,
          options={"deadline": "realtime", "cpu-used": "8"}),
)

#: The broken files of :func:`build_broken_audio`: name -> (corpus file it is made from, how).
BROKEN = {
    "cut.wav": ("turns_16k.wav", "cut at 50 %: the data chunk's size says twice the samples that are there"),
    "cut.flac": ("turns.flac", "cut at 50 %: STREAMINFO's total samples says about twice what decodes"),
    "cut.mp3": ("turns_44k_stereo.mp3", "cut at 50 %: the Xing header's frame count says about twice what decodes"),
    "empty_data.wav": ("turns_16k.wav", "the RIFF/fmt header and an empty data chunk: no sample"),
    "no_audio.mp4": ("", "an h264 clip without a sound track (a silent video)"),
    "not_audio.wav": ("", "a PNG of the demo set named .wav"),
}


def _fetch_debs(cache: Path) -> dict[str, Path]:
    """:data:`DEB` downloaded (``apt-get download name=version``, unpinned if that version is
    gone) into ``cache/debs`` and extracted into ``cache/deb/<name>`` (renamed when complete), as
    the demo builder does (:func:`demo_data.real_sft.fetch_deb`); name -> extracted folder."""
    from demo_data.real_sft import fresh_dir, run_tool

    debdir = cache / "debs"
    debdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, ver in DEB.items():
        have = sorted(f for f in os.listdir(debdir) if f.startswith(name + "_") and f.endswith(".deb"))
        if not have:
            if run_tool(["apt-get", "download", f"{name}={ver}"], cwd=debdir).returncode != 0:
                run_tool(["apt-get", "download", name], cwd=debdir, check=True)
            have = sorted(f for f in os.listdir(debdir) if f.startswith(name + "_") and f.endswith(".deb"))
        dest = cache / "deb" / name
        if not dest.is_dir():
            part = Path(fresh_dir(str(dest) + ".part"))
            run_tool(["dpkg-deb", "-x", str(debdir / have[-1]), str(part)], check=True)
            (part / ".deb").write_text(have[-1] + "\n")
            os.rename(part, dest)
        out[name] = dest
    return out


def _link(src: Path, dest: Path) -> None:
    if not dest.exists():
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)


def _speech_texts(real_data: Path) -> dict[str, str]:
    """:data:`SPEECH` name -> the text read (the demo set's ``chitchat`` turns, in file order)."""
    records: list[list[str]] = []
    with open(real_data / "real_sft.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("source") == "chitchat":
                records.append([t["value"] for t in rec["conversations"]])
    out = {}
    for name, (first, most) in SPEECH.items():
        words: list[str] = []
        for turns in records[first:]:
            words += " ".join(turns).split()
            if len(words) >= most:
                break
        out[name] = " ".join(words[:most])
    return out


def _speak(debs: dict[str, Path], text: str, dest: Path) -> None:
    """``espeak-ng -w dest text`` run from the extracted packages (LD_LIBRARY_PATH), 22,050 Hz mono."""
    libs = [str(d / "usr/lib/x86_64-linux-gnu") for d in debs.values()]
    libs += [str(d / "usr/lib/x86_64-linux-gnu/pulseaudio") for d in debs.values()]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in libs if os.path.isdir(p))}
    data = debs["espeak-ng-data"] / "usr/lib/x86_64-linux-gnu"
    part = dest.with_name(dest.name + ".partial")
    subprocess.run([str(debs["espeak-ng"] / "usr/bin/espeak-ng"), f"--path={data}", "-w", str(part), text],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.replace(part, dest)


def _decoded(path: Path):
    """float32 planar frames ``[channels, n]`` and the rate of the first audio stream of ``path``."""
    import av

    parts, rate = [], 0
    with av.open(str(path)) as src:
        conv = None
        for frame in src.decode(audio=0):
            rate = frame.sample_rate
            conv = conv or av.AudioResampler(format="fltp", layout=frame.layout.name, rate=rate)
            parts += [f.to_ndarray() for f in conv.resample(frame)]
    return np.concatenate(parts, axis=1), rate


def _encode_track(av, out, stream, pcm: np.ndarray, rate: int) -> None:
    """Encode float planar ``pcm`` ``[channels, n]`` at ``rate`` into ``stream`` of ``out``, resampled
    to the stream's rate / layout / sample format, in 1,024-sample frames."""
    ctx = stream.codec_context
    layout = "stereo" if ctx.layout.nb_channels == 2 else "mono"
    if pcm.shape[0] == 1 and layout == "stereo":
        pcm = np.repeat(pcm, 2, axis=0)
    elif pcm.shape[0] == 2 and layout == "mono":
        pcm = pcm.mean(axis=0, keepdims=True)
    res = av.AudioResampler(format=ctx.format.name, layout=layout, rate=ctx.sample_rate)
    pts = 0
    for i in range(0, pcm.shape[1], 1024):
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm[:, i:i + 1024]), format="fltp", layout=layout)
        frame.sample_rate, frame.pts, frame.time_base = rate, pts, Fraction(1, rate)
        pts += frame.samples
        for f in res.resample(frame):
            for pkt in stream.encode(f):
                out.mux(pkt)
    for f in res.resample(None):
        for pkt in stream.encode(f):
            out.mux(pkt)
    for pkt in stream.encode(None):
        out.mux(pkt)


def convert(conv: Conv, src: Path, dest: Path) -> Path:
    """Write ``conv`` of the corpus file ``src`` to ``dest`` (atomically); return ``dest``."""
    import av

    pcm, rate = _decoded(src)
    part = dest.with_name(dest.name + ".partial")
    with av.open(str(part), "w", format=conv.fmt, options=dict(conv.container)) as out:
        stream = out.add_stream(conv.codec, rate=conv.rate or rate, options=dict(conv.options))
        stream.codec_context.layout = conv.layout
        if conv.sample_fmt:
            stream.codec_context.format = conv.sample_fmt
        _encode_track(av, out, stream, pcm, rate)
    os.replace(part, dest)
    return dest


def mux_video(m: Muxed, sound: Path, image: Path, dest: Path) -> Path:
    """Write the video ``m`` (pictures panning over ``image``, sound track from ``sound``) to ``dest``."""
    import av

    from demo_data.video_corpus import _frames

    pcm, rate = _decoded(sound)
    part = dest.with_name(dest.name + ".partial")
    n = round(m.seconds * m.rate)
    with av.open(str(part), "w", format=m.fmt) as out:
        vs = out.add_stream(m.vcodec, rate=m.rate, options=dict(m.options))
        vs.width, vs.height = m.size
        vs.pix_fmt = "yuv420p"
        aus = out.add_stream(m.acodec, rate=m.arate)
        aus.codec_context.layout = "mono"
        for i, rgb in enumerate(_frames(image, m.size, n)):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, m.rate)
            for pkt in vs.encode(frame):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        _encode_track(av, out, aus, pcm, rate)
    os.replace(part, dest)
    return dest


def build_audio_corpus(dest: str | Path, real_data: str | Path, cache: str | Path | None = None) -> list[Path]:
    """The corpus folder ``dest`` (created; module docstring): Debian's sound files (hard links,
    else copies), espeak-ng speech of the demo set's texts (``real_data``: the demo set folder),
    :data:`CONVERSIONS` and :data:`MUXED`. ``cache``: the Debian package cache (default: the demo
    builder's, ``$VLMPACK_DATA_CACHE`` or ``~/.cache/vlmpack/realdata``). Returns the audio files
    and videos with sound, sorted. Files already there are kept (delete ``dest`` to rebuild)."""
    from demo_data import DEFAULT_CACHE

    dest, real_data = Path(dest), Path(real_data)
    dest.mkdir(parents=True, exist_ok=True)
    debs = _fetch_debs(Path(cache or DEFAULT_CACHE))
    for folder in (debs["alsa-utils"] / "usr/share/sounds/alsa",
                   debs["sound-theme-freedesktop"] / "usr/share/sounds/freedesktop/stereo"):
        for src in sorted(folder.iterdir()):
            if src.suffix.lower() in AUDIO_EXTS and src.is_file() and not src.is_symlink():  # links: copies
                _link(src, dest / src.name)
    texts = _speech_texts(real_data)
    for name, text in texts.items():
        if not (dest / f"{name}.wav").exists():
            _speak(debs, text, dest / f"{name}.wav")
    for conv in CONVERSIONS:
        if not (dest / conv.name).exists():
            convert(conv, dest / conv.source, dest / conv.name)
    images = {p.name: p for p in (real_data / "images").rglob("*") if p.is_file()}
    for m in MUXED:
        if not (dest / m.name).exists():
            mux_video(m, dest / m.source, images[m.image], dest / m.name)
    return sorted(p for p in dest.iterdir() if p.suffix.lower() in AUDIO_EXTS + AV_EXTS)


def build_broken_audio(corpus: str | Path, dest: str | Path, real_data: str | Path) -> dict[str, Path]:
    """The :data:`BROKEN` files, made from the corpus folder ``corpus`` (:func:`build_audio_corpus`)
    and the demo set ``real_data`` into ``dest`` (created; files already there are kept). Returns
    name -> path."""
    import av

    from demo_data.video_corpus import _frames

    corpus, dest, real_data = Path(corpus), Path(dest), Path(real_data)
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (source, _) in BROKEN.items():
        path = out[name] = dest / name
        if path.exists():
            continue
        part = path.with_name(path.name + ".partial")
        if name == "no_audio.mp4":
            image = next(p for p in (real_data / "images").rglob("chelsea.png"))
            with av.open(str(part), "w", format="mp4") as o:
                vs = o.add_stream("libx264", rate=10)
                vs.width, vs.height, vs.pix_fmt = 160, 96, "yuv420p"
                for i, rgb in enumerate(_frames(image, (160, 96), 12)):
                    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
                    frame.pts, frame.time_base = i, Fraction(1, 10)
                    for pkt in vs.encode(frame):
                        o.mux(pkt)
                for pkt in vs.encode(None):
                    o.mux(pkt)
            os.replace(part, path)
            continue
        if name == "not_audio.wav":
            data = next(p for p in sorted((real_data / "images").rglob("*.png"))).read_bytes()
        else:
            raw = (corpus / source).read_bytes()
            if name == "empty_data.wav":
                at = raw.find(b"data")
                data = bytearray(raw[:at + 8])
                data[at + 4:at + 8] = (0).to_bytes(4, "little")
                data[4:8] = (len(data) - 8).to_bytes(4, "little")
                data = bytes(data)
            else:
                data = raw[:len(raw) // 2]
        part.write_bytes(data)
        os.replace(part, path)
    return out


@dataclass(frozen=True)
class Dubbed:
    """A demo video given a sound track: ``name``, the demo set's ``video`` (its stream copied, not
    re-encoded), corpus speech ``sound`` encoded with ``acodec`` at ``arate`` Hz, muxed as ``fmt``
    (every video packet first, then the sound: the mp4 is written with its index in front); ``cut``:
    the file is then cut to that fraction of its bytes (the end of the sound track lost, the
    pictures whole)."""

    name: str
    video: str
    sound: str
    fmt: str
    acodec: str
    arate: int
    cut: float | None = None


#: Demo videos with speech dubbed in (:func:`build_dubbed_videos`): a sound track longer than the
#: pictures, one shorter, and one whose sound (longer than the pictures) is cut short.
DUBBED: tuple[Dubbed, ...] = (
    Dubbed("carphone_turns.mp4", "carphone_pristine.mp4", "speech_turns.wav", "mp4", "aac", 16000),
    Dubbed("carphone_word.mkv", "carphone_distorted.mp4", "speech_word.wav", "matroska", "flac", 22050),
    Dubbed("carphone_cut_sound.mp4", "carphone_pristine.mp4", "speech_turns.wav", "mp4", "aac", 44100, 0.9),
)


def dub_video(d: Dubbed, video: Path, sound: Path, dest: Path) -> Path:
    """Write ``d`` (``video``'s pictures, ``sound`` as its sound track) to ``dest`` (atomically)."""
    import av

    pcm, rate = _decoded(sound)
    part = dest.with_name(dest.name + ".partial")
    opts = {"movflags": "faststart"} if d.fmt == "mp4" else {}
    with av.open(str(video)) as src, av.open(str(part), "w", format=d.fmt, options=opts) as out:
        vin = src.streams.video[0]
        vout = out.add_stream_from_template(vin)
        aus = out.add_stream(d.acodec, rate=d.arate)
        aus.codec_context.layout = "mono"
        for pkt in src.demux(vin):
            if pkt.dts is None:
                continue
            pkt.stream = vout
            out.mux(pkt)
        _encode_track(av, out, aus, pcm, rate)
    if d.cut is not None:
        data = part.read_bytes()
        part.write_bytes(data[:int(len(data) * d.cut)])
    os.replace(part, dest)
    return dest


def build_dubbed_videos(corpus: str | Path, dest: str | Path, real_data: str | Path) -> dict[str, Path]:
    """The :data:`DUBBED` videos, from the demo set ``real_data`` and the corpus folder ``corpus``
    (:func:`build_audio_corpus`), into ``dest`` (created; files already there are kept). Returns
    name -> path."""
    corpus, dest = Path(corpus), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    videos = {p.name: p for p in (Path(real_data) / "videos").rglob("*") if p.is_file()}
    out = {}
    for d in DUBBED:
        path = out[d.name] = dest / d.name
        if not path.exists():
            dub_video(d, videos[d.video], corpus / d.sound, path)
    return out
