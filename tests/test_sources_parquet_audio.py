"""Audio in table inputs (issue 23 item 3): Parquet / Arrow ``audios`` / ``audio`` columns.

A media column of each kind of the registry (``vlmpack.sources.parquet.MEDIA_COLUMNS``): an
``audios`` list column of HF ``datasets`` ``Audio`` cells (``decode=False``: the ``{"bytes", "path"}``
struct, bytes embedded, as ``datasets`` stores it) is read in place like an ``Image`` column
(``parquet://`` references), and an ``audio`` column of path-only cells is resolved against
``--media-root``.

Proof on real files of the audio corpus (``tools/demo_data/audio_corpus.py``: WAV, MP3, M4A, Ogg
Vorbis / Opus, 11-48 kHz, mono and stereo) and a demo image, packed for Qwen2.5-Omni (the offline
directory of ``tests/test_models_qwen2_5_omni.py``, whose counts that test proves equal to
``Qwen2_5OmniProcessor``'s): the same records as a ``datasets`` Parquet file (``to_parquet``), a
``Dataset.save_to_disk`` directory and a Parquet file of path-only ``audio`` cells pack, per sample
id, with the same ``num_tokens`` and byte-identical media members as the records given as JSONL with
file paths; every audio sample is packed (none rejected) and the report counts audio tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_models_qwen2_5_omni import omni_dir  # noqa: F401 - the offline Omni directory
from test_sources_wds import _samples, assert_same_samples

from vlmpack.config import load_config
from vlmpack.media.ref import parse_ref
from vlmpack.pack.pipeline import run_pack
from vlmpack.sources import detect_format
from vlmpack.sources.parquet import MEDIA_COLUMNS, ParquetSource

#: Small real corpus files (the count stage probes each).
AUDIO = ("word.mp3", "speech_short.wav", "word_11k.wav", "short_stereo.ogg", "word.m4a", "bell.oga")
CELL = pa.struct([("bytes", pa.binary()), ("path", pa.string())])  # HF Image / Audio storage


@pytest.fixture(scope="module")
def media(tmp_path_factory, real_data) -> Path:
    """A media root holding the audio files (``audio/``) and one demo image (``images/``)."""
    from cache_dir import CACHE
    from conftest import cache_lock
    from demo_data.audio_corpus import build_audio_corpus

    with cache_lock():
        files = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
    root = tmp_path_factory.mktemp("audio_media")
    (root / "audio").mkdir()
    for name in AUDIO:
        shutil.copyfile(files[name], root / "audio" / name)
    image = next(r["images"][0] for x in (real_data / "real_sft.jsonl").read_text().splitlines()
                 if (r := json.loads(x)).get("images"))
    (root / image).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(real_data / image, root / image)
    return root


def _records(media: Path) -> list[dict]:
    """LLaMA-Factory-style records: one per audio file, an image + audio one, a two-audio one and a
    text one (``audios`` / ``images`` paths relative to the media root)."""
    image = str(next((media / "images").rglob("*.*")).relative_to(media))
    recs = [{"id": f"a-{name}", "audios": [f"audio/{name}"], "images": [], "conversations": [
        {"from": "human", "value": "<audio>\nWhat is it?"}, {"from": "gpt", "value": "A sound."}]} for name in AUDIO]
    recs.append({"id": "image-audio", "audios": ["audio/word.mp3"], "images": [image], "conversations": [
        {"from": "human", "value": "<image>\nDoes <audio> match it?"}, {"from": "gpt", "value": "No."}]})
    recs.append({"id": "two-audio", "audios": ["audio/word_11k.wav", "audio/short_stereo.ogg"], "images": [],
                 "conversations": [{"from": "human", "value": "<audio> then <audio>: same?"},
                                   {"from": "gpt", "value": "No."}]})
    recs.append({"id": "text", "audios": [], "images": [], "conversations": [
        {"from": "human", "value": "Hello?"}, {"from": "gpt", "value": "Hi."}]})
    return recs


def _cells(media: Path, refs: list[str], embed: bool) -> list[dict]:
    return [{"bytes": (media / r).read_bytes() if embed else None, "path": r} for r in refs]


def _pack(inputs: list[Path], out: Path, model: Path, media_root: Path) -> dict:
    return run_pack(load_config(input=[str(p) for p in inputs], media_root=str(media_root), model=str(model),
                                output=str(out), seq_len=4096, workers=1, progress=False))


def test_media_columns_are_those_of_the_registry():
    from vlmpack.media.kinds import KINDS

    assert MEDIA_COLUMNS == {n: k for k in KINDS for n in (k + "s", k)}
    assert MEDIA_COLUMNS["audios"] == MEDIA_COLUMNS["audio"] == "audio"


def test_audio_columns_pack_like_the_jsonl_route(media, omni_dir, tmp_path):  # noqa: F811
    datasets = pytest.importorskip("datasets")
    recs = _records(media)
    (tmp_path / "same.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = datasets.Value("string")
    features = datasets.Features({
        "id": text, "audios": datasets.Sequence(datasets.Audio(decode=False)),
        "images": datasets.Sequence(datasets.Image(decode=False)),
        "conversations": [{"from": text, "value": text}]})
    # built from Arrow and cast (Audio.encode_example needs torchcodec; the stored cells are the same)
    table = pa.table({"id": [r["id"] for r in recs],
                      "audios": pa.array([_cells(media, r["audios"], True) for r in recs], pa.list_(CELL)),
                      "images": pa.array([_cells(media, r["images"], True) for r in recs], pa.list_(CELL)),
                      "conversations": [r["conversations"] for r in recs]})
    ds = datasets.Dataset(table).cast(features)
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    single = [r for r in recs if len(r["audios"]) <= 1]  # the singular column: one path-only cell or null
    pq.write_table(pa.table({
        "id": [r["id"] for r in single],
        "audio": pa.array([_cells(media, r["audios"], False)[0] if r["audios"] else None for r in single], CELL),
        "images": pa.array([_cells(media, r["images"], False) for r in single], pa.list_(CELL)),
        "conversations": [r["conversations"] for r in single]}), tmp_path / "paths.parquet")
    empty = tmp_path / "no_media"  # embedded cells never come from the media root
    empty.mkdir()

    rep_j = _pack([tmp_path / "same.jsonl"], tmp_path / "j", omni_dir, media)
    want = _samples(tmp_path / "j")
    assert rep_j["rejected"] == 0 and len(want) == len(recs)
    assert rep_j["samples_by_kind"]["audio"] == len(recs) - 1 and rep_j["media_tokens_by_kind"]["audio"] > 0
    for name, inputs, root, ids in [("hf_parquet", [tmp_path / "hf.parquet"], empty, set(want)),
                                    ("save_to_disk", [tmp_path / "saved"], empty, set(want)),
                                    ("paths", [tmp_path / "paths.parquet"], media, {r["id"] for r in single})]:
        rep = _pack(inputs, tmp_path / name, omni_dir, root)
        got = _samples(tmp_path / name)
        assert rep["rejected"] == 0 and rep["identity_holds"], (name, rep["rejected_by_reason"])
        assert_same_samples(got, {i: want[i] for i in ids})
        if ids == set(want):
            assert rep["media_tokens_by_kind"] == rep_j["media_tokens_by_kind"], name

    # the embedded audio cells are parquet:// references into the file, read in place
    path = str(tmp_path / "hf.parquet")
    assert detect_format(path) == "parquet"
    samples = {s.id: s for s in ParquetSource.read(path, 0, -1, 1)}
    two = samples["two-audio"]
    assert [m.kind for m in two.media] == ["audio", "audio"]
    assert all(parse_ref(m.path).file == path for m in two.media)
    arrows = sorted((tmp_path / "saved").glob("*.arrow"))
    assert arrows and all(detect_format(str(p)) == "parquet" for p in arrows)
