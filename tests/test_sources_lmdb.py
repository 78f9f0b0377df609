"""LMDB image stores (``--media-lmdb NAME=PATH``, ``lmdb://NAME/KEY``) and directory / glob / brace inputs.

The demo images of the first records of ``real_sft.jsonl`` go into an LMDB env (key = the relative
image path); the records rewritten to ``lmdb://demo/<path>`` pack like the originals: per id the
same ``num_tokens``, byte-identical media parts and the same rejections; a missing key is
``media_missing``, an unknown store ``media_unsupported``, bytes that do not decode
``media_undecodable`` as for a loose file; a re-run (1 or 2 workers) gives the same bytes and a
CLI run SIGKILLed mid-write resumes to them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_sources_wds import _samples, shard_hashes

from vlmpack.config import load_config
from vlmpack.errors import ConfigError, RunFailedError
from vlmpack.pack.pipeline import run_pack
from vlmpack.sources.paths import brace_expand

lmdb = pytest.importorskip("lmdb")
pytestmark = pytest.mark.slow

N_RECORDS = 300


def _rejects(out: Path) -> dict:
    f = out / "rejects.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []
    return {r.get("id") or r.get("key"): r for r in rows}


def _pack(inputs, out: Path, model_dir: Path, media_root: Path, workers: int = 2, **kw) -> dict:
    cfg = load_config(input=[str(p) for p in inputs], media_root=str(media_root), model=str(model_dir),
                      output=str(out), seq_len=8192, workers=workers, progress=False, max_reject_fraction=1, **kw)
    return run_pack(cfg)


def _make_env(path: Path, items: dict[str, bytes]) -> None:
    env = lmdb.open(str(path), map_size=max(64 << 20, 4 * sum(map(len, items.values()))))
    with env.begin(write=True) as txn:
        for k, v in items.items():
            txn.put(k.encode(), v)
    env.close()


@pytest.fixture(scope="module")
def case(tmp_path_factory, real_data, model_dir):
    tmp = tmp_path_factory.mktemp("lmdb")
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()[:N_RECORDS]
    items: dict[str, bytes] = {}
    rewritten = []
    for line in lines:
        obj = json.loads(line)
        imgs = obj.get("images")
        if imgs and all(isinstance(i, str) and (real_data / i).is_file() and ".." not in i for i in imgs):
            for i in imgs:
                items[i] = (real_data / i).read_bytes()
            obj["images"] = [f"lmdb://demo/{i}" for i in imgs]
            line = json.dumps(obj, ensure_ascii=False)
        rewritten.append(line)
    assert len(items) > 50, "the demo records hold too few images"
    _make_env(tmp / "env", items)
    (tmp / "orig.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp / "lmdb.jsonl").write_text("\n".join(rewritten) + "\n", encoding="utf-8")
    rep_o = _pack([tmp / "orig.jsonl"], tmp / "o", model_dir, real_data)
    rep_l = _pack([tmp / "lmdb.jsonl"], tmp / "l", model_dir, real_data, media_lmdb={"demo": str(tmp / "env")})
    return tmp, items, rep_o, rep_l


def test_lmdb_packs_like_loose_files(case):
    tmp, items, rep_o, rep_l = case
    o, lm = _samples(tmp / "o"), _samples(tmp / "l")
    assert rep_l["identity_holds"] and rep_l["records_read"] == rep_o["records_read"] == N_RECORDS
    assert set(o) == set(lm) and len(lm) == rep_l["samples_packed"] > 200
    diff = [i for i in o if o[i][0] != lm[i][0]]
    assert not diff, f"token counts differ for {diff[:5]}"
    media = [i for i in o if o[i][1] != lm[i][1]]
    assert not media, f"media bytes differ for {media[:5]}"
    assert sum(len(v[1]) for v in lm.values()) >= len(items) > 50  # images really came out of the env
    assert {k: r["reason"] for k, r in _rejects(tmp / "o").items()} == \
        {k: r["reason"] for k, r in _rejects(tmp / "l").items()}


def test_verify_passes_and_rerun_is_byte_identical(case, model_dir, real_data):
    from vlmpack.verify import verify_output

    tmp, _, rep_o, rep_l = case
    res = verify_output(tmp / "l", workers=2)
    assert res["problems"] == [] and res["samples"] == rep_l["samples_packed"]
    _pack([tmp / "lmdb.jsonl"], tmp / "l2", model_dir, real_data, workers=1, media_lmdb={"demo": str(tmp / "env")})
    assert shard_hashes(tmp / "l2") == shard_hashes(tmp / "l") != {}


def test_missing_key_and_unknown_store(case, model_dir, real_data):
    tmp, items, _, _ = case
    key = sorted(items)[0]
    recs = [
        {"id": "good", "images": [f"lmdb://demo/{key}"], "conversations": [
            {"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A picture."}]},
        {"id": "nokey", "images": ["lmdb://demo/images/not/there.png"], "conversations": [
            {"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A picture."}]},
        {"id": "nostore", "images": [f"lmdb://other/{key}"], "conversations": [
            {"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A picture."}]},
        {"id": "http", "images": ["http://example.com/a.png"], "conversations": [
            {"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A picture."}]},
    ]
    (tmp / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rep = _pack([tmp / "bad.jsonl"], tmp / "b", model_dir, real_data, workers=1,
                media_lmdb=[f"demo={tmp / 'env'}", f"spare={tmp / 'env'}"])
    rej = _rejects(tmp / "b")
    assert {k: r["reason"] for k, r in rej.items()} == {
        "nokey": "media_missing", "nostore": "media_unsupported", "http": "media_unsupported"}
    assert "demo, spare" in rej["nostore"]["detail"] and "--media-lmdb" in rej["nostore"]["detail"]
    assert rep["samples_packed"] == 1 and set(_samples(tmp / "b")) == {"good"}
    # without --media-lmdb an lmdb:// reference is unsupported, never read
    with pytest.raises(RunFailedError, match="no sample was packed"):
        _pack([tmp / "bad.jsonl"], tmp / "b2", model_dir, real_data, workers=1)
    assert _rejects(tmp / "b2")["good"]["reason"] == "media_unsupported"
    with pytest.raises(ConfigError, match="NAME=PATH"):
        load_config(input=[str(tmp / "bad.jsonl")], model=str(model_dir), output=str(tmp / "b3"), media_lmdb=["x"])
    with pytest.raises(ConfigError, match="no LMDB environment"):
        load_config(input=[str(tmp / "bad.jsonl")], model=str(model_dir), output=str(tmp / "b3"),
                    media_lmdb={"x": str(tmp / "nope")})


def test_lmdb_fingerprint_and_changed_env(case, model_dir, real_data):
    from vlmpack.media.ref import lmdb_ref, parse_ref, read_ref, ref_identity

    tmp, items, _, _ = case
    kw = dict(input=[str(tmp / "lmdb.jsonl")], model=str(model_dir), output=str(tmp / "f"))
    a = load_config(**kw, media_lmdb={"demo": str(tmp / "env")}).fingerprint()
    b = load_config(**kw, media_lmdb={"demo": str(tmp / "l")}).fingerprint()
    assert a != b and a != load_config(**kw).fingerprint()
    key = sorted(items)[0]
    ref = lmdb_ref(str(tmp / "env"), key.encode())
    assert parse_ref(ref).key == key.encode() and read_ref(ref) == items[key]
    assert ref_identity(ref) == (len(items[key]), os.stat(tmp / "env" / "data.mdb").st_mtime_ns)
    with pytest.raises(FileNotFoundError):
        ref_identity(lmdb_ref(str(tmp / "env"), b"nope"))


def test_directory_glob_and_brace_inputs(tmp_path, real_data, model_dir):
    shards = sorted((real_data / "wds").glob("*.tar"))
    assert len(shards) >= 2
    names = [str(s) for s in shards]
    kw = dict(model=str(model_dir), output=str(tmp_path / "x"))
    assert load_config(input=[str(real_data / "wds")], **kw).input == names
    assert load_config(input=str(real_data / "wds" / "*.tar"), **kw).input == names
    stem = shards[0].name.rsplit("-", 1)[0]
    brace = str(real_data / "wds" / f"{stem}-{{{0:06d}..{len(shards) - 1:06d}}}.tar")
    assert load_config(input=[brace], **kw).input == names
    assert brace_expand("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert brace_expand("{a,b}/{1..2}") == ["a/1", "a/2", "b/1", "b/2"] and brace_expand("{x}") == ["{x}"]
    with pytest.raises(ConfigError, match="not found"):  # a brace pattern names exact files
        load_config(input=[str(real_data / "wds" / f"{stem}-{{000000..999999}}.tar")], **kw)
    # an Energon dataset directory: its *.tar shards only (recursively), not the other files
    ds = tmp_path / "ds"
    (ds / ".nv-meta").mkdir(parents=True)
    (ds / "parts").mkdir()
    for s in shards:
        os.symlink(s, ds / "parts" / s.name)
    shutil.copy(real_data / "broken.jsonl", ds / "notes.jsonl")
    assert load_config(input=[str(ds)], **kw).input == [str(ds / "parts" / s.name) for s in shards]
    # a directory packs exactly like its shards listed one by one
    rep_d = _pack([real_data / "wds"], tmp_path / "d", model_dir, real_data)
    rep_l = _pack(shards, tmp_path / "l", model_dir, real_data)
    assert rep_d["samples_packed"] == rep_l["samples_packed"] > 400
    assert shard_hashes(tmp_path / "d") == shard_hashes(tmp_path / "l") != {}


def test_killed_lmdb_run_resumes_to_the_same_bytes(case, model_dir, real_data):
    """JSONL + ``--media-lmdb``: a CLI run SIGKILLed mid-write and run again gives the bytes of an
    uninterrupted run (a rerun is byte-identical), keeping the shards done before the kill; a rerun
    on the finished output changes nothing."""
    from test_sources_parquet import assert_killed_run_resumes_to_the_same_bytes

    tmp, _, _, _ = case
    args = ["pack", "--input", tmp / "lmdb.jsonl", "--model", model_dir, "--media-root", real_data,
            "--media-lmdb", f"demo={tmp / 'env'}", "--max-reject-fraction", 1, "--seq-len", 4096,
            "--max-packs-per-shard", 2, "--pretokenize", "--workers", 1, "--no-progress"]
    assert_killed_run_resumes_to_the_same_bytes(args, tmp)


def test_undecodable_lmdb_value_is_rejected_like_a_corrupt_file(tmp_path, real_data, model_dir):
    """Image bytes that do not decode (garbage after a PNG signature; a real PNG cut in half) get the
    same reason from an LMDB value as from a loose file, and nothing is lost: records_read ==
    samples_packed + rejected."""
    lines = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()[:200]]
    good = [r for r in lines if len(r.get("images") or []) == 1 and (real_data / r["images"][0]).is_file()
            and r["images"][0].endswith(".png")][:6]
    assert len(good) == 6
    png = (real_data / good[0]["images"][0]).read_bytes()
    bad = {"garbage.png": b"\x89PNG\r\n\x1a\n not an image", "cut.png": png[: len(png) // 2]}
    items = {r["images"][0]: (real_data / r["images"][0]).read_bytes() for r in good[2:]}
    items.update(bad)
    _make_env(tmp_path / "env", items)
    for name, data in items.items():  # the same bytes as loose files under a media root
        (tmp_path / "media" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "media" / name).write_bytes(data)
    recs = [dict(r, images=[name]) for r, name in zip(good[:2], bad, strict=True)] + good[2:]
    reports, reasons = {}, {}
    for route, prefix in (("file", ""), ("lmdb", "lmdb://demo/")):
        rows = [dict(r, images=[prefix + r["images"][0]]) for r in recs]
        (tmp_path / f"{route}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        reports[route] = _pack([tmp_path / f"{route}.jsonl"], tmp_path / route, model_dir, tmp_path / "media",
                               workers=1, media_lmdb={"demo": str(tmp_path / "env")})
        reasons[route] = {k: r["reason"] for k, r in _rejects(tmp_path / route).items()}
    assert reasons["lmdb"] == reasons["file"] == {r["id"]: "media_undecodable" for r in good[:2]}
    for rep in reports.values():
        assert rep["identity_holds"] and rep["records_read"] == rep["samples_packed"] + rep["rejected"] == 6
    assert set(_samples(tmp_path / "lmdb")) == set(_samples(tmp_path / "file")) == {r["id"] for r in good[2:]}
