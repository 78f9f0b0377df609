"""The output-layout seam (:mod:`vlmpack.sinks`): the registry, the ``vlmpack`` sink's writer and
reader sides, and that a layout added to ``SINKS`` is all it takes for the shard writer to write it.

The ``vlmpack.pack/1`` format itself is tested on real runs in ``tests/test_writer.py`` and
``tests/test_format_doc.py``; loading it through Energon in ``tests/test_check.py``. The trainers'
layouts (``llava-ov2-captioning``, ``loongforge-mix-qa``) reject a sample holding audio, which their
``qwen2-vl`` rendering cannot take, with ``layout_unsupported`` before anything of it is written."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from vlmpack.errors import ConfigError
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.pack.write import ShardTask, member_rows, write_shard
from vlmpack.packfmt import ShardPacks, loads_json, read_packs
from vlmpack.packing import PackPlan
from vlmpack.sinks import DEFAULT_LAYOUT, SINKS, Sink, get_sink
from vlmpack.sinks.vlmpack import VlmpackSink


def test_every_registered_sink_satisfies_the_protocol():
    assert DEFAULT_LAYOUT in SINKS and get_sink() is SINKS[DEFAULT_LAYOUT]
    for name, sink in SINKS.items():
        assert isinstance(sink, Sink) and sink.name == name
        files = sink.dataset_files()
        assert "dataset.yaml" in files and all(isinstance(v, bytes) for v in files.values())
    with pytest.raises(ConfigError, match="unknown output layout 'nope'; use one of vlmpack"):
        get_sink("nope")


@pytest.fixture(scope="module")
def packed(real_data, model_dir):
    """A real output of ``vlmpack pack`` (the first 120 demo records, L=2048)."""
    from demo_data.packs import demo_packs

    return demo_packs(real_data, model_dir, seq_len=2048, n_lines=120)


def _one_shard_task(out, dest, layout: str) -> ShardTask:
    """All packs of ``out`` as one shard task into ``dest`` (rows from the run dir's manifest in plan order)."""
    run = out / RUN_DIR
    plan, man = PackPlan.from_npz(run / "plan.npz"), pq.read_table(run / "manifest.parquet")
    report = json.loads((out / "report.json").read_text())
    return ShardTask(0, "shard-000000.tar", 0, member_rows(man, np.asarray(plan.order)),
                     np.asarray(plan.offsets, np.int64), report["seq_len"], str(dest), str(run / "records"),
                     layout=layout)


def test_vlmpack_sink_rewrites_the_same_packs_and_reads_them_back(packed, tmp_path):
    """write_shard through the registry's ``vlmpack`` entry gives the pipeline's packs member for
    member; its reader side gives back each pack object."""
    res = write_shard(_one_shard_task(packed, tmp_path, "vlmpack"))
    want = list(read_packs(packed))
    got = list(read_packs(tmp_path))
    assert res.num_packs == len(want) == len(got) > 3
    assert got == want
    sink = get_sink("vlmpack")
    for raw in got:
        obj, parts = sink.read_pack(raw)
        assert obj["format"] == "vlmpack.pack/1" and obj == json.loads(raw["json"]) and parts is raw
    with pytest.raises(KeyError):
        sink.read_pack({"img0.png": b""})
    with pytest.raises(ValueError):
        sink.read_pack({"json": b"{not json"})


class _CaptionSink(VlmpackSink):
    """A toy layout in the shape of LLaVA-OneVision-2's captioning packs: one JSON of per-sample
    lists, media named ``img<sample>_<j>.<ext>`` (images only)."""

    name = "toy-captions"

    @staticmethod
    def pack_members(key, samples, seq_len, read_media, *, model_dir=None, processor=""):
        meta = {"ids": [], "texts": [], "images": []}
        members = []
        for i, e in enumerate(samples):
            rec = e.sample()  # another form than vlmpack.pack/1: it reads the entry's fields
            names = []
            for j, (_sha, part, ref) in enumerate(e.media):
                names.append(f"img{i}_{j}.{part.rsplit('.', 1)[1]}")
                members.append((f"{key}.{names[-1]}", read_media(ref)))
            meta["ids"].append(rec["id"])
            meta["texts"].append([p["text"] for msg in rec["messages"] for p in msg["content"] if "text" in p])
            meta["images"].append(names)
        members.append((f"{key}.json", json.dumps(meta).encode()))
        return members, sum(e.num_tokens for e in samples)

    @staticmethod
    def read_pack(parts):  # its own object, not a vlmpack.pack/1 one (VlmpackSink.read_pack checks that form)
        return loads_json(parts["json"])

    @staticmethod
    def dataset_files():
        return {"dataset.yaml": b"sample_type: toy\n"}


def test_a_new_layout_is_one_registry_line(packed, tmp_path, monkeypatch):
    """A sink registered in SINKS (nothing else changed) is what write_shard writes: its members,
    the original media bytes under its own names, the same token counts."""
    monkeypatch.setitem(SINKS, _CaptionSink.name, _CaptionSink())
    res = write_shard(_one_shard_task(packed, tmp_path, _CaptionSink.name))
    report = json.loads((packed / "report.json").read_text())
    assert (res.num_packs, res.num_samples, res.num_tokens) == (report["packs"], report["samples_packed"],
                                                                report["tokens"])
    assert res.sha256 == hashlib.sha256((tmp_path / "shard-000000.tar").read_bytes()).hexdigest()
    original = {p["__key__"]: p for p in read_packs(packed)}
    sink = get_sink(_CaptionSink.name)
    images = 0
    for pack in ShardPacks(tmp_path / "shard-000000.tar"):
        meta, want = sink.read_pack(pack.parts), original[pack.key]
        samples = json.loads(want["json"])["samples"]
        assert meta["ids"] == [s["id"] for s in samples] and all(meta["texts"])
        assert set(pack.parts) == {"json", *(n for names in meta["images"] for n in names)}
        for names, s in zip(meta["images"], samples):
            assert [pack.parts[n] for n in names] == [want[m["part"]] for m in s["media"]]
            images += len(names)
    assert images > 0


# ------------------------------------------------------------------------------- audio and the trainers' layouts
def test_the_turns_placeholders_are_the_registrys():
    """Each kind's ``<kind>`` placeholder is refused as literal text, the one list the registry gives."""
    from vlmpack.media.kinds import KINDS
    from vlmpack.sinks.qwen2_vl_turns import PLACEHOLDERS

    assert PLACEHOLDERS == tuple(f"<{k}>" for k in KINDS) and "<audio>" in PLACEHOLDERS


@pytest.mark.parametrize("layout", ["llava-ov2-captioning", "loongforge-mix-qa"])
def test_a_trainer_layout_rejects_audio_with_a_reason(layout):
    """LLaVA-OneVision-2's and LoongForge's ``qwen2-vl`` rendering takes images (and video), no audio:
    a sample with an audio item, alone or beside an image, or with a literal ``<audio>`` in its text,
    is ``layout_unsupported`` (one line naming audio); the same sample with an image is accepted."""
    from vlmpack.records import Locator, Media, Sample

    def sample(*user, kinds):
        msgs = [{"role": "user", "content": [c if isinstance(c, dict) else {"type": "text", "text": c} for c in user]},
                {"role": "assistant", "content": [{"type": "text", "text": "A word."}]}]
        return Sample("s", msgs, [Media(k, f"m{i}") for i, k in enumerate(kinds)], Locator("f.jsonl", 1, 0))

    sink = get_sink(layout)
    image, audio = {"type": "image", "index": 0}, {"type": "audio", "index": 0}
    assert sink.sample_problem(sample(image, "What?", kinds=("image",))) is None
    for s, words in [(sample(audio, "What is said?", kinds=("audio",)), "audio media"),
                     (sample(image, {"type": "audio", "index": 1}, "Same?", kinds=("image", "audio")), "audio media"),
                     (sample("Say <audio> aloud.", kinds=()), "literal <audio>")]:
        problem = sink.sample_problem(s)
        assert problem is not None and problem[0] == "layout_unsupported" and words in problem[1], problem
        assert "\n" not in problem[1]


def test_audio_samples_are_rejected_before_a_trainer_layout_writes(real_data, model_dir, tmp_path):
    """``vlmpack pack --layout llava-ov2-captioning`` of demo records with the audio records of
    ``test_audio_records`` (every way a record references audio; real corpus files) between them:
    each audio record is rejected ``layout_unsupported`` by the layout (before the model family is
    asked to count it), nothing of it is written (no ``<audio>`` in any trainer field, no audio
    member), every other record is packed."""
    from cache_dir import CACHE
    from conftest import cache_lock
    from demo_data.audio_corpus import build_audio_corpus
    from test_audio_records import audio_records

    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    with cache_lock():
        audio_dir = build_audio_corpus(CACHE / "audio_corpus", real_data)[0].parent
    records = audio_records(audio_dir)
    others = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:16]]
    for r in others:
        r["images"] = [str(real_data / x) for x in r.get("images", [])]
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*others[:8], *records, *others[8:]]))
    out = tmp_path / "out"
    report = run_pack(load_config(input=[str(src)], model=str(model_dir), output=str(out), seq_len=4096, workers=1,
                                  progress=False, allow_absolute_media=True, max_reject_fraction=1,
                                  layout="llava-ov2-captioning"))
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert {x["id"] for x in rejects} == {r["id"] for r in records}, rejects
    assert all(x["reason"] == "layout_unsupported" and "audio" in x["detail"] for x in rejects), rejects
    assert report["records_read"] == report["samples_packed"] + report["rejected"] == len(others) + len(records)
    for shard in sorted(out.glob("*.tar")):
        for pack in ShardPacks(shard):
            assert b"<audio>" not in pack.parts["json"] and not any(p.startswith("aud") for p in pack.parts)
            assert {s["id"] for s in json.loads(pack.parts["json"])["vlmpack"]["samples"]} <= {
                str(r["id"]) for r in others}
