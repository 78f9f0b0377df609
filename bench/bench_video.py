"""Video counting speed: header probe vs full decode, per video sample.

    python bench/bench_video.py [--repeat 3] [--data DIR]

The video corpus of the test suite (the demo set's real videos + the clips
``tools/demo_data/video_corpus.py`` encodes from demo images: mp4/mov/mkv/webm/avi, 10 codecs,
CFR/VFR, up to 13 s and 60 fps), each file one video sample. Two ways to count each sample's
video tokens with the Qwen2.5-VL and Qwen3-VL rules:

- header: what ``vlmpack pack`` does: :func:`vlmpack.media.video.probe_video` (container header;
  packets counted without decoding where the header has no frame count) -> ``media_tokens``;
- full decode: PyAV decodes every frame of the first video stream (frame count, size, span of
  the timestamps), then the same rule on those figures (the count such a decode would give).

Both counts must agree (asserted); the table gives samples/s of each and their ratio. One core,
cold probe cache, median of ``--repeat``. Also called by ``bench/bench_pack.py --video-only``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from fractions import Fraction
from pathlib import Path

from demo_set import CACHE, add_data_option, build_demo_data, demo_model_dir

# isort: split
from demo_data.model_dirs import build_qwen3_vl_model_dir  # tools/ is on sys.path once demo_set is imported
from demo_data.video_corpus import build_video_corpus

from vlmpack.errors import MediaRuleError
from vlmpack.media.video import probe_video
from vlmpack.models import MediaSize, load_model


def decoded_size(path: Path) -> MediaSize:
    """Full PyAV decode of the first video stream -> ``MediaSize`` (frames decoded, frame size,
    duration = span of the frame timestamps in seconds, fps = frames / duration)."""
    import av

    with av.open(str(path)) as c:
        st = c.streams.video[0]
        n, w, h, lo, hi = 0, 0, 0, None, None
        for fr in c.decode(st):
            n, w, h = n + 1, fr.width, fr.height
            if fr.pts is not None:
                lo = fr.pts if lo is None else min(lo, fr.pts)
                hi = max(hi or 0, fr.pts + (fr.duration or 0))
        dur = float(Fraction(hi - lo) * st.time_base) if lo is not None and hi > lo else None
    return MediaSize("video", w, h, dur, n / dur if dur else None, n)


def header_size(path: Path) -> MediaSize:
    """The container header as ``vlmpack pack`` reads it -> ``MediaSize``."""
    head = probe_video(str(path), path.name)
    return MediaSize("video", head.width, head.height, head.duration_s, head.fps, head.frames)


def _tokens(family, media: MediaSize) -> int | str:
    """Media tokens, or the refusal (``MediaRuleError``: e.g. fewer frames than the temporal patch),
    which both paths must give alike."""
    try:
        return family.media_tokens(media)
    except MediaRuleError as e:
        return f"refused: {e}"


def video_count_table(data: Path, repeat: int) -> None:
    """Print samples/s of header counting vs full-decode counting over the video corpus."""
    videos = build_video_corpus(CACHE / "video_corpus", data)
    families = {"qwen2_5_vl": load_model(str(demo_model_dir())),
                "qwen3_vl": load_model(str(build_qwen3_vl_model_dir(CACHE / "qwen3_vl")))}
    seconds = sum(decoded_size(v).duration_s or 0 for v in videos)
    rows = []
    for name, fam in families.items():
        timed = {}
        for how, size in (("header", header_size), ("full decode", decoded_size)):
            times, counts = [], None
            for _ in range(repeat):
                t = time.perf_counter()
                counts = [_tokens(fam, size(v)) for v in videos]
                times.append(time.perf_counter() - t)
            timed[how] = (statistics.median(times), counts)
        assert timed["header"][1] == timed["full decode"][1], f"{name}: header and decoded counts differ"
        th, td = timed["header"][0], timed["full decode"][0]
        rows.append((name, len(videos), th, td, sum(n for n in timed["header"][1] if isinstance(n, int))))
    print(f"\nvideo token counting over {len(videos)} real video files ({seconds:.0f} s of video), one core, "
          f"median of {repeat}; counts equal on both paths\n")
    print(f"| {'family':<11} | {'videos':>6} | {'tokens':>9} | {'header s':>8} | {'header samples/s':>16} | "
          f"{'decode s':>8} | {'decode samples/s':>16} | {'decode / header':>15} |")
    print(f"|{'-' * 13}|{'-' * 7}:|{'-' * 10}:|{'-' * 9}:|{'-' * 17}:|{'-' * 9}:|{'-' * 17}:|{'-' * 16}:|")
    for name, n, th, td, tokens in rows:
        print(f"| {name:<11} | {n:>6} | {tokens:>9,} | {th:>8.3f} | {n / th:>16,.0f} | {td:>8.3f} | "
              f"{n / td:>16,.1f} | {td / th:>14.0f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    add_data_option(ap)
    args = ap.parse_args()
    video_count_table(build_demo_data(args.data), args.repeat)


if __name__ == "__main__":
    main()
