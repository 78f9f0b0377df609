"""WebDataset shards as input, read in place: the demo's own ``wds/`` packs like the JSONL route.

Per sample id: the same ``num_tokens`` and byte-identical media parts as packing the same samples
from ``real_sft.jsonl`` + loose image files; Energon loads the output with every accepted id
once; 1 vs 2 workers give identical bytes; broken shards are refused with one line or rejected
with a reason.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from vlmpack.config import load_config
from vlmpack.errors import InputError
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.sources import detect_format
from vlmpack.sources.wds import WdsSource

pytestmark = pytest.mark.slow


def _samples(out: Path) -> dict[str, tuple[int, list[bytes]]]:
    """id -> (num_tokens, media bytes in order) over every shard of a pack output."""
    got = {}
    for raw in read_packs(out):
        for s in json.loads(raw["json"])["samples"]:
            got[s["id"]] = (s["num_tokens"], [raw[p["part"]] for p in s["media"]])
    return got


def shard_hashes(out: Path) -> dict[str, str]:
    """sha256 of every shard and index of a pack output, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar*"))}


def assert_same_samples(got: dict, want: dict) -> None:
    """Two :func:`_samples` maps hold the same ids, each with the same count and media bytes."""
    assert set(got) == set(want)
    diff = [i for i in got if got[i][0] != want[i][0]]
    assert not diff, f"token counts differ for {diff[:5]}"
    media = [i for i in got if got[i][1] != want[i][1]]
    assert not media, f"media bytes differ for {media[:5]}"


def _pack(inputs, out: Path, model_dir: Path, media_root: Path, workers: int = 2) -> dict:
    cfg = load_config(input=[str(p) for p in inputs], media_root=str(media_root), model=str(model_dir),
                      output=str(out), seq_len=8192, workers=workers, progress=False)
    return run_pack(cfg)


@pytest.fixture(scope="module")
def both(tmp_path_factory, real_data, model_dir):
    tmp = tmp_path_factory.mktemp("wds")
    shards = sorted((real_data / "wds").glob("*.tar"))
    assert len(shards) >= 2 and all(detect_format(str(s)) == "wds" for s in shards)
    rep_w = _pack(shards, tmp / "w", model_dir, real_data)
    ids = set(_samples(tmp / "w"))
    lines = [x for x in (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()
             if json.loads(x)["id"] in ids]
    (tmp / "same.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep_j = _pack([tmp / "same.jsonl"], tmp / "j", model_dir, real_data)
    return tmp, shards, rep_w, rep_j


def test_wds_packs_like_the_jsonl_route(both):
    tmp, _, rep_w, rep_j = both
    w, j = _samples(tmp / "w"), _samples(tmp / "j")
    assert rep_w["rejected"] == 0 and rep_w["identity_holds"] and len(w) == rep_w["records_read"] > 400
    assert_same_samples(w, j)
    assert sum(len(v[1]) for v in w.values()) > 300  # images really came out of the shards


def test_energon_loads_every_id_once_and_verify_passes(both):
    from vlmpack.verify import verify_output

    tmp, _, rep_w, _ = both
    res = verify_output(tmp / "w", workers=2)  # check (Energon loads every id once) + recount from the bytes
    assert res["problems"] == [] and res["samples"] == rep_w["samples_packed"] == len(res["ids"])


def test_one_or_two_workers_give_the_same_bytes(both, model_dir, real_data):
    tmp, shards, _, _ = both
    _pack(shards, tmp / "w1", model_dir, real_data, workers=1)
    assert shard_hashes(tmp / "w1") == shard_hashes(tmp / "w")


def test_split_covers_every_sample_once(real_data):
    shard = str(sorted((real_data / "wds").glob("*.tar"))[0])
    whole = list(WdsSource.read(shard, 0, -1, 1))
    parts = []
    for start, end, first in WdsSource.split(shard, 200_000):
        parts += list(WdsSource.read(shard, start, end, first))
    assert len(WdsSource.split(shard, 200_000)) > 2
    assert [(s.id, s.locator) for s in parts] == [(s.id, s.locator) for s in whole]


def test_broken_shards(tmp_path, real_data, model_dir):
    shard = sorted((real_data / "wds").glob("*.tar"))[0]
    data = shard.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2 + 100])  # inside a member
    with pytest.raises(InputError, match="truncated"):
        WdsSource.split(str(cut), 1 << 20)
    with tarfile.open(shard) as tf:
        last = tf.getmembers()[3]
    between = tmp_path / "between.tar"
    end = last.offset_data + -(-last.size // 512) * 512
    between.write_bytes(data[:end])  # a cut at a member boundary: no end-of-archive blocks
    with pytest.raises(InputError, match="end-of-archive"):
        WdsSource.split(str(between), 1 << 20)
    gz = tmp_path / "shard.tar.gz"
    gz.write_bytes(gzip.compress(data[:20000]))
    with pytest.raises(InputError, match="tar"):
        load_config(input=[str(gz)], model=str(model_dir), output=str(tmp_path / "o"))
    # a sample whose image part is missing, and one without a json part: rejected with a reason
    edited = tmp_path / "edited.tar"
    with tarfile.open(shard) as src, tarfile.open(edited, "w", format=tarfile.USTAR_FORMAT) as dst:
        groups: dict[str, list] = {}
        for m in src.getmembers():
            groups.setdefault(m.name.split(".")[0], []).append(m)
        whole = [g for g in groups.values() if all(m.isreg() for m in g)][:20]  # samples without hard links
        members = [m for g in whole for m in g]
        drop_img = next(m.name for m in members if m.name.endswith(".png"))
        drop_json = next(m.name for m in members if m.name.endswith(".json") and
                         not m.name.startswith(drop_img.split(".")[0]))
        bad_img = next(m.name for m in members if m.name.endswith(".png") and m.name.split(".")[0] not in
                       (drop_img.split(".")[0], drop_json.split(".")[0]))
        for m in members:
            if m.name not in (drop_img, drop_json):
                data = src.extractfile(m).read()
                if m.name == bad_img:  # the PNG signature, then bytes that do not decode (same size)
                    data = data[:8] + bytes(len(data) - 8)
                dst.addfile(m, io.BytesIO(data))
    cfg = load_config(input=[str(edited)], model=str(model_dir), output=str(tmp_path / "e"), seq_len=8192,
                      workers=1, progress=False, max_reject_fraction=1)
    report = run_pack(cfg)
    rejects = {json.loads(x)["key"]: json.loads(x)["reason"] for x in (tmp_path / "e" / "rejects.jsonl").read_text()
               .splitlines()}
    assert rejects == {drop_img.split(".")[0]: "media_missing", drop_json.split(".")[0]: "unknown_schema",
                       bad_img.split(".")[0]: "media_undecodable"}
    assert report["identity_holds"] and report["samples_packed"] == report["records_read"] - 3
    shutil.rmtree(tmp_path / "e")


def test_killed_wds_run_resumes_to_the_same_bytes(both, model_dir, real_data):
    from hostile_corpus import kill_mid_write, run_cli

    tmp, shards, _, _ = both
    args = ["pack", *[x for s in shards for x in ("--input", s)], "--model", model_dir, "--seq-len", 4096,
            "--max-packs-per-shard", 2, "--pretokenize", "--workers", 1, "--no-progress"]
    ref = run_cli([*args, "--output", tmp / "kref"])
    assert ref.returncode == 0, ref.stderr
    kill_mid_write(args, tmp / "killed")
    again = run_cli([*args, "--output", tmp / "killed"])
    assert again.returncode == 0, again.stderr
    assert shard_hashes(tmp / "killed") == shard_hashes(tmp / "kref")


def _native(obj: dict, text_key: str, name_parts: bool, strip_leading: bool) -> dict:
    """A demo ``json`` part rewritten in the WDS-native packer's schema (``texts`` + ``media`` + ``name``)."""
    turns = [{"role": "user" if t["from"] == "human" else "assistant", "content": t["value"]}
             for t in obj["conversations"]]
    names = obj.get("image_keys", [])
    if strip_leading and len(names) == 1 and turns[0]["content"].startswith("<image>") \
            and sum(t["content"].count("<image>") for t in turns) == 1:
        turns[0]["content"] = turns[0]["content"][len("<image>"):]  # media go first when no placeholder is left
    out = {"id": obj["id"], text_key: turns, "media": "image" if names else "text"}
    if name_parts and names:
        out["name" if len(names) % 2 else "media_files"] = names
    return out


def test_wds_native_packer_schema_packs_like_the_jsonl_route(both, model_dir, tmp_path):
    """The WDS-native packer's schema (``texts``/``--text-key`` turns, ``media`` kind, media by
    ``name``/``media_files`` or by extension, no placeholder) gives the JSONL route's counts and bytes."""
    tmp, shards, _, _ = both
    want = _samples(tmp / "j")
    for text_key in ("texts", "dialog"):
        native = tmp_path / f"native-{text_key}.tar"
        with tarfile.open(shards[0]) as src, tarfile.open(native, "w", format=tarfile.USTAR_FORMAT) as dst:
            for i, m in enumerate(src.getmembers()):
                data = src.extractfile(m).read()
                if m.name.endswith(".json"):
                    data = json.dumps(_native(json.loads(data), text_key, i % 3 != 0, i % 2 == 0)).encode()
                    m.size = len(data)
                dst.addfile(m, io.BytesIO(data))
        cfg = load_config(input=[str(native)], model=str(model_dir), output=str(tmp_path / f"o-{text_key}"),
                          seq_len=8192, workers=1, progress=False,
                          text_key=None if text_key == "texts" else text_key)
        report = run_pack(cfg)
        got = _samples(tmp_path / f"o-{text_key}")
        assert report["rejected"] == 0 and len(got) == report["records_read"] > 100
        assert_same_samples(got, {i: want[i] for i in got})
    with pytest.raises(Exception, match="text_key"):
        load_config(input=[str(native)], model=str(model_dir), output=str(tmp_path / "x"), text_key="")
