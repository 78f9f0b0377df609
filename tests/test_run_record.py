"""The run's record of what it wrote (issue 19 item 3): each sample's content sha256 in its shard's
marker, ``hashes.json`` over the reports, the config record, manifest, plan and shards, and the
count stage's media sha256 that ``check`` compares each packed media part with.

On the real output of ``test_check.py`` and the crafted classes of :mod:`hostile_outputs`
(``answer_digit_edited_*``: the attack of the issue, one digit of an assistant answer, same token
count; ``image_replaced_*``: another image of the same size and media tokens).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pyarrow.parquet as pq
from hostile_outputs import (
    edit_answer_digit,
    image_replaced_content_record_resealed,
    image_replaced_report_resealed,
    reseal_report,
)
from test_check import SHARD, _read_tar, packed  # noqa: F401 - the module's real output

from vlmpack.check import check_output
from vlmpack.fsio import read_sealed_json
from vlmpack.pack.count_task import part_path, read_entry
from vlmpack.pack.seal import RECORDED
from vlmpack.packfmt import entry_digest, parse_pack, sample_digest
from vlmpack.verify import verify_output


def _copy(packed, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    return out


def test_the_run_records_every_sample_and_file(packed):  # noqa: F811
    """Each packed sample's content sha256 is in its shard's marker, equals the one computed from the
    shard and the one of the entry bytes the count stage wrote; hashes.json holds every file."""
    run = packed / ".vlmpack"
    man = pq.read_table(run / "manifest.parquet").to_pylist()
    where = {(("str", "int", "line")[r["id_kind"]], r["id"]): r for r in man}
    report = json.loads((packed / "report.json").read_text())
    n = 0
    for shard in report["shard_sha256"]:
        recorded = read_sealed_json(run / "shards" / (shard + ".json"))["result"]["content_sha256"]
        packs = _read_tar(packed / shard)
        assert sorted(recorded) == [k for k, _ in packs]
        for key, parts in packs:
            parts = dict(parts)
            for s, want in zip(parse_pack(parts["json"])["samples"], recorded[key], strict=True):
                assert sample_digest(s, [hashlib.sha256(parts[m["part"]]).hexdigest() for m in s["media"]]) == want
                row = where[(s["id_kind"], s["id"])]
                with open(part_path(run / "records", row["part"]), "rb") as fh:
                    e = read_entry(fh, row["rec_offset"], row["rec_len"], row["num_tokens"])
                assert entry_digest(e.entry, [sha for sha, _, _ in e.media]) == want  # the bytes the count stage wrote
                n += 1
    assert n == report["samples_packed"] > 200
    files = read_sealed_json(run / "hashes.json")["files"]
    assert sorted(files) == sorted([*RECORDED, *(x for s in report["shard_sha256"] for x in (s, s + ".idx"))])
    assert all(hashlib.sha256((packed / name).read_bytes()).hexdigest() == v["sha256"] for name, v in files.items())


def test_the_issue_attack_is_found_although_the_count_holds(packed, tmp_path):  # noqa: F811
    """One digit of an assistant answer, the shard resealed in report.json: verify names the sample,
    and the recount alone finds nothing (the token count is the same)."""
    out = _copy(packed, tmp_path)
    sid = edit_answer_digit(out)
    reseal_report(out)
    problems = verify_output(out, workers=1)["problems"]
    assert any(repr(sid) in p and "content sha256 differs" in p for p in problems), problems
    assert any(p.startswith(f"{SHARD}: sha256") and ".vlmpack/hashes.json" in p for p in problems), problems
    assert any(p.startswith("report.json: sha256") for p in problems), problems
    assert not any("recounted from the shard" in p for p in problems), problems


def test_a_replaced_image_is_a_stale_count(packed, tmp_path):  # noqa: F811
    """Another image of the same size and tokens: with only report.json resealed, the content sha256
    and the count record both see it; with the writer's record rewritten too, the count record does."""
    out = _copy(packed, tmp_path)
    image_replaced_report_resealed(out, None, None)
    problems = check_output(out, num_workers=0)["problems"]
    assert any("content sha256 differs" in p for p in problems), problems
    assert any("the recorded count is not of these bytes" in p for p in problems), problems
    out = _copy(packed, tmp_path / "b")
    image_replaced_content_record_resealed(out, None, None)
    problems = verify_output(out, workers=1)["problems"]
    assert len(problems) == 1 and "a stale cached count" in problems[0] and SHARD in problems[0], problems
