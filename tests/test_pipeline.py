"""End to end: ``vlmpack pack`` on the real demo set (+ its broken records) -> Energon loads it.

These tests run the real CLI / pipeline on the real data and the real Qwen tokenizer; nothing is
mocked. They check the Done-when list of the main job: every accepted id exactly once through
Energon, every pack <= seq_len, rejections with the right reasons and the identity
``read = packed + rejected + overlong``, byte-identical reruns (whatever the worker count), a
killed run that resumes to the same bytes, and utilization within 1 % of the lower bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from cli_runner import run_cli, start_cli

from vlmpack.config import load_config
from vlmpack.errors import OverlongError, RunDirError
from vlmpack.pack.pipeline import run_pack

pytestmark = pytest.mark.slow

# Expected reason for each deliberately broken record of the real data (by its `_broken` tag);
# None = accepted (a BOM + CRLF line is tolerated; the first of two records with id 7 is kept).
BROKEN_REASON = {
    "missing_image": "media_missing", "truncated_png": "media_undecodable", "empty_file": "media_undecodable",
    "text_as_jpg": "media_undecodable", "garbled_png": "media_undecodable", "svg_image": "media_undecodable",
    "image_is_dir": "media_missing", "path_traversal": "media_outside_root",
    "empty_conversations": "empty_conversation", "missing_conversations": "unknown_schema",
    "conversations_is_str": "wrong_type", "images_is_str": "wrong_type", "value_is_int": "wrong_type",
    "unknown_role": "unknown_role", "starts_with_gpt": "bad_turn_order", "no_assistant_turn": "no_assistant_turn",
    "empty_strings": "empty_turn", "more_tokens_than_images": "placeholder_mismatch",
    "image_without_token": "placeholder_mismatch", "token_without_image": "placeholder_mismatch",
    "id_is_int_and_duplicate": None, "duplicate_id": "duplicate_id", "null_image_entry": "wrong_type",
    "turn_missing_value": "wrong_type", "utf8_bom": None,
}


def _cfg(real_data: Path, model_dir: Path, out: Path, seq_len: int, **kw):
    return load_config(input=[str(real_data / "real_sft.jsonl"), str(real_data / "broken.jsonl")],
                       media_root=str(real_data), model=str(model_dir), output=str(out), seq_len=seq_len,
                       progress=False, **kw)


def _shard_hashes(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar*"))}


@pytest.fixture(scope="module")
def pack_runs(tmp_path_factory, real_data, model_dir):
    """Runs of the real set, one per seq_len, made on first use and shared by the tests."""
    runs: dict[int, tuple] = {}

    def get(seq_len: int):
        if seq_len not in runs:
            out = tmp_path_factory.mktemp(f"pack{seq_len}")
            report = run_pack(_cfg(real_data, model_dir, out, seq_len, workers=2, max_packs_per_shard=100))
            runs[seq_len] = (seq_len, out, report)
        return runs[seq_len]

    return get


@pytest.fixture(params=[4096, 8192])
def packed(request, pack_runs):
    return pack_runs(request.param)


@pytest.fixture()
def packed4096(pack_runs):
    return pack_runs(4096)


def _broken_expectations(real_data: Path) -> tuple[dict[int, str | None], int]:
    expected: dict[int, str | None] = {}
    raw = (real_data / "broken.jsonl").read_bytes().split(b"\n")
    for line_no, line in enumerate(raw[:-1], 1):
        if not line.strip():
            continue
        try:
            tag = json.loads(line.decode("utf-8-sig").strip()).get("_broken")
        except UnicodeDecodeError:
            tag = "non_utf8"
        except (ValueError, AttributeError):
            tag = "truncated_json" if line.startswith(b"{") else "not_object"
        expected[line_no] = {"non_utf8": "not_utf8", "truncated_json": "invalid_json",
                             "not_object": "not_an_object"}.get(tag, BROKEN_REASON.get(tag, "?"))
    return expected, sum(1 for line in raw[:-1] if line.strip())


def test_energon_yields_every_accepted_sample_once(packed, real_data):
    from vlmpack.check import check_output

    seq_len, out, report = packed
    res = check_output(out, num_workers=2)
    assert res["problems"] == []
    assert res["max_pack_tokens"] <= seq_len
    assert res["packs"] == report["packs"]
    rejected_ids = {json.loads(x)["id"] for x in (out / "rejects.jsonl").read_text().splitlines()}
    accepted = [json.loads(x)["id"] for x in (real_data / "real_sft.jsonl").read_text().splitlines()]
    accepted = {i for i in accepted if i not in rejected_ids}
    assert set(res["ids"]) - {"7", "broken-bom"} == accepted  # the 2 tolerated records of broken.jsonl
    assert all(v == 1 for v in res["ids"].values())


def test_identity_and_reasons(packed, real_data):
    seq_len, out, report = packed
    expected, broken_records = _broken_expectations(real_data)
    good = sum(1 for _ in open(real_data / "real_sft.jsonl", "rb"))
    assert report["records_read"] == good + broken_records
    assert report["identity_holds"]
    assert report["records_read"] == report["samples_packed"] + report["rejected"] + report["dropped_overlong"]
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    got = {r["line"]: r["reason"] for r in rejects if r["file"].endswith("broken.jsonl")}
    want = {line: reason for line, reason in expected.items() if reason is not None}
    assert got == want
    # nothing of the good file is rejected except as overlong
    assert Counter(r["reason"] for r in rejects if r["file"].endswith("real_sft.jsonl")).keys() <= {"overlong"}
    by_reason = Counter(r["reason"] for r in rejects)
    assert report["dropped_overlong"] == by_reason.pop("overlong", 0)
    assert report["rejected_by_reason"] == dict(sorted(by_reason.items()))


def test_utilization_near_lower_bound(packed):
    seq_len, out, report = packed
    assert report["lower_bound_packs"] == -(-report["tokens"] // seq_len)
    if seq_len == 8192:
        assert report["utilization_of_lower_bound"] >= 0.99
    for sh in out.glob("*.tar"):
        assert report["shard_sha256"][sh.name] == hashlib.sha256(sh.read_bytes()).hexdigest()


def test_rerun_is_byte_identical_whatever_the_workers(packed4096, tmp_path, real_data, model_dir):
    seq_len, out, report = packed4096
    again = tmp_path / "again"
    run_pack(_cfg(real_data, model_dir, again, seq_len, workers=1, max_packs_per_shard=100))
    assert _shard_hashes(again) == _shard_hashes(out)
    assert (again / ".nv-meta" / ".info.json").read_bytes() == (out / ".nv-meta" / ".info.json").read_bytes()


def test_killed_run_resumes_to_the_same_bytes(packed4096, tmp_path, real_data, model_dir):
    seq_len, out, _ = packed4096
    target = tmp_path / "killed"
    cmd = ["pack", "--input", real_data / "real_sft.jsonl", "--input", real_data / "broken.jsonl", "--media-root",
           real_data, "--model", model_dir, "--seq-len", seq_len, "--output", target, "--max-packs-per-shard", 100,
           "--workers", 1, "--no-progress"]
    proc = start_cli(cmd)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(list(target.glob("*.tar"))) < 2:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed mid-write"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(list(target.glob("*.tar")))
    assert 0 < written < len(list(out.glob("*.tar")))
    finished = {m.name[:-5]: (target / m.name[:-5]).stat().st_mtime_ns
                for m in (target / ".vlmpack" / "shards").glob("*.json")}
    assert finished  # with one worker, a second shard on disk means the first one's marker is written
    done = run_cli(cmd)
    assert done.returncode == 0, done.stderr
    assert _shard_hashes(target) == _shard_hashes(out)
    # shards finished before the kill are kept, not written again
    assert {n: (target / n).stat().st_mtime_ns for n in finished} == finished
    # the summary and report.json say what the resumed run reused
    reused = json.loads((target / "report.json").read_text())["reused"]
    assert reused["count_tasks_reused"] == reused["count_tasks"] > 0 and reused["plan_reused"] is True
    assert len(finished) <= reused["shards_reused"] < reused["shards"]
    assert "resumed" in done.stdout and f"{reused['shards_reused']}/{reused['shards']} shards" in done.stdout


def test_other_config_in_same_output_is_refused(packed4096, real_data, model_dir):
    seq_len, out, _ = packed4096
    with pytest.raises(RunDirError, match="another config"):
        run_pack(_cfg(real_data, model_dir, out, seq_len + 1, workers=1))


def test_overlong_error_stops_with_one_line(tmp_path, real_data, model_dir):
    with pytest.raises(OverlongError, match=r"tokens > --seq-len 512"):
        run_pack(_cfg(real_data, model_dir, tmp_path / "o", 512, workers=1, overlong="error"))
