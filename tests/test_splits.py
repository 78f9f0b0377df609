"""``--val-fraction`` / ``--split``: each sample's split by a hash of its id, packs and shards of one
split each, Energon's split parts, the report per split, and ``check`` holding ``split.yaml`` to it."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from vlmpack.check import check_output
from vlmpack.config import load_config
from vlmpack.errors import ConfigError
from vlmpack.packfmt import read_packs

SEQ_LEN = 4096
VAL = 0.2


def _in_val(sid: str, kind: int = 0) -> bool:
    """The rule restated: BLAKE2b-64 of (id kind byte + id), little-endian, as a fraction of 2^64,
    at or above the train share."""
    h = int.from_bytes(hashlib.blake2b(bytes([kind]) + sid.encode(), digest_size=8).digest(), "little")
    return h / 2**64 >= 1 - VAL


@pytest.fixture(scope="module")
def split_out(real_data, model_dir):
    from demo_data.packs import demo_packs

    return demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=400, group_by_kind=False, val_fraction=VAL,
                      max_packs_per_shard=8)


def _energon_ids(out, part: str) -> list[str]:
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    ds = get_train_dataset(str(out), split_part=part, batch_size=None, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, repeat=False,
                           worker_config=WorkerConfig.default_worker_config(num_workers=0))
    return [str(s["id"]) for pack in get_loader(ds) for s in pack.samples]


@pytest.mark.usefixtures("frozen_objects")
def test_each_split_part_loads_exactly_its_samples(split_out):
    pytest.importorskip("megatron.energon")
    report = json.loads((split_out / "report.json").read_text())
    train, val = _energon_ids(split_out, "train"), _energon_ids(split_out, "val")
    assert len(set(train)) == len(train) and len(set(val)) == len(val) and not set(train) & set(val)
    assert len(train) + len(val) == report["samples_packed"] > 300
    assert all(_in_val(s) for s in val) and not any(_in_val(s) for s in train)
    assert 0.1 < len(val) / report["samples_packed"] < 0.3
    splits = report["splits"]
    assert (splits["train"]["samples"], splits["val"]["samples"]) == (len(train), len(val))
    assert splits["val"]["share"] == VAL and splits["train"]["packs"] + splits["val"]["packs"] == report["packs"]
    # no shard mixes splits: each split's shards are its own, in split order
    assert not set(splits["train"]["shards"]) & set(splits["val"]["shards"])
    assert max(splits["train"]["shards"]) < min(splits["val"]["shards"])
    assert check_output(split_out)["problems"] == []


@pytest.mark.usefixtures("frozen_objects")
def test_a_sample_keeps_its_split_whatever_the_capacity_and_the_node_count(split_out, real_data, model_dir, tmp_path):
    from vlmpack.pack.pipeline import run_pack

    pytest.importorskip("megatron.energon")
    lines = (split_out.parent / "input.jsonl").read_text().splitlines(keepends=True)
    halves = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]  # two inputs: a task for each node
    halves[0].write_text("".join(lines[:200]))
    halves[1].write_text("".join(lines[200:]))
    want = {str(s["id"]) for p in read_packs(split_out) for s in json.loads(p["json"])["samples"] if _in_val(s["id"])}
    got, packed = set(), set()
    for rank in range(2):
        out = tmp_path / f"node{rank}"
        run_pack(load_config(input=[str(h) for h in halves], media_root=str(real_data), model=str(model_dir),
                             output=str(out), seq_len=2048, progress=False, workers=1, val_fraction=VAL, num_nodes=2,
                             node_rank=rank))
        val, train = set(_energon_ids(out, "val")), set(_energon_ids(out, "train"))
        assert val <= want and not train & want and val and train
        got, packed = got | val, packed | val | train
    assert got == want & packed and len(packed) > 300  # (at L=2048 a few samples are overlong)


def test_check_holds_split_yaml_to_the_report(split_out, tmp_path):
    out = tmp_path / "o"
    shutil.copytree(split_out, out, symlinks=True)
    meta = out / ".nv-meta" / "split.yaml"
    text = meta.read_text()
    moved = text.replace("  val:\n", "  val: []\n  other:\n", 1)  # the val shards listed elsewhere
    meta.write_text(moved)
    res = check_output(out, num_workers=0)
    assert any("split.yaml differs from what vlmpack writes" in p for p in res["problems"]), res["problems"]


@pytest.mark.parametrize(("kw", "msg"), [
    ({"split": "train=0.9,val=0.2"}, "summing to 1"),
    ({"split": "train=0.9,dev=0.1"}, "the splits are train, val and test"),
    ({"split": "train:0.9"}, "the splits are train, val and test"),
    ({"val_fraction": 1.5}, "not a share in"),
    ({"val_fraction": 0.1, "split": "train=0.9,val=0.1"}, "not both"),
])
def test_bad_split_options_are_one_line(kw, msg, tmp_path):
    with pytest.raises(ConfigError, match=msg):
        load_config(input=["x.jsonl"], model="m", output=str(tmp_path / "o"), **kw)


def test_the_rule_is_the_writers(split_out):
    from vlmpack.pack.splits import split_of_ids

    ids = [f"sample-{i}" for i in range(2000)]
    got = split_of_ids(ids, np.zeros(len(ids), np.int8), {"train": 1 - VAL, "val": VAL})
    assert [bool(x) for x in got] == [_in_val(s) for s in ids]
