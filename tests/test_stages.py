"""Count once, plan many: per-stage keys, the count cache, and ``vlmpack plan --input`` (issue 11, items 2-3).

Real data (the demo set) and the real Qwen tokenizer. That a stage did not run is proven by a spy on
the counter (``vlmpack.pack.count_task.run_task``, runs in process with ``workers=1``), by making every
``load_model`` raise, and by the report's ``reused`` record; never by a timing. That reused counts
are right is proven by comparing the shards with a run that counts from scratch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import vlmpack.models
from vlmpack.cli import app
from vlmpack.config import PackConfig, load_config
from vlmpack.pack import count_task as count_mod
from vlmpack.pack import executors
from vlmpack.pack.pipeline import run_pack
from vlmpack.pack.stages import COUNT_OPTIONS, NO_STAGE, PLAN_OPTIONS, WRITE_OPTIONS, count_key, plan_key, write_key
from vlmpack.sinks import vlmpack as vlmpack_sink

pytestmark = pytest.mark.slow


def _cfg(inputs, real_data, model_dir, out, cache, **kw) -> PackConfig:
    return load_config(input=inputs, media_root=str(real_data), model=str(model_dir), output=str(out),
                       progress=False, workers=1, cache_dir=str(cache), **kw)


def _spy_counter(monkeypatch) -> list[int]:
    """Record the task index of every call of the counter (the in-process executor calls it here)."""
    calls: list[int] = []
    real = count_mod.run_task

    def spy(task):
        calls.append(task.index)
        return real(task)

    monkeypatch.setattr(count_mod, "run_task", spy)
    return calls


def _forbid_model(monkeypatch) -> None:
    def boom(*_a, **_k):
        raise AssertionError("the model was loaded")

    for mod in (vlmpack.models, count_mod, executors, vlmpack_sink):  # the sink loads it to pretokenize
        monkeypatch.setattr(mod, "load_model", boom)


def _shards(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar*"))}


def test_every_option_belongs_to_one_stage():
    stages = [*COUNT_OPTIONS, *PLAN_OPTIONS, *WRITE_OPTIONS, *NO_STAGE]
    assert len(stages) == len(set(stages))
    assert set(stages) == set(PackConfig.model_fields), "a new option must be put in one stage of vlmpack.pack.stages"


def test_stage_keys_follow_their_own_inputs(small_demo, real_data, model_dir, tmp_path):
    base = _cfg(small_demo, real_data, model_dir, tmp_path / "o", tmp_path / "c", seq_len=4096)
    payload = base.fingerprint_payload()
    ck, pk = count_key(base, payload), plan_key(base, "m")
    wk = write_key(base, ck, pk, "media")
    for change in ({"seq_len": 8192}, {"algorithm": "ffd"}, {"max_media_per_pack": 3}, {"group_by_kind": True},
                   {"max_packs_per_shard": 7}, {"pretokenize": True}, {"workers": 2}, {"output": str(tmp_path / "x")},
                   {"split": {"train": 0.9, "val": 0.1}}):
        other = base.model_copy(update=change)
        assert count_key(other, other.fingerprint_payload()) == ck, change
    for change in ({"media_check": "decode"}, {"special_tokens": "split"}, {"input_schema": "llava"},
                   {"text_key": "conversations"}, {"input": small_demo[:1]}):
        kw = {"schema" if k == "input_schema" else k: v for k, v in change.items()}
        other = _cfg(kw.pop("input", small_demo), real_data, model_dir, tmp_path / "o", tmp_path / "c", seq_len=4096,
                     **kw)
        assert count_key(other, other.fingerprint_payload()) != ck, change
    for change, plan_same in (({"seq_len": 8192}, False), ({"seed": 3}, False), ({"max_shard_bytes": 1 << 20}, True),
                              ({"shard_prefix": "x"}, True), ({"split": {"train": 0.9, "val": 0.1}}, False)):
        other = base.model_copy(update=change)
        assert (plan_key(other, "m") == pk) == plan_same, change
        assert write_key(other, ck, plan_key(other, "m"), "media") != wk, change
    assert plan_key(base, "other manifest") != pk and write_key(base, ck, pk, "other media") != wk


def test_another_seq_len_replans_and_rewrites_without_counting(small_demo, real_data, model_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    calls = _spy_counter(monkeypatch)
    first = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "a", cache, seq_len=4096))
    n = first["reused"]["count_tasks"]
    assert n >= 2 and sorted(calls) == list(range(n)) and first["reused"]["count_tasks_reused"] == 0
    calls.clear()
    _forbid_model(monkeypatch)

    # the same OUT at another L (--overwrite): planned and written again, nothing counted
    again = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "a", cache, seq_len=8192, overwrite=True))
    assert calls == []
    assert first["seconds"]["worker_count"] > 0  # the summary's worker seconds are this run's: none here
    assert again["seconds"]["worker_count"] == again["seconds"]["worker_read_validate"] == 0
    assert again["reused"] == {"count_tasks": n, "count_tasks_reused": n, "count_tasks_from_cache": 0,
                               "plan_reused": False, "shards": again["shards"], "shards_reused": 0}
    assert again["stage_keys"]["count"] == first["stage_keys"]["count"]
    assert again["stage_keys"]["plan"] != first["stage_keys"]["plan"] and again["packs"] < first["packs"]

    # a write option only: the plan is kept, the shards are written again
    split = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "a", cache, seq_len=8192, overwrite=True,
                          max_packs_per_shard=4))
    assert calls == [] and split["reused"]["plan_reused"] is True and split["reused"]["shards_reused"] == 0
    assert split["packs"] == again["packs"] and split["shards"] == -(-again["packs"] // 4)
    assert split["stage_keys"]["plan"] == again["stage_keys"]["plan"] != split["stage_keys"]["write"]

    # a new OUT (another L and algorithm) takes the counts from the shared cache
    other = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "b", cache, seq_len=2048, algorithm="ffd"))
    assert calls == [] and other["reused"]["count_tasks_from_cache"] == n and other["samples_packed"] > 0

    # a finished run started again: nothing counted, planned or written, no model loaded
    noop = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "b", cache, seq_len=2048, algorithm="ffd"))
    assert calls == [] and noop["reused"]["plan_reused"] and noop["reused"]["shards_reused"] == noop["shards"]
    assert noop["shard_sha256"] == other["shard_sha256"]
    monkeypatch.undo()

    # the reused counts give the bytes of a run that counts everything itself (cache off)
    cold = run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "cold", "off", seq_len=8192,
                         max_packs_per_shard=4))
    assert cold["reused"]["count_tasks_reused"] == 0
    assert _shards(tmp_path / "cold") == _shards(tmp_path / "a") and len(_shards(tmp_path / "a")) == 2 * split["shards"]
    assert (tmp_path / "cold" / "rejects.jsonl").read_bytes() == (tmp_path / "a" / "rejects.jsonl").read_bytes()


def test_an_input_named_another_way_is_counted_under_that_name(small_demo, real_data, model_dir, tmp_path,
                                                              monkeypatch):
    """The count cache is keyed by the inputs' names as given: the same files named relative to
    another folder are counted again, so the shards' ``source.file``, ``rejects.jsonl`` and the
    report's per-file figures name them as this run does (before: the first run's names, and the
    rejections of the second file attributed to no file), and the shards equal a run without cache."""
    cache = tmp_path / "cache"
    run_pack(_cfg(small_demo, real_data, model_dir, tmp_path / "abs", cache, seq_len=4096))
    monkeypatch.chdir(Path(small_demo[0]).parent)
    rel = [os.path.relpath(p) for p in small_demo]
    assert rel != small_demo
    cached = run_pack(_cfg(rel, real_data, model_dir, tmp_path / "rel", cache, seq_len=4096))
    fresh = run_pack(_cfg(rel, real_data, model_dir, tmp_path / "fresh", tmp_path / "other-cache", seq_len=4096))
    assert cached["reused"]["count_tasks_from_cache"] == 0
    assert _shards(tmp_path / "rel") == _shards(tmp_path / "fresh")
    assert cached["sources"] == fresh["sources"] and [s["file"] for s in cached["sources"]] == rel
    assert sum(s["rejected"] for s in cached["sources"]) == cached["rejected"] > 0
    files = {json.loads(x)["file"] for x in (tmp_path / "rel" / "rejects.jsonl").read_text().splitlines()}
    assert files == set(rel)


def test_plan_preflight_from_inputs_then_pack_reuses_the_counts(real_data, model_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    inputs = ["--input", str(real_data / "real_sft.jsonl"), "--input", str(real_data / "broken.jsonl")]
    common = [*inputs, "--media-root", str(real_data), "--model", str(model_dir), "--cache-dir", str(cache),
              "--no-progress"]
    runner = CliRunner()
    res = runner.invoke(app, ["plan", *common, "-L", "4096", "-L", "8192", "-L", "16384", "--json", "--workers", "2"])
    assert res.exit_code == 0, res.output
    rows = {r["seq_len"]: r for r in json.loads(res.stdout)}
    assert sorted(rows) == [4096, 8192, 16384]
    done, total = map(int, re.search(r"(\d+)/(\d+) count tasks reused", res.stderr).groups())
    assert done == 0 and total >= 4  # 7 MB of JSONL in tasks of 2 MiB, + broken.jsonl
    assert not list(tmp_path.rglob("*.tar")) and not list(Path.cwd().glob("*.tar"))  # no shard written

    # the table and plot again: the counts come from the cache (the counter is not called)
    calls = _spy_counter(monkeypatch)
    _forbid_model(monkeypatch)
    png = tmp_path / "plan.png"
    res = runner.invoke(app, ["plan", *common, "-L", "4096", "-L", "8192", "-L", "16384", "--plot", str(png),
                              "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert f"{total}/{total} count tasks reused" in res.stderr and calls == []
    assert "| 8192 |" in res.stdout and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # a following pack at one of the L counts nothing, and packs as the table said
    cfg = load_config(input=[str(real_data / "real_sft.jsonl"), str(real_data / "broken.jsonl")],
                      media_root=str(real_data), model=str(model_dir), output=str(tmp_path / "out"), seq_len=8192,
                      workers=1, progress=False, cache_dir=str(cache), max_packs_per_shard=100)
    report = run_pack(cfg)
    assert calls == [] and report["reused"]["count_tasks_from_cache"] == report["reused"]["count_tasks"] == total
    row = rows[8192]
    assert row["packs"] == report["packs"] and row["L1"] == report["lower_bound_packs"]
    assert row["overlong"] == report["dropped_overlong"]
    assert row["samples"] - row["overlong"] == report["samples_packed"]
    assert row["utilization"] == pytest.approx(report["utilization"], abs=1e-12)
    assert row["tokens"] - row["overlong_tokens"] == report["tokens"]


def test_plan_needs_either_a_source_or_inputs_and_a_model(real_data, model_dir, tmp_path):
    runner = CliRunner()
    for args, says in ((["plan", str(tmp_path), "--input", str(real_data / "broken.jsonl"), "--model",
                         str(model_dir)], "not both"),
                       (["plan", "--input", str(real_data / "broken.jsonl")], "--model is needed"),
                       (["plan"], "nothing to plan")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and says in res.stderr, res.output
