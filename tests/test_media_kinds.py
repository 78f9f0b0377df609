"""The media kind registry (:mod:`vlmpack.media.kinds`): its entries agree with each other and with
the names repeated below media (``records.MediaKind``), and every kind probes and decodes a real
demo file of its kind through its own hooks and through :mod:`vlmpack.media.probe`."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest

from vlmpack import records
from vlmpack.media.kinds import KINDS, MEDIA_TAGS, kind_of_ext, kind_of_part, kind_spec, tag_of
from vlmpack.media.probe import probe_bytes, probe_media
from vlmpack.records import Locator, Media, Sample


def test_registry_is_consistent():
    assert list(KINDS) == list(get_args(records.MediaKind)) == list(records.SAMPLE_KINDS[1:])
    assert all(name == k.name for name, k in KINDS.items())
    assert len(set(MEDIA_TAGS)) == len(MEDIA_TAGS) == len(KINDS)
    # no tag is a prefix of another (a member name must say one kind)
    assert not any(a != b and b.startswith(a) for a in MEDIA_TAGS for b in MEDIA_TAGS)
    exts = [e for k in KINDS.values() for e in k.extensions]
    assert len(set(exts)) == len(exts), "an extension belongs to two kinds"
    assert all(e == e.lower() and not e.startswith(".") for e in exts)


def test_every_place_that_names_kinds_reads_the_registry():
    """The pack format's member tags, the manifest's kind codes, the report's and the WDS native
    layout's kind lists, and the loader Energon runs all come from the registry."""
    from vlmpack.energon.meta import SAMPLE_LOADER_SOURCE
    from vlmpack.layouts import NATIVE_KINDS
    from vlmpack.layouts.builder import PLACEHOLDER
    from vlmpack.pack.count_task import KIND_CODE
    from vlmpack.pack.media_tokens import MEDIA_KINDS, TOKEN_COLUMNS
    from vlmpack.pack.preflight import KINDS as PREFLIGHT_KINDS
    from vlmpack.pack.results import SCHEMA
    from vlmpack.packfmt import TAG_BY_KIND

    assert TAG_BY_KIND == {k: tag_of(k) for k in KINDS} == {"image": "img", "video": "vid", "audio": "aud"}
    assert list(KIND_CODE) == list(records.SAMPLE_KINDS) == list(NATIVE_KINDS) == list(PREFLIGHT_KINDS)
    assert KIND_CODE == {"text": 0, "image": 1, "video": 2, "audio": 3}  # the codes of existing manifests stay
    assert 'part.startswith(("img", "vid", "aud"))' in SAMPLE_LOADER_SOURCE
    # per-kind token columns of the count results / manifest, and the layouts' placeholders
    assert MEDIA_KINDS == tuple(KINDS) and TOKEN_COLUMNS == {"video": "video_tokens", "audio": "audio_tokens"}
    assert set(TOKEN_COLUMNS.values()) <= set(SCHEMA.names)
    assert PLACEHOLDER.findall("<image> <video> <audio> <file>") == ["<image>", "<video>", "<audio>"]


def test_helpers():
    assert [tag_of(k) for k in KINDS] == ["img", "vid", "aud"]
    assert kind_of_part("img0.png") == "image" and kind_of_part("vid12.mp4") == "video"
    assert kind_of_part("aud3.flac") == "audio"
    assert kind_of_part("json") is None and kind_of_part("input_ids.npy") is None and kind_of_part("img.png") is None
    assert kind_of_ext("JPG") == "image" and kind_of_ext(".webm") == "video" and kind_of_ext("txt") is None
    assert kind_of_ext(".WAV") == kind_of_ext("oga") == "audio"
    with pytest.raises(KeyError, match="unknown media kind 'speech'"):
        kind_spec("speech")


def test_sample_kind_precedence():
    def kind(*kinds):
        return Sample("s", [], [Media(k, "x") for k in kinds], Locator("f", 1, 0)).kind

    assert kind() == "text"
    assert kind("image") == kind("image", "image") == "image"
    assert kind("video") == kind("image", "video") == kind("video", "image") == "video"
    assert kind("audio") == kind("audio", "image") == kind("video", "audio") == "audio"


@pytest.fixture(scope="module")
def demo_files(real_data, video_corpus):
    from cache_dir import CACHE
    from conftest import cache_lock
    from demo_data.audio_corpus import build_audio_corpus

    image = next(p for p in sorted((real_data / "images").rglob("*.png")) if "broken" not in p.parts)
    video = next(p for p in video_corpus if p.suffix == ".mp4")
    with cache_lock():
        audio = next(p for p in build_audio_corpus(CACHE / "audio_corpus", real_data) if p.name == "turns.flac")
    return {"image": image, "video": video, "audio": audio}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_probes_and_decodes_a_real_file(demo_files, kind):
    spec, path = KINDS[kind], demo_files[kind]
    assert kind_of_ext(path.suffix) == kind
    data = path.read_bytes()
    own = spec.probe(str(path), len(data), "header", None)
    assert own.nbytes == len(data)
    assert (own.width > 0 and own.height > 0) if kind != "audio" else (own.width, own.height) == (0, 0)
    assert probe_media(str(path), kind, "header") == own
    assert probe_bytes(data, kind, "header", name=str(path)) == own
    if kind == "image":
        img = spec.decode(data, where=str(path))
        assert img.mode == "RGB" and img.size == (own.width, own.height)
    elif kind == "audio":  # float32 mono at 16 kHz: the header's samples resampled
        from vlmpack.media.audio import samples_at

        wave = spec.decode(data, where=str(path))
        assert wave.dtype == np.float32 and wave.shape == (samples_at(own.frames, int(own.fps)),)
    else:
        frames = spec.decode(data, [0, 1], where=str(path))
        assert frames.dtype == np.uint8 and frames.shape == (2, own.height, own.width, 3)
        assert own.frames and own.frames > 1


def test_an_unregistered_kind_probes_as_an_image(demo_files):
    """Behaviour kept from before the registry: only ``"video"`` was told apart."""
    data = demo_files["image"].read_bytes()
    assert probe_bytes(data, "picture") == probe_bytes(data, "image")


@pytest.mark.parametrize("kind", list(KINDS))
def test_check_stored_passes_a_whole_file_and_names_a_truncated_one(demo_files, kind):
    """``check_stored`` (``vlmpack check``'s decode of a stored member): silent on the real file; a
    cut copy raises MediaDecodeError, one line that starts with ``where``."""
    from vlmpack.errors import MediaDecodeError

    data = demo_files[kind].read_bytes()
    part = f"{tag_of(kind)}0{demo_files[kind].suffix}"
    KINDS[kind].check_stored(data, part, f"shard/pack sample 's' part {part}")
    with pytest.raises(MediaDecodeError) as e:
        KINDS[kind].check_stored(data[: len(data) // 2], part, f"shard/pack sample 's' part {part}")
    assert str(e.value).startswith(f"shard/pack sample 's' part {part}: ") and "\n" not in str(e.value)


def test_the_audio_entry_is_registered_last():
    """The ``audio`` entry (``media/kinds/audio.py``, probed and decoded on real files in
    ``tests/test_audio.py``) is registered after video (so the codes of text / image / video stay)
    and keeps the registry's rules: a tag that no other tag prefixes, extensions of its own."""
    from vlmpack.media.kinds.audio import KIND as AUDIO

    assert list(KINDS)[-1] == "audio" and KINDS["audio"] is AUDIO and records.SAMPLE_KINDS.index("audio") == 3
    tags = MEDIA_TAGS
    assert AUDIO.name == "audio" and AUDIO.tag == "aud" and len(set(tags)) == len(tags)
    assert not any(a != b and b.startswith(a) for a in tags for b in tags)
    others = {e for k in KINDS.values() if k.name != AUDIO.name for e in k.extensions}
    assert not set(AUDIO.extensions) & others
    assert all(e == e.lower() and not e.startswith(".") for e in AUDIO.extensions)
