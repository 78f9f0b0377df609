"""Shard writer + Energon metadata on a real pack run: tar layout, .tar.idx, .nv-meta, rollover."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.energon.meta import read_tar_idx
from vlmpack.pack.pipeline import run_pack
from vlmpack.pack.write import assign_shards
from vlmpack.packfmt import ShardPacks, read_packs


@pytest.fixture(scope="module")
def small_out(tmp_path_factory, real_data, model_dir):
    """The first 600 real records packed at L=2048 into shards of <= 7 packs or <= 4 MB."""
    src = tmp_path_factory.mktemp("src")
    lines = (real_data / "real_sft.jsonl").read_bytes().splitlines(keepends=True)[:600]
    (src / "part.jsonl").write_bytes(b"".join(lines))
    out = tmp_path_factory.mktemp("small") / "out"
    report = run_pack(load_config(input=[str(src / "part.jsonl")], media_root=str(real_data), model=str(model_dir),
                                  output=str(out), seq_len=2048, max_packs_per_shard=7, max_shard_bytes=4_000_000,
                                  workers=2, progress=False))
    return out, report


def test_tar_idx_matches_tarfile_offsets(small_out):
    out, report = small_out
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    assert sum(info["shard_counts"].values()) == report["packs"] > 1
    for shard, count in info["shard_counts"].items():
        idx = read_tar_idx(out / (shard + ".idx"))
        assert len(idx) == count + 1
        packs = ShardPacks(out / shard, read=lambda part: False)
        starts = [p.offset for p in packs]  # each pack's first member header
        assert packs.whole and len(starts) == len({p for p in starts}) == count
        assert idx[:-1].tolist() == starts
        assert idx[-1] == packs.end  # end-of-archive entry, not the file size
        assert (out / shard).stat().st_size > idx[-1]


def test_tar_members_are_deterministic_and_plain_ustar(small_out):
    out, _ = small_out
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tf:
            members = tf.getmembers()
            assert members[0].offset_data == 512  # no PAX header in front
            for m in members:
                assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
                assert m.pax_headers == {}
            names = [m.name for m in members]
            keys = [n.split(".", 1)[0] for n in names]
            assert names == sorted(names)  # sorted members, samples contiguous
            assert all("." not in k for k in keys)


def test_shard_rollover_limits(small_out):
    out, _ = small_out
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    assert max(info["shard_counts"].values()) <= 7 and min(info["shard_counts"].values()) >= 1
    split = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())
    assert split["split_parts"]["train"] == sorted(info["shard_counts"])


def test_pack_json_format_v1(small_out):
    out, _ = small_out
    keys = set()
    for raw in read_packs(out):
        key = raw.pop("__key__")
        assert key not in keys
        keys.add(key)
        pack = json.loads(raw.pop("json"))
        assert pack["format"] == "vlmpack.pack/1"
        assert pack["num_tokens"] == sum(s["num_tokens"] for s in pack["samples"]) <= pack["seq_len"] == 2048
        referenced = []
        for s in pack["samples"]:
            in_messages = [p["part"] for m in s["messages"] for p in m["content"] if p["type"] == "image"]
            assert in_messages == [m["part"] for m in s["media"]]
            referenced += in_messages
        assert sorted(referenced) == sorted(raw)  # every media part referenced exactly once
    assert len(keys) == small_out[1]["packs"]


def test_media_bytes_are_the_original_files(small_out, real_data):
    out, _ = small_out
    lines = {}
    for line in (real_data / "real_sft.jsonl").read_text().splitlines()[:600]:
        rec = json.loads(line)
        lines[rec["id"]] = rec
    checked = 0
    for pack in ShardPacks(sorted(out.glob("*.tar"))[0]):
        for s in json.loads(pack.parts["json"])["samples"]:
            for m, ref in zip(s["media"], lines[s["id"]]["images"]):
                assert pack.parts[m["part"]] == (real_data / ref).read_bytes()
                checked += 1
    assert checked > 0


@given(st.lists(st.integers(1, 5000), max_size=200), st.integers(1, 20), st.integers(1, 20000))
def test_assign_shards_properties(sizes, max_packs, max_bytes):
    bounds = assign_shards(np.asarray(sizes, dtype=np.int64), max_packs, max_bytes)
    assert bounds[0] == 0 and bounds[-1] == len(sizes)
    counts = np.diff(bounds)
    assert (counts >= 1).all() and (counts <= max_packs).all()
    for s in range(len(counts)):
        chunk = sizes[bounds[s]:bounds[s + 1]]
        assert sum(chunk) <= max_bytes or len(chunk) == 1


def test_model_dir_fixture_is_complete(model_dir: Path):
    assert json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"]


def test_rerun_same_config_skips_counting_and_planning(small_out, real_data, model_dir, monkeypatch):
    """Same fingerprint: finished counting tasks and the saved plan are reused, shards are kept."""
    import vlmpack.pack.count_task as count
    import vlmpack.pack.pipeline as pipeline

    out, report = small_out

    def boom(*a, **k):
        raise AssertionError("counting/planning ran again")

    monkeypatch.setattr(count, "run_task", boom)
    monkeypatch.setattr(pipeline, "make_plan", boom)
    monkeypatch.setattr(pipeline, "write_shard", boom)
    again = run_pack(load_config(input=_input_of(out), media_root=str(real_data), model=str(model_dir),
                                 output=str(out), seq_len=2048, max_packs_per_shard=7, max_shard_bytes=4_000_000,
                                 workers=1, progress=False))
    assert again["shard_sha256"] == report["shard_sha256"]
    assert again["samples_packed"] == report["samples_packed"]


def _input_of(out: Path) -> list[str]:
    return json.loads((out / ".vlmpack" / "config.json").read_text())["options"]["input"]
