"""Issue 19 item 11: the size probe and the training decoder agree on image orientation wherever a
file keeps it (PNG chunks after ``IDAT``: XMP, ImageMagick's ``Raw profile type exif``, a second
``eXIf``, an ``eXIf`` before or after the next frame of an animated PNG; TIFF tag 274 and XMP;
JPEG/WebP EXIF and XMP), on the red-team images of :func:`orientation_corpus.orientation_media`.

For each image: the probe's (width, height) at every check level equals what the decoder gives
(``open_image``: ``load()`` + ``ImageOps.exif_transpose``); packed for LLaVA-OneVision (whose
token rule is not symmetric in width/height), the recorded counts equal the collator's and
``verify`` without decoding passes, while an output recorded with the unrotated size (what the
probe gave before) is caught by ``verify`` and refused by the collator.
"""

from __future__ import annotations

import io
import json
import shutil

import pytest
from hostile_corpus import real_png_of
from orientation_corpus import orientation_media
from PIL import Image, ImageOps
from test_check import _edit_json

from vlmpack.media.kinds.image import open_image
from vlmpack.media.probe import CHECKS, clear_cache, probe_bytes, probe_media

_SWAPS = (5, 6, 7, 8)


@pytest.fixture(scope="module")
def media(real_data, tmp_path_factory) -> dict[str, tuple[object, int]]:
    """name -> (path, the orientation the construction intends)."""
    root = tmp_path_factory.mktemp("orient")
    out = {}
    for name, (data, orientation) in orientation_media(real_png_of(real_data)).items():
        (root / name).write_bytes(data)
        out[name] = (root / name, orientation)
    return out


def test_probe_gives_the_decoder_size_in_every_placement(media):
    clear_cache()
    wrong = []
    for name, (path, orientation) in media.items():
        data = path.read_bytes()
        decoded = open_image(data).size
        with Image.open(path) as img:
            assert ImageOps.exif_transpose(img).size == decoded, name
            stored = (img.tag_v2[256], img.tag_v2[257]) if img.format == "TIFF" else img.size
        # the construction has teeth: the decoder applies the intended orientation
        assert decoded == (stored[::-1] if orientation in _SWAPS else stored), name
        for check in CHECKS:
            for info in (probe_media(str(path), "image", check), probe_bytes(data, "image", check)):
                if (info.width, info.height) != decoded:
                    wrong.append(f"{name} {check}: probe {info.width}x{info.height}, decoder {decoded}")
    assert not wrong, "\n".join(wrong)
    # every format and placement is there, and most of them rotate
    assert {p.suffix for p, _ in media.values()} == {".png", ".tiff", ".jpg", ".webp"}
    assert sum(o in _SWAPS for _, o in media.values()) >= 20


def test_png_placements_are_only_visible_after_the_image_data(media):
    """Pillow's header (``info`` before ``load()``) says nothing or something else for each PNG
    whose orientation comes after ``IDAT``: a probe that reads only the header would be wrong."""
    differs = []
    for name, (path, orientation) in media.items():
        if name.endswith(".png") and "after_idat" in name:
            with Image.open(path) as img:
                header = Image.Image.getexif(img).get(0x0112, 1)  # the base method: info only, no load()
            with Image.open(path) as img:  # a new image: getexif() caches its first answer
                img.load()
                assert img.getexif().get(0x0112, 1) == orientation, name
            differs.append(header != orientation)
    assert len(differs) == 12 and sum(differs) >= 8


@pytest.fixture(scope="module")
def ov_out(media, llava_ov_dir, tmp_path_factory):
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    tmp = tmp_path_factory.mktemp("orient_pack")
    for name, (path, _) in media.items():
        shutil.copyfile(path, tmp / name)
    lines = [json.dumps({"id": name, "images": [name], "conversations": [
        {"from": "human", "value": "<image>\nWhich way is up?"}, {"from": "gpt", "value": "This way."}]})
        for name in media]
    (tmp / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp / "out"
    report = run_pack(load_config(input=[str(tmp / "in.jsonl")], media_root=str(tmp), model=str(llava_ov_dir),
                                  seq_len=8192, output=str(out), workers=1, progress=False))
    assert report["samples_packed"] == len(media), report
    return out


def _encode_all(out, llava_ov_dir) -> int:
    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator

    collator = PackCollator(llava_ov_dir)
    return sum(len(collator.encode(raw).sample_ids) for raw in read_packs(out))  # PackMismatchError on a difference


def test_recorded_counts_are_the_collators_and_verify_agrees(ov_out, media, llava_ov_dir, tmp_path):
    from vlmpack.errors import PackMismatchError
    from vlmpack.models import MediaSize, load_model
    from vlmpack.verify import verify_output

    assert _encode_all(ov_out, llava_ov_dir) == len(media)
    assert verify_output(ov_out, workers=1)["problems"] == []

    # the output the probe wrote before: unrotated size and its tokens, every total consistent
    family = load_model(str(llava_ov_dir))
    bad = tmp_path / "out"
    shutil.copytree(ov_out, bad)
    edited = set()

    def unrotate(key, obj):
        for s in obj["samples"]:
            if media[s["id"]][1] not in _SWAPS:
                continue
            m = s["media"][0]
            m["width"], m["height"] = m["height"], m["width"]
            n = family.media_tokens(MediaSize("image", m["width"], m["height"]), sample_images=1)
            delta, m["num_tokens"] = n - m["num_tokens"], n
            s["num_tokens"] += delta
            obj["num_tokens"] += delta
            edited.add(s["id"])
        return obj

    for shard in sorted(p.name for p in bad.glob("*.tar")):
        _edit_json(bad, shard, unrotate)
    assert len(edited) >= 20
    problems = verify_output(bad, workers=1, run_dir=False)["problems"]  # only the recount can see it
    for sid in edited:
        assert any(repr(sid) in p and "pixels but" in p for p in problems), (sid, problems)
    with pytest.raises(PackMismatchError):
        _encode_all(bad, llava_ov_dir)


def test_png_with_too_many_chunks_after_the_image_data_is_refused(media, monkeypatch):
    """A walk cut short would disagree with the decoder, which reads every chunk: past
    ``MAX_PNG_CHUNKS`` the image is rejected (``media_unsupported``) instead."""
    from hostile_corpus import _png_chunk, _png_chunks

    from vlmpack.errors import MediaError
    from vlmpack.media import orientation

    chunks = _png_chunks(media["png_exif_after_idat.png"][0].read_bytes())  # ... IDAT eXIf(8) IEND
    at = next(i for i, (k, _) in enumerate(chunks) if k == b"eXIf")
    chunks[at:at] = [(b"prVt", b"")] * 50
    data = b"\x89PNG\r\n\x1a\n" + b"".join(_png_chunk(k, d) for k, d in chunks)
    decoded = open_image(data).size
    info = probe_bytes(data)
    assert (info.width, info.height) == decoded == Image.open(io.BytesIO(data)).size[::-1]  # eXIf 8 read
    monkeypatch.setattr(orientation, "MAX_PNG_CHUNKS", 40)
    with pytest.raises(MediaError) as e:
        probe_bytes(data)
    assert e.value.reason == "media_unsupported" and "40 chunks" in e.value.detail
