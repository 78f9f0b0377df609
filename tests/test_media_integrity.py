"""Only decodable media are packed (issue 7, items 2 and 5), proven on real images.

- A corpus built from the demo's real images in every accepted format (JPEG baseline, progressive
  and with a real EXIF block, PNG L/LA/P/RGB/RGBA/16-bit/1-bit, Adam7-interlaced PNGs written
  here, an APNG, WebP lossy/lossless, GIF, BMP, TIFF raw/LZW/deflate, MPO), each cut at 10 points
  and bit-flipped at 14 (4 of them in the last 16 bytes, where the zlib/JPEG trailers are), tiny
  real PNG crops (interlaced and not, 1/4/8-bit) cut at every byte and flipped at every bit, plus
  PNGs rebuilt with valid CRCs (IDAT too short, too long, a bad filter byte, a zlib stream ending
  early on a row boundary with the trailer in the same / a later IDAT chunk), EPS/PS/PDF/SVG with
  image names, an empty file, a text file and the demo's own broken images. For every file: the
  default check (``verify``) and ``decode`` accept it exactly when the loader decodes it
  (:func:`vlmpack.train.encode.open_image`: ``Image.open`` + ``load()`` + EXIF transpose), and
  every accepted file also decodes with Energon's plain ``Image.open(...).load()``.
- EPS/PS never start a program (subprocess, spawn and ``shutil.which`` raise) and PIL's EPS
  plugin is never even asked to open them.
- Symlinks in the media root pointing outside it give ``media_outside_root``.
- A pack holding an image that does not decode gives one error naming the pack key and sample id,
  through the collator and through Energon's loader with the vlmpack TaskEncoder.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import EpsImagePlugin, Image

from vlmpack.errors import MediaDecodeError, MediaError
from vlmpack.media.image import IMAGE_FORMATS, png_row_segments
from vlmpack.media.probe import clear_cache, probe_media
from vlmpack.pack.validate import validate_sample
from vlmpack.records import Locator, Media, Rejection, Sample
from vlmpack.train.encode import open_image

IMG = "images"
SK = f"{IMG}/skimage_data/skimage/data"
TUX = f"{IMG}/tuxpaint/usr/share/tuxpaint/stamps"
MATE = f"{IMG}/mate/usr/share/backgrounds/mate"
# real files used as they are: (label, path under the demo folder)
REAL = [
    ("jpeg-baseline", f"{SK}/rocket.jpg"),
    ("jpeg-progressive", f"{MATE}/nature/FreshFlower.jpg"),
    ("png-L", f"{SK}/cell.png"),
    ("png-RGBA", f"{SK}/horse.png"),
    ("png-LA", f"{TUX}/clothes/t_glove.png"),
    ("png-P", f"{TUX}/clothes/t_pants.png"),
    ("png-RGB", f"{TUX}/seasonal/easter/chick-hatched.png"),
]
N_CUTS, N_FLIPS = 10, 14


# ------------------------------------------------------------------------------ PNG writing
def _chunk(cid: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + cid + data + struct.pack(">I", zlib.crc32(cid + data))


def _png(ihdr: bytes, idat_chunks: list[bytes]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + b"".join(_chunk(b"IDAT", c) for c in idat_chunks) + \
        _chunk(b"IEND", b"")


def _idat(png: bytes) -> bytes:
    """The concatenated IDAT data of a PNG."""
    out, pos = b"", 8
    while pos + 8 <= len(png):
        n, cid = struct.unpack(">I4s", png[pos:pos + 8])
        out += png[pos + 8:pos + 8 + n] if cid == b"IDAT" else b""
        pos += 12 + n
    return out


def _split(data: bytes, sizes: tuple[int, ...]) -> list[bytes]:
    out, i, k = [], 0, 0
    while i < len(data):
        out.append(data[i:i + sizes[k % len(sizes)]])
        i, k = i + sizes[k % len(sizes)], k + 1
    return out


def _pack_rows(a: np.ndarray, depth: int) -> list[bytes]:
    """Rows of samples (uint8 [h, w*c]) as PNG bytes at ``depth`` bits (1, 2, 4, 8)."""
    if depth == 8:
        return [r.tobytes() for r in a]
    bits = ((a[..., None] >> np.arange(depth - 1, -1, -1)) & 1).reshape(a.shape[0], -1).astype(np.uint8)
    return [np.packbits(r).tobytes() for r in bits]


def _adam7_png(img: Image.Image, depth: int = 8) -> bytes:
    """An Adam7-interlaced PNG of ``img`` (L or RGBA), filter type 0, written here (PIL cannot)."""
    a = np.asarray(img)
    if depth < 8:
        a = a >> (8 - depth)
    h, w = a.shape[:2]
    ctype, ch = {"L": (0, 1), "RGBA": (6, 4)}[img.mode]
    raw = b""
    for r0, c0, dr, dc in zip((0, 0, 4, 0, 2, 0, 1), (0, 4, 0, 2, 0, 1, 0), (8, 8, 8, 4, 4, 2, 2),
                              (8, 8, 4, 4, 2, 2, 1)):
        sub = a[r0::dr, c0::dc]
        if sub.size:  # PNG spec 8.2: an empty pass has no rows, not even filter bytes
            raw += b"".join(b"\x00" + r for r in _pack_rows(sub.reshape(sub.shape[0], -1), depth))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1)
    assert len(raw) == sum(r * n for _, r, n in png_row_segments(w, h, depth * ch, True))
    return _png(ihdr, [zlib.compress(raw, 9)])


def _plain_rows(img: Image.Image) -> tuple[bytes, bytes, int]:
    """(IHDR, filtered rows with filter byte 0, row size) of an 8-bit RGB image, non-interlaced."""
    a = np.asarray(img.convert("RGB"))
    h, w = a.shape[:2]
    return struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0), b"".join(b"\x00" + r.tobytes() for r in a), 3 * w + 1


# ------------------------------------------------------------------------------ the corpus
def _save(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _sources(real_data: Path) -> dict[str, bytes]:
    """Good files of every accepted format, from real demo images."""
    src = {label: (real_data / rel).read_bytes() for label, rel in REAL}
    hubble = Image.open(real_data / SK / "hubble_deep_field.jpg").convert("RGB").crop((100, 100, 333, 277))
    horse = Image.open(real_data / SK / "horse.png")
    cell = Image.open(real_data / SK / "cell.png").convert("L").crop((0, 0, 171, 97))
    aqua = Image.open(real_data / MATE / "nature/Aqua.jpg")
    exif = Image.Exif()
    exif.load(aqua.info["exif"])
    exif[0x0112] = 6
    src["jpeg-real-exif-rot6"] = _save(aqua.convert("RGB").resize((320, 200)), "JPEG", exif=exif.tobytes())
    src["png-16bit"] = _save(cell.convert("I;16"), "PNG")
    src["png-1bit"] = _save(cell.convert("1"), "PNG")
    src["png-adam7-RGBA"] = _adam7_png(horse.convert("RGBA").crop((0, 0, 123, 77)))
    src["png-adam7-L4"] = _adam7_png(cell, depth=4)
    src["png-adam7-1bit-3x3"] = _adam7_png(cell.crop((0, 0, 3, 3)), depth=1)  # passes with empty rows
    src["png-exif-rot6"] = _save(hubble, "PNG", exif=exif.tobytes())
    src["apng"] = _save(hubble, "PNG", save_all=True, append_images=[hubble.rotate(90, expand=False)])
    src["webp-lossy"] = _save(hubble, "WEBP", quality=80)
    src["webp-lossless"] = _save(hubble, "WEBP", lossless=True)
    src["gif"] = _save(hubble.convert("P"), "GIF")
    src["gif-animated"] = _save(hubble.convert("P"), "GIF", save_all=True, append_images=[cell.convert("P")])
    src["bmp-rgb"] = _save(hubble, "BMP")
    src["bmp-p"] = _save(hubble.convert("P"), "BMP")
    src["tiff-raw"] = _save(hubble, "TIFF")
    src["tiff-lzw"] = _save(hubble, "TIFF", compression="tiff_lzw")
    src["tiff-deflate"] = _save(hubble, "TIFF", compression="tiff_adobe_deflate")
    src["mpo"] = _save(hubble, "MPO", save_all=True, append_images=[hubble.transpose(Image.Transpose.FLIP_LEFT_RIGHT)])
    return src


def _tiny_pngs(real_data: Path) -> dict[str, bytes]:
    """Tiny real crops, cut at every byte and flipped at every bit by the corpus: where zlib could
    give the last row only after the buffer's last byte was consumed, PIL's ZipDecode still needs
    more data (found by an exhaustive sweep of 48 such images; these 4 hold its cases)."""
    cell = Image.open(real_data / SK / "cell.png").convert("L")
    a7 = _adam7_png(cell.crop((3, 3, 22, 14)), depth=1)
    return {
        # IDAT re-split into 1-3 byte chunks: PIL hands the decoder one chunk at a time
        "tiny-adam7-1bit-19x11-idat-1to3": _png(a7[16:29], _split(_idat(a7), (1, 2, 3))),
        "tiny-adam7-1bit-3x3": _adam7_png(cell.crop((40, 40, 43, 43)), depth=1),
        "tiny-adam7-4bit-8x8": _adam7_png(cell.crop((60, 20, 68, 28)), depth=4),
        "tiny-1bit-4x13": _save(cell.crop((90, 10, 94, 23)).convert("1"), "PNG"),
        "tiny-rgb-5x2": _save(Image.open(real_data / SK / "rocket.jpg").convert("RGB").crop((200, 200, 205, 202)),
                              "PNG"),
    }


def _every_cut_and_flip(label: str, data: bytes) -> list[tuple[str, bytes]]:
    out = [(label, data)] + [(f"{label}-cut{k}", data[:k]) for k in range(1, len(data))]
    for pos in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            out.append((f"{label}-flip{pos}.{bit}", bytes(flipped)))
    return out


def _variants(label: str, data: bytes, rng: random.Random) -> list[tuple[str, bytes]]:
    n = len(data)
    cuts = sorted({max(1, int(n * f)) for f in (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98)} | {n - 1, n - 4, n - 12})
    out = [(label, data)] + [(f"{label}-cut{c}", data[:c]) for c in cuts[:N_CUTS]]
    spots = [rng.randrange(n) for _ in range(N_FLIPS - 4)] + [n - 1 - rng.randrange(min(16, n)) for _ in range(4)]
    for pos in spots:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        out.append((f"{label}-flip{pos}", bytes(flipped)))
    return out


def _crc_valid_pngs(real_data: Path) -> list[tuple[str, bytes]]:
    """PNGs whose chunks all have valid CRCs but whose image data is wrong (or oddly right)."""
    img = Image.open(real_data / SK / "rocket.jpg").convert("RGB").crop((0, 0, 97, 61))
    ihdr, raw, row = _plain_rows(img)
    z = zlib.compress(raw, 9)
    early = zlib.compress(raw[: 20 * row], 9)  # a complete zlib stream holding 20 of 61 rows
    bad_filter = bytearray(raw)
    bad_filter[30 * row] = 5
    return [
        ("crc-valid-good", _png(ihdr, [z])),
        ("crc-valid-good-split-idat", _png(ihdr, [z[:100], z[100:-4], z[-4:]])),
        ("crc-valid-short-idat", _png(ihdr, [z[: len(z) // 2]])),
        ("crc-valid-short-idat-last-bytes", _png(ihdr, [z[:-3]])),
        ("crc-valid-idat-of-fewer-rows", _png(ihdr, [zlib.compress(raw[:-row], 9)])),
        ("crc-valid-idat-of-more-rows", _png(ihdr, [zlib.compress(raw + raw[:row], 9)])),
        ("crc-valid-filter-byte-5", _png(ihdr, [zlib.compress(bytes(bad_filter), 9)])),
        ("crc-valid-stream-ends-on-row-20", _png(ihdr, [early])),
        ("crc-valid-stream-ends-on-row-20-trailer-apart", _png(ihdr, [early[:-4], early[-4:]])),
        ("crc-valid-stream-ends-mid-row", _png(ihdr, [zlib.compress(raw[: 20 * row + 7], 9)])),
        ("crc-valid-no-idat", _png(ihdr, [])),
    ]


def _foreign(real_data: Path) -> list[tuple[str, bytes]]:
    img = Image.open(real_data / SK / "rocket.jpg").convert("RGB").crop((0, 0, 64, 48))
    broken = real_data / IMG / "broken"
    return [
        ("eps-as-png", _save(img, "EPS")),
        ("ps-as-jpg", b"%!PS-Adobe-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"),
        ("pdf-as-png", _save(img, "PDF")),
        ("svg-as-png", (broken / "vector.svg").read_bytes()),
        ("empty", b""),
        ("text-as-jpg", b"just some text, not an image\n" * 10),
        ("ppm-as-png", _save(img, "PPM")),  # a real image format PIL reads, but not an accepted one
        *[(f"demo-broken-{p.name}", p.read_bytes()) for p in sorted(broken.iterdir())],
    ]


@pytest.fixture(scope="module")
def corpus(real_data, tmp_path_factory) -> list[tuple[str, Path]]:
    rng = random.Random(7)
    out = tmp_path_factory.mktemp("corpus")
    files = [v for label, data in _sources(real_data).items() for v in _variants(label, data, rng)]
    files += [v for label, data in _tiny_pngs(real_data).items() for v in _every_cut_and_flip(label, data)]
    files += _crc_valid_pngs(real_data) + _foreign(real_data)
    paths = []
    for i, (label, data) in enumerate(files):
        path = out / f"{i:04d}-{label}.png"  # the name's extension never matters
        path.write_bytes(data)
        paths.append((label, path))
    return paths


def _loader_decodes(path: Path) -> bool:
    try:
        open_image(path.read_bytes(), where=str(path))
        return True
    except MediaDecodeError:
        return False


def _accepted(path: Path, check: str) -> bool:
    try:
        probe_media(str(path), "image", check)
        return True
    except MediaError as e:
        assert e.reason in ("media_undecodable", "media_unsupported"), (path, e.reason, e.detail)
        assert "\n" not in e.detail
        return False


def test_default_check_accepts_exactly_what_the_loader_decodes(corpus):
    clear_cache()
    verdicts = {}
    for label, path in corpus:
        truth = _loader_decodes(path)
        for check in ("verify", "decode"):
            assert _accepted(path, check) == truth, (label, check, "loader decodes" if truth else "loader fails")
        if truth:  # Energon's own decoder: plain Image.open (no formats=) + load()
            with Image.open(path) as im:
                im.load()
        verdicts[label] = truth
    # the corpus must have teeth: every source is accepted as written, and damaged in ways that are
    # rejected and in ways that still decode (bit flips in pixel data)
    sources = {label for label, _ in corpus if "-cut" not in label and "-flip" not in label
               and not label.startswith(("crc-valid", "eps", "ps-", "pdf", "svg", "empty", "text", "ppm", "demo"))}
    assert all(verdicts[s] for s in sources)
    for s in sources:
        assert not all(verdicts[k] for k in verdicts if k.startswith(s + "-cut")), s
    assert sum(not v for v in verdicts.values()) > 3000 and sum(verdicts.values()) > 300
    formats = {Image.open(p).format for label, p in corpus if label in sources}
    assert formats == set(IMAGE_FORMATS)
    assert not verdicts["crc-valid-short-idat"] and not verdicts["crc-valid-filter-byte-5"]
    # PIL's ZipDecode ends an image whose zlib stream stops on a row boundary, when it sees the
    # stream end in the same call: the check must follow both ways
    assert verdicts["crc-valid-stream-ends-on-row-20"] and not verdicts["crc-valid-stream-ends-on-row-20-trailer-apart"]


def _verdict(decide, data: bytes) -> str | None:
    """None when ``decide(data)`` passes, else its one-line message."""
    try:
        decide(data)
        return None
    except MediaDecodeError as e:
        assert "\n" not in str(e)
        return str(e)


def test_the_gates_decode_refuses_exactly_what_the_loader_refuses(corpus):
    """``vlmpack check``'s decode of a stored member (``check_stored_image``: the media check's
    equivalent of ``load()``, no pixels) refuses exactly what the loader's ``open_image`` refuses on
    every file of the corpus (EXIF-rotated, 16-bit, 1-bit, palette, RGBA, animated, and every cut
    and flip), with a message that names the member."""
    from vlmpack.media.kinds.image import check_stored_image

    every_mode = []  # every mode PIL opens these formats in (the conversion to RGB is checked on one pixel)
    for mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16", "I;16B", "F", "CMYK", "YCbCr", "LAB"):
        img = Image.new("RGB", (37, 23), (10, 200, 30)).convert(mode)
        for fmt in ("PNG", "TIFF", "JPEG", "BMP", "GIF", "WEBP"):
            try:
                every_mode.append((f"{mode}-{fmt}", _save(img, fmt, **({"transparency": 3} if mode == "P" else {}))))
            except (OSError, KeyError, ValueError):  # a mode the format cannot hold
                continue
    assert len({Image.open(io.BytesIO(data)).mode for _, data in every_mode}) >= 12
    refused = 0
    for label, data in [(label, path.read_bytes()) for label, path in corpus] + every_mode:
        where = f"shard/pack part {label}"
        want = _verdict(lambda b, w=where: open_image(b, where=w), data)
        got = _verdict(lambda b, w=where: check_stored_image(b, "img0.png", w), data)
        assert (got is None) == (want is None), (label, got, want)
        assert got is None or got.startswith(where + ": image does not decode (")
        refused += got is not None
    assert refused > 3000 and len(corpus) + len(every_mode) - refused > 300


def test_header_check_still_opens_only(corpus):
    """``header`` rejects a subset of what the default rejects (never a decodable image)."""
    clear_cache()
    for label, path in corpus:
        if _accepted(path, "verify"):
            assert _accepted(path, "header"), label


def test_foreign_formats_are_named_and_never_run_a_program(real_data, tmp_path, monkeypatch):
    calls = []

    def forbidden(*a, **k):
        calls.append(a[:1])
        raise AssertionError("a data file started a program")

    for mod, name in ((subprocess, "Popen"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"),
                      (shutil, "which")):
        monkeypatch.setattr(mod, name, forbidden)
    opened = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: opened.append(self))
    clear_cache()
    for label, data in _foreign(real_data):
        path = tmp_path / f"{label}.png"
        path.write_bytes(data)
        late_damage = label in ("demo-broken-truncated.png", "demo-broken-garbled_idat.png")  # header opens them
        for check in ("verify", "decode") if late_damage else ("header", "verify", "decode"):
            with pytest.raises(MediaError) as e:
                probe_media(str(path), "image", check)
            assert e.value.reason == "media_undecodable"
        if label.startswith(("eps", "ps-")):
            assert "EPS is not an accepted image format" in e.value.detail
        if label.startswith("pdf"):
            assert "PDF is not an accepted image format" in e.value.detail
        with pytest.raises(MediaDecodeError, match="pack 'p1' sample 's1'"):
            open_image(data, where="pack 'p1' sample 's1' part img0.png")
    assert calls == [] and opened == []


# ------------------------------------------------------------------------------ symlinks
def _sample(path: Path) -> Sample:
    return Sample("s", [{"role": "user", "content": [{"type": "image", "index": 0}]}],
                  [Media(kind="image", ref=path.name, path=str(path))], Locator("f", 1, 0))


def test_symlinks_leaving_the_media_root_are_rejected(real_data, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    real = real_data / SK / "rocket.jpg"
    shutil.copy(real, outside / "secret.jpg")
    shutil.copy(real, root / "sub" / "inside.jpg")
    (root / "link_out.jpg").symlink_to(outside / "secret.jpg")
    (root / "link_in.jpg").symlink_to(root / "sub" / "inside.jpg")
    (root / "dir_out").symlink_to(outside, target_is_directory=True)
    (root / "link_abs_real.jpg").symlink_to(real)
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)  # the media root itself may be a symlink
    cases = {
        root / "link_out.jpg": False,
        root / "dir_out" / "secret.jpg": False,
        root / "link_abs_real.jpg": False,
        root / "link_in.jpg": True,
        root / "sub" / "inside.jpg": True,
        alias / "link_in.jpg": True,
        alias / "link_out.jpg": False,
    }
    for path, inside in cases.items():
        media_root = str(alias if str(path).startswith(str(alias)) else root)
        res = validate_sample(_sample(path), media_root=media_root)
        if inside:
            assert isinstance(res, Sample), (path, res)
        else:
            assert isinstance(res, Rejection) and res.reason == "media_outside_root", (path, res)
            assert "symlinks followed" in res.detail and "--allow-absolute-media" in res.detail
        # opt-out, and the old behaviour without a media root
        assert isinstance(validate_sample(_sample(path), media_root=media_root, allow_absolute_media=True), Sample)
        assert isinstance(validate_sample(_sample(path)), Sample)
    with pytest.raises(MediaError) as e:  # outside wins over missing: nothing is said about the target
        (root / "dangling.jpg").symlink_to(outside / "nope.jpg")
        probe_media(str(root / "dangling.jpg"), media_root=str(root))
    assert e.value.reason == "media_outside_root"


# ------------------------------------------------------------------------------ training side
@pytest.fixture(scope="module")
def broken_pack(real_data, model_dir, tmp_path_factory):
    """A copy of a real ``vlmpack pack`` output where one image of a pack's non-first sample is
    overwritten in place (same size: the tar and its .idx stay valid) so that it cannot decode."""
    from demo_data.packs import demo_packs

    from vlmpack.packfmt import read_packs

    src = demo_packs(real_data, model_dir, seq_len=2048, n_lines=60)
    out = tmp_path_factory.mktemp("broken") / "packs"
    shutil.copytree(src, out)
    import json

    for pack in read_packs(out):
        samples = json.loads(pack["json"])["samples"]
        hit = next(((s["id"], m["part"]) for s in samples[1:] for m in s["media"]), None)
        if hit:
            break
    else:
        pytest.fail("no pack with an image in a non-first sample")
    sid, part = hit
    key = pack["__key__"]
    member = f"{key}.{part}"
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tf:
            names = {m.name: m for m in tf.getmembers()}
        if member in names:
            m = names[member]
            with open(shard, "r+b") as f:
                f.seek(m.offset_data + m.size // 2)
                f.write(b"\x00" * (m.size - m.size // 2))
            break
    return out, key, sid, part


def test_collator_names_pack_and_sample_of_an_undecodable_image(broken_pack, model_dir):
    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator

    out, key, sid, part = broken_pack
    pack = next(p for p in read_packs(out) if p["__key__"] == key)
    assert not _loader_decodes_bytes(pack[part])
    with pytest.raises(MediaDecodeError) as e:
        PackCollator(model_dir).encode(pack)
    msg = str(e.value)
    assert f"pack {key!r}" in msg and f"sample {sid!r}" in msg and part in msg and "\n" not in msg


def _loader_decodes_bytes(data: bytes) -> bool:
    try:
        open_image(data)
        return True
    except MediaDecodeError:
        return False


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.usefixtures("frozen_objects")
def test_energon_loader_names_pack_and_sample_of_an_undecodable_image(broken_pack, model_dir, caplog):
    pytest.importorskip("megatron.energon")
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from megatron.energon.errors import FatalSampleError

    from vlmpack.energon.task_encoder import VlmpackTaskEncoder

    out, key, sid, part = broken_pack

    def load(**te_options):
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = get_train_dataset(str(out), batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None,
                               worker_config=wc, task_encoder=VlmpackTaskEncoder(str(model_dir), **te_options),
                               auto_decode=False, repeat=False)
        return [k for b in get_loader(ds) for k in b["__keys__"]]

    with pytest.raises(FatalSampleError) as e:  # fail fast: Energon's fatal error, naming the pack and sample
        load(on_bad_pack="fatal")
    assert f"pack {key!r}" in str(e.value) and f"sample {sid!r}" in str(e.value) and "MediaDecodeError" in str(e.value)
    with caplog.at_level("WARNING", logger="vlmpack.energon.task_encoder"):
        keys = load()  # default "skip": one log line naming the pack and the sample, and it goes on
    logged = [r.getMessage() for r in caplog.records if r.name == "vlmpack.energon.task_encoder"]
    assert not any(k.endswith(key) for k in keys) and len(keys) > 0
    assert len(logged) == 1 and f"pack {key!r}" in logged[0] and f"sample {sid!r}" in logged[0]
