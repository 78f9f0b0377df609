"""``--dedup exact`` (issue 22 item 5) on real demo records: copies under other ids, an image copied to
another name, near copies that must stay."""

from __future__ import annotations

import json
import re
import shutil

from vlmpack.check import check_output
from vlmpack.config import load_config
from vlmpack.pack.dedup import first_copies
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs


def test_first_copy_is_kept():
    dups, firsts = first_copies([b"a", b"b", b"a", b"c", b"b", b"a"])
    assert dups.tolist() == [2, 4, 5] and firsts.tolist() == [0, 1, 0]


def _records(real_data, tmp_path):
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()[:80]
    recs = [json.loads(x) for x in lines]
    text = [r for r in recs if not r["images"]][:6]
    image = [r for r in recs if r["images"]][:4]
    assert len(text) == 6 and len(image) == 4
    extra, expected = [], {}  # copy id -> kept id
    for i, r in enumerate(text[:4] + image[:2]):  # copies under new ids: duplicates
        extra.append({**r, "id": f"copy-{i}"})
        expected[f"copy-{i}"] = r["id"]
    # the same image bytes under another file name: a duplicate too
    src = real_data / image[2]["images"][0]
    (tmp_path / "renamed.png").write_bytes(src.read_bytes())
    extra.append({**image[2], "id": "renamed-copy", "images": [str(tmp_path / "renamed.png")]})
    expected["renamed-copy"] = image[2]["id"]
    # near copies: another answer, another image with the same text: not duplicates
    near = json.loads(json.dumps(text[4]))
    near["id"], near["conversations"][-1]["value"] = "near-text", near["conversations"][-1]["value"] + "!"
    other = {**image[3], "id": "near-image", "images": image[0]["images"]}
    extra += [near, other]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in recs + extra) + "\n")
    return len(recs) + len(extra), expected


def test_dedup_exact_rejects_later_copies_with_the_kept_id(real_data, model_dir, tmp_path):
    total, expected = _records(real_data, tmp_path)
    base = dict(input=[str(tmp_path / "in.jsonl")], media_root=str(real_data), model=str(model_dir), seq_len=2048,
                workers=1, progress=False, allow_absolute_media=True)
    report = run_pack(load_config(**base, output=str(tmp_path / "dedup"), dedup="exact"))
    assert report["records_read"] == total and report["identity_holds"]
    assert report["rejected_by_reason"].get("duplicate_content") == len(expected)
    rejects = [json.loads(x) for x in (tmp_path / "dedup" / "rejects.jsonl").read_text().splitlines()]
    dup = {r["id"]: r["detail"] for r in rejects if r["reason"] == "duplicate_content"}
    assert set(dup) == set(expected)
    for copy, kept in expected.items():
        assert f"same content as sample {kept!r}" in dup[copy]
    packed = {s["id"] for p in read_packs(tmp_path / "dedup") for s in json.loads(p["json"])["samples"]}
    assert not packed & set(expected) and {"near-text", "near-image"} <= packed and set(expected.values()) <= packed
    assert check_output(tmp_path / "dedup", num_workers=0)["problems"] == []

    assert report["dedup"] == "exact"

    plain_cfg = load_config(**base, output=str(tmp_path / "plain"))
    assert "dedup" not in plain_cfg.fingerprint_payload()["options"]  # runs made before --dedup keep theirs
    plain = run_pack(plain_cfg)
    assert plain["samples_packed"] == report["samples_packed"] + len(expected) and "dedup" not in plain
    assert check_output(tmp_path / "plain", num_workers=0)["problems"] == []
    # check recomputes the content keys from the shards: the copies are found once the report claims dedup
    rep = json.loads((tmp_path / "plain" / "report.json").read_text())
    (tmp_path / "plain" / "report.json").write_text(json.dumps(rep | {"dedup": "exact"}))
    problems = check_output(tmp_path / "plain", num_workers=0)["problems"]
    pairs = {frozenset(re.findall(r"sample '([^']+)'", p)) for p in problems if "the same content as sample" in p}
    assert pairs == {frozenset((copy, kept)) for copy, kept in expected.items()}
    shutil.rmtree(tmp_path / "plain")
