"""NeMo Automodel's VLM meta file as an input (:mod:`vlmpack.sources.nemo_meta`).

The first demo records are written as two NeMo datasets of one meta file: ``lmdb`` in NeMo's
default layout (``messages`` role / content strings with ``<image>`` placeholders, ``images`` as
``<lmdb_dir>::<key>`` references into an LMDB store under its ``media_dir``, ratio 0.5) and
``sharegpt`` (the LLaVA records as they are, with NeMo's ``columns`` / ``tags`` mapping for ShareGPT,
ratio 2). Each packs (``--dataset NAME``, one output per dataset) with the same ``num_tokens`` and
the same media bytes per sample id as the records in LLaVA JSONL; Energon loads each output with
input = packed + rejected; ``vlmpack metadataset`` weighs each output by samples x ratio, and
Energon's blend draws the packs in that proportion.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml
from cli_runner import run_cli

from vlmpack.config import load_config
from vlmpack.energon.load import iter_energon_packs
from vlmpack.energon.metadataset import iter_blend
from vlmpack.errors import ConfigError
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs

lmdb = pytest.importorskip("lmdb")

N_LINES = 120
SEQ_LEN = 4096
_SHAREGPT = {"columns": {"messages": "conversations", "images": "images"},
             "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt"}}


@pytest.fixture(scope="module")
def meta(real_data, tmp_path_factory):
    """``(meta file, llava JSONL of the same records, number of records)``."""
    d = tmp_path_factory.mktemp("nemo")
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()[:N_LINES]
    (d / "llava.jsonl").write_text("\n".join(lines) + "\n")
    recs = [json.loads(x) for x in lines]
    media = d / "media"
    (media / "imgs.lmdb").mkdir(parents=True)
    env = lmdb.open(str(media / "imgs.lmdb"), map_size=1 << 30)
    with env.begin(write=True) as txn:
        for p in sorted({p for r in recs for p in r.get("images", [])}):
            txn.put(p.encode(), (real_data / p).read_bytes())
    env.close()
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    rows = [{"id": r["id"], "messages": [{"role": roles[t["from"]], "content": t["value"]} for t in r["conversations"]],
             "images": [f"imgs.lmdb::{p}" for p in r.get("images", [])]} for r in recs]
    (d / "data").mkdir()
    (d / "data" / "lmdb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "data" / "sharegpt.json").write_text(json.dumps(recs))
    path = d / "meta.json"
    path.write_text(json.dumps({
        "lmdb": {"file_name": "data/lmdb.jsonl", "media_dir": str(media), "sample_ratio": 0.5},
        "sharegpt": {"file_name": "data/sharegpt.json", "media_dir": str(real_data), "sample_ratio": 2.0,
                     **_SHAREGPT}}))
    return path, d / "llava.jsonl", len(recs)


def _packed(out: Path) -> dict:
    """Per sample id: (num_tokens, sha256 of each media part)."""
    return {s["id"]: (s["num_tokens"], [hashlib.sha256(raw[m["part"]]).hexdigest() for m in s["media"]])
            for raw in read_packs(out) for s in json.loads(raw["json"])["samples"]}


def test_each_dataset_packs_like_the_llava_records_and_the_ratios_weigh_the_blend(meta, real_data, model_dir,
                                                                                 tmp_path):
    path, llava, n = meta
    run_pack(load_config(input=[str(llava)], media_root=str(real_data), model=str(model_dir),
                         output=str(tmp_path / "llava"), seq_len=SEQ_LEN, workers=1, progress=False))
    want = _packed(tmp_path / "llava")
    assert len(want) > 0.9 * n and sum(len(m) for _, m in want.values()) > 50
    outs = {}
    for name, ratio in (("lmdb", 0.5), ("sharegpt", 2.0)):
        out = outs[name] = tmp_path / name
        r = run_cli(["pack", "-i", path, "--dataset", name, "--model", model_dir, "-o", out, "--seq-len",
                     str(SEQ_LEN), "-j", "1", "--no-progress"])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        report = json.loads((out / "report.json").read_text())
        assert report["sample_ratio"] == ratio and report["records_read"] == n
        assert _packed(out) == want, name  # same tokens, same media bytes, per sample id
        loaded = [s["id"] for pack in iter_energon_packs(out, num_workers=0) for s in pack.samples]
        rejected = (out / "rejects.jsonl").read_text().splitlines()
        assert len(loaded) == len(set(loaded)) == report["samples_packed"]
        assert len(loaded) + len(rejected) + report["dropped_overlong"] == n  # input = packed + rejected
    blend = tmp_path / "blend.yaml"
    r = run_cli(["metadataset", outs["lmdb"], outs["sharegpt"], "-o", blend, "--subflavor", "0:dataset=lmdb",
                 "--subflavor", "1:dataset=sharegpt"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    entries = yaml.safe_load(blend.read_text())["splits"]["train"]["blend"]
    samples = len(want)
    assert [e["weight"] for e in entries] == [samples * 0.5, samples * 2.0]
    # Energon draws the packs of the blend in that proportion (1 : 4), seeded
    drawn = Counter(pack.__subflavors__["dataset"] for _, pack in zip(range(1000), iter_blend(blend)))
    assert 0.15 < drawn["lmdb"] / 1000 < 0.25 and drawn["lmdb"] + drawn["sharegpt"] == 1000, drawn


def _meta_with(d: Path, entries: dict) -> Path:
    path = d / "bad_meta.json"
    path.write_text(json.dumps(entries))
    return path


@pytest.mark.parametrize("entry, words", [
    ({"file_name": "data/sharegpt.json", "annotation": "x.jsonl"}, "key 'annotation'"),
    ({"file_name": "data/sharegpt.json", "formatting": "sharegpt"}, "named dataset_info.json"),
    ({"file_name": "data/sharegpt.json", "columns": {"audio": "sound"}}, "columns.audio"),
    ({"file_name": "data/sharegpt.json", "tags": {"thought_tag": "think"}}, "tags.thought_tag"),
    ({"file_name": "data/sharegpt.json", "sample_ratio": 0}, "sample_ratio 0"),
    ({"file_name": "data/sharegpt.json", "media_dir": "/nowhere/at/all"}, "no folder"),
    ({"file_name": "data/nowhere.jsonl"}, "nowhere.jsonl"),
])
def test_an_entry_vlmpack_does_not_read_is_one_line(meta, entry, words, model_dir):
    path = _meta_with(meta[0].parent, {"x": entry})
    with pytest.raises(ConfigError) as e:
        load_config(input=[str(path)], model=str(model_dir), output="/tmp/unused-out")
    assert "dataset 'x'" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_datasets_that_differ_pack_one_per_output_and_options_must_agree(meta, real_data, model_dir, tmp_path):
    path = meta[0]
    # both datasets: their media_dir and sample_ratio differ -> one line, exit 2, naming the way out
    r = run_cli(["pack", "-i", path, "--model", model_dir, "-o", tmp_path / "both", "--no-progress"])
    assert r.returncode == 2 and "different media_dir" in r.stderr and "--dataset NAME" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "both").exists()
    with pytest.raises(ConfigError, match="no dataset 'y'"):
        load_config(input=[str(path)], dataset=["y"], model=str(model_dir), output=str(tmp_path / "o"))
    with pytest.raises(ConfigError, match="--media-root .* differs from the media_dir"):
        load_config(input=[str(path)], dataset=["sharegpt"], media_root=str(tmp_path), model=str(model_dir),
                    output=str(tmp_path / "o"))
    cfg = load_config(input=[str(path)], dataset=["sharegpt"], model=str(model_dir), output=str(tmp_path / "o"))
    assert (cfg.media_root, cfg.sample_ratio, cfg.shard_prefix) == (str(real_data), 2.0, "sharegpt")
    assert [Path(p).name for p in cfg.input] == ["sharegpt.json"]


def test_lmdb_references_resolve_inside_the_root_only(meta, real_data, tmp_path):
    """``<lmdb_dir>::<key>``: a key of the store (its bytes, via the probe), a missing key
    (``media_missing``), a store outside the media root (``media_outside_root``, also through a
    symlink), a folder that is no store (``media_missing``)."""
    from vlmpack.errors import MediaError
    from vlmpack.media.probe import probe_media
    from vlmpack.media.ref import read_ref
    from vlmpack.media.resolve import resolve_ref

    media = meta[0].parent / "media"
    rows = map(json.loads, (meta[0].parent / "data" / "lmdb.jsonl").read_text().splitlines())
    rel = next(r["images"][0] for r in rows if r["images"]).split("::", 1)[1]
    key = real_data / rel
    ref = resolve_ref(f"imgs.lmdb::{rel}", str(media))
    assert read_ref(ref) == key.read_bytes() and probe_media(ref).width > 0
    with pytest.raises(MediaError) as e:
        probe_media(resolve_ref("imgs.lmdb::no/such/key.png", str(media)))
    assert e.value.reason == "media_missing"
    inner = tmp_path / "root"
    inner.mkdir()
    (inner / "link.lmdb").symlink_to(media / "imgs.lmdb")
    for bad in (f"../media/imgs.lmdb::{rel}", f"link.lmdb::{rel}"):
        base = str(media / "sub") if bad.startswith("..") else str(inner)
        Path(base).mkdir(exist_ok=True)
        with pytest.raises(MediaError) as e:
            resolve_ref(bad, base)
        assert e.value.reason == "media_outside_root", bad
    assert resolve_ref(f"link.lmdb::{rel}", str(inner), allow_absolute_media=True).startswith("lmdb://")
    with pytest.raises(MediaError) as e:
        resolve_ref(f"nowhere.lmdb::{rel}", str(inner))
    assert e.value.reason == "media_missing" and "no LMDB store" in e.value.detail


def test_without_media_dir_the_media_root_is_given_or_the_working_directory(meta, model_dir, tmp_path,
                                                                            monkeypatch):
    path = _meta_with(meta[0].parent, {"x": {"file_name": "data/sharegpt.json"}})
    monkeypatch.chdir(tmp_path)
    cfg = load_config(input=[str(path)], model=str(model_dir), output=str(tmp_path / "o"))
    assert (cfg.media_root, cfg.sample_ratio, cfg.shard_prefix) == (str(tmp_path), 1.0, "x")
    given = load_config(input=[str(path)], media_root=str(meta[0].parent), model=str(model_dir),
                        output=str(tmp_path / "o"))
    assert given.media_root == str(meta[0].parent)


def test_an_entry_with_its_own_names_gets_a_record_map(meta, model_dir, tmp_path):
    path = _meta_with(meta[0].parent, {"x": {"file_name": "data/sharegpt.json", "media_dir": str(tmp_path),
                                             "columns": {"messages": "dialog"}, "tags": {"role_tag": "speaker"}}})
    cfg = load_config(input=[str(path)], model=str(model_dir), output=str(tmp_path / "o"))
    assert json.loads(cfg.record_map) == {"formatting": "sharegpt", "columns": {"messages": "dialog"}, "tags": {
        "role_tag": "speaker", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}
