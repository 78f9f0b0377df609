"""VALIDATE stage and media probing on the real demo set: sizes (and vlmpack's decoded pixels) as
transformers' ``load_image`` gives them after EXIF orientation, the check levels against the real
broken images, size limits, videos, cache, speed."""

from __future__ import annotations

import io
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlmpack.errors import MediaError
from vlmpack.media.probe import clear_cache, probe_media
from vlmpack.media.video import probe_video
from vlmpack.pack.validate import validate_sample
from vlmpack.readers import read_range, split_ranges
from vlmpack.records import Locator, Media, ReadStats, Rejection, Sample


def _pil_truth(path: str) -> tuple[int, int, str]:
    """Width and height of ``path`` as transformers' ``load_image`` decodes it (EXIF orientation applied),
    and its format; asserts that vlmpack's decode of the file's bytes (``open_image``, what the collator
    does with a pack's image part) gives the same pixels, so that the every-image sweeps may hand the
    collator's decode to the reference processor (``image_memo.reference_image``)."""
    from transformers.image_utils import load_image

    from vlmpack.media.kinds.image import open_image

    with Image.open(path) as img:
        fmt = img.format
    want = load_image(path)
    got = open_image(Path(path).read_bytes())
    assert got.size == want.size and np.array_equal(np.asarray(got), np.asarray(want)), path
    return (*want.size, fmt)


def _sample(path: str, kind: str = "image") -> Sample:
    return Sample(
        "s",
        [{"role": "user", "content": [{"type": kind, "index": 0}]}],
        [Media(kind=kind, ref=os.path.basename(path), path=str(path))],
        Locator("f", 1, 0),
    )


def test_real_sizes_and_pixels_equal_load_image(real_data):
    clear_cache()
    samples = [
        validate_sample(s) for s in read_range(str(real_data / "real_sft.jsonl"), media_root=str(real_data))
    ]
    assert all(isinstance(s, Sample) for s in samples)
    seen: dict[str, tuple] = {}
    n_refs = 0
    for s in samples:
        for m in s.media:
            n_refs += 1
            if m.path not in seen:
                seen[m.path] = (*_pil_truth(m.path), os.path.getsize(m.path))
            assert (m.width, m.height, m.format, m.nbytes) == seen[m.path]
    assert n_refs > len(seen) > 1000  # many samples share images: the cache matters


_BROKEN = ["truncated.png", "garbled_idat.png", "empty.jpg", "not_an_image.jpg", "vector.svg"]


@pytest.mark.parametrize("check", ["header", "verify", "decode"])
def test_check_levels_on_the_real_broken_images(real_data, check):
    clear_cache()
    broken = real_data / "images" / "broken"
    assert sorted(_BROKEN) == sorted(os.listdir(broken))
    caught = set()
    for name in _BROKEN:
        res = validate_sample(_sample(str(broken / name)), check=check)
        if isinstance(res, Rejection):
            assert res.reason == "media_undecodable" and name in res.detail and "\n" not in res.detail
            caught.add(name)
    # PNG damage after the header (truncated data, a corrupt IDAT chunk) needs at least "verify"
    late = {"truncated.png", "garbled_idat.png"}
    assert caught == (set(_BROKEN) - late if check == "header" else set(_BROKEN))


def test_missing_and_directory_media(real_data, tmp_path):
    for path in (tmp_path / "nope.png", real_data / "images"):
        res = validate_sample(_sample(str(path)))
        assert isinstance(res, Rejection) and res.reason == "media_missing"


def _real_image(real_data, name="hubble_deep_field.jpg") -> Image.Image:
    return Image.open(real_data / "images/skimage_data/skimage/data" / name)


def _png_chunks(data: bytes) -> list[bytes]:
    out, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        out.append(data[pos : pos + 12 + length])
        pos += 12 + length
    return out


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "PNG-exif-after-idat"])
def test_exif_orientation_like_exif_transpose(real_data, tmp_path, orientation, fmt):
    img = _real_image(real_data).crop((0, 0, 120, 70))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, fmt.split("-")[0], exif=exif.tobytes())
    data = buf.getvalue()
    if fmt == "PNG-exif-after-idat":  # eXIf may follow the image data: PIL finds it only after load()
        chunks = _png_chunks(data)
        ex = [c for c in chunks if c[4:8] == b"eXIf"]
        rest = [c for c in chunks if c[4:8] not in (b"eXIf", b"IEND")]
        data = data[:8] + b"".join(rest + ex + [chunks[-1]])
    path = tmp_path / f"o{orientation}.{fmt[:3].lower()}"
    path.write_bytes(data)
    want = _pil_truth(str(path))
    assert want[:2] == ((70, 120) if orientation >= 5 else (120, 70))
    for check in ("header", "verify", "decode"):
        info = probe_media(str(path), "image", check)
        assert (info.width, info.height, info.format) == want


def test_aspect_ratio_and_min_side(real_data, tmp_path):
    img = _real_image(real_data)
    for size, ok in (((1000, 5), True), ((1000, 4), False), ((3, 700), False)):
        path = tmp_path / f"{size[0]}x{size[1]}.png"
        img.resize(size).save(path)
        res = validate_sample(_sample(str(path)))
        assert isinstance(res, Sample) == ok, res
        if not ok:
            assert res.reason == "media_unsupported" and "aspect ratio" in res.detail
    digit = next((real_data / "images/derived/sklearn_digits").iterdir())
    assert isinstance(validate_sample(_sample(str(digit))), Sample)  # 8x8: accepted by default
    res = validate_sample(_sample(str(digit)), min_side=28)
    assert isinstance(res, Rejection) and res.reason == "media_unsupported" and "8x8" in res.detail


def test_cache_sees_replaced_files(real_data, tmp_path):
    path = tmp_path / "a.png"
    shutil.copy(real_data / "images/broken/garbled_idat.png", path)
    assert isinstance(validate_sample(_sample(str(path)), check="header"), Sample)
    assert isinstance(validate_sample(_sample(str(path))), Rejection)
    _real_image(real_data).crop((0, 0, 40, 30)).save(path)
    res = validate_sample(_sample(str(path)))
    assert isinstance(res, Sample) and (res.media[0].width, res.media[0].height) == (40, 30)


def test_videos_get_their_header_facts(real_data):
    stats = ReadStats()
    samples = list(
        read_range(str(real_data / "real_sft_video.jsonl"), media_root=str(real_data), stats=stats)
    )
    assert stats.records == len(samples) > 0
    for s in samples:
        assert isinstance(s, Sample) and s.kind == "video"
        s = validate_sample(s)
        assert isinstance(s, Sample)
        for m in s.media:
            h = probe_video(m.path, m.path)  # container header (tests/test_video.py: == full decode)
            assert m.kind == "video" and m.nbytes == os.path.getsize(m.path) and m.format == "mp4"
            assert (m.width, m.height, m.frames, m.fps, m.duration_s) == (h.width, h.height, h.frames, h.fps,
                                                                         h.duration_s) and m.frames > 0
    missing = _sample(str(real_data / "videos" / "nope.mp4"), kind="video")
    res = validate_sample(missing)
    assert isinstance(res, Rejection) and res.reason == "media_missing"


def test_unknown_check_level_is_an_error(real_data):
    with pytest.raises(ValueError, match="unknown media check"):
        validate_sample(_sample(str(real_data / "images/broken/empty.jpg")), check="pixels")
    with pytest.raises(MediaError):
        probe_media(str(real_data / "images/broken/empty.jpg"), "image", "header")


def test_read_and_validate_real_set_accepts_every_good_sample(real_data):
    """Reading + validating (default check) the 5,783 real samples, cold cache: all accepted.
    (Its speed is measured in ``bench/bench_pack.py``, never asserted in a test.)"""
    clear_cache()
    path = str(real_data / "real_sft.jsonl")
    n = 0
    for start, end, first in split_ranges(path):
        for s in read_range(path, start, end, first, media_root=str(real_data)):
            n += isinstance(validate_sample(s), Sample)
    assert n == 5783
