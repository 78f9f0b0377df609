"""Stages called with their own options and plain inputs, no PackConfig (issue 18 item 5).

- The plan stage: ``make_plan(PlanOptions, table)`` on a plain table of real counts gives the plan of
  the pipeline's own run (same ``plan.npz`` arrays), and ``plan_key`` of the options equals the key
  of the config.
- The count stage: ``count_stage(CountOptions, store, ranges, ...)`` and ``build_manifest(InputFiles,
  ...)`` give the manifest of the pipeline's own run.
- The write stage: ``_shard_tasks(WriteOptions, ...)`` + ``write_shard`` into another folder give the
  pipeline's shard bytes.
- The count of a plain list of samples: ``count_samples(family, samples)`` on samples read and
  validated from the demo JSONL gives each sample the length of the family's own ``encode``.
"""

from __future__ import annotations

import hashlib
import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vlmpack.config import load_config
from vlmpack.models import load_model
from vlmpack.pack.count_stage import count_stage
from vlmpack.pack.count_task import count_samples
from vlmpack.pack.manifest import InputFiles, build_manifest
from vlmpack.pack.nodes import InputRange
from vlmpack.pack.pipeline import _shard_tasks, make_plan, run_pack
from vlmpack.pack.stages import PLAN_OPTIONS, CountOptions, PlanOptions, Workers, WriteOptions, plan_key
from vlmpack.pack.validate import validate_sample
from vlmpack.pack.write import write_shard
from vlmpack.packing import PackPlan
from vlmpack.records import Sample
from vlmpack.sources import get_source


@pytest.fixture(scope="module")
def packed(real_data, model_dir, tmp_path_factory):
    """The pipeline's run on the first 400 demo lines and the demo's 29 broken records: (config,
    input path, OUT)."""
    tmp = tmp_path_factory.mktemp("stage_options")
    src = tmp / "in.jsonl"
    with open(real_data / "real_sft.jsonl", "rb") as f:
        src.write_bytes(b"".join(itertools.islice(f, 400)) + (real_data / "broken.jsonl").read_bytes())
    cfg = load_config(input=[str(src)], media_root=str(real_data), model=str(model_dir), output=str(tmp / "out"),
                      seq_len=2048, algorithm="ffd", max_samples_per_pack=8, pad_to_multiple_of=16, seed=3,
                      progress=False, workers=1, max_packs_per_shard=40, cache_dir="off", max_reject_fraction=0.2)
    run_pack(cfg)
    return cfg, src, tmp / "out"


def test_plan_stage_takes_plan_options_and_a_plain_table(packed):
    cfg, _, out = packed
    opts = PlanOptions.of(cfg)
    assert {k: getattr(opts, k) for k in PLAN_OPTIONS} == {k: getattr(cfg, k) for k in PLAN_OPTIONS}
    assert plan_key(opts, "digest") == plan_key(cfg, "digest")
    assert plan_key(PlanOptions(**{**vars(opts), "seed": 4}), "digest") != plan_key(opts, "digest")
    run = out / ".vlmpack"
    manifest = pq.read_table(run / "manifest.parquet")
    plain = pa.table({c: pa.array(manifest.column(c).to_numpy()) for c in ("num_tokens", "num_media",
                                                                            "media_tokens", "kind")})
    mine, theirs = make_plan(opts, plain), PackPlan.from_npz(run / "plan.npz")
    assert len(mine.offsets) > 2
    for name in ("pack_ids", "offsets", "order", "overlong"):
        assert np.array_equal(getattr(mine, name), getattr(theirs, name)), name


def test_count_stage_takes_count_options_and_ranges(packed, real_data, model_dir, tmp_path):
    _, src, out = packed
    opts = CountOptions(model=str(model_dir), media_root=str(real_data))
    ranges = [InputRange(0, str(src), "jsonl", 0, -1, 1, src.stat().st_size)]
    reuse: dict = {}
    results = count_stage(opts, tmp_path / "store", ranges, "a key", reuse, workers=Workers(workers=1))
    assert reuse == {"count_tasks": 1, "count_tasks_reused": 0, "count_tasks_from_cache": 0}
    manifest, rejections = build_manifest(InputFiles((str(src),)), results, tmp_path / "store")
    theirs = pq.read_table(out / ".vlmpack" / "manifest.parquet")
    assert len(manifest) > 300
    for c in ("id", "num_tokens", "media_tokens", "num_media", "kind", "line", "label_tokens"):
        assert manifest.column(c).to_pylist() == theirs.column(c).to_pylist(), c
    rejected = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    at_count = [(x["line"], x["reason"]) for x in rejected if x["reason"] != "overlong"]  # overlong: the plan's
    assert sorted((r.locator.line, r.reason) for r in rejections) == at_count and at_count


def test_write_stage_takes_write_options(packed, tmp_path):
    cfg, _, out = packed
    run = out / ".vlmpack"
    manifest = pq.read_table(run / "manifest.parquet")
    plan = PackPlan.from_npz(run / "plan.npz")
    opts = WriteOptions(output=str(tmp_path), seq_len=cfg.seq_len, prefix="shard", max_packs_per_shard=40,
                        media_root=str(cfg.media_root))
    tasks = _shard_tasks(opts, run, manifest, plan)
    assert len(tasks) >= 2
    for t in tasks:
        r = write_shard(t)
        assert r.name == t.name and not r.rejected
        for name in (t.name, t.name + ".idx"):
            mine, theirs = (tmp_path / name).read_bytes(), (out / name).read_bytes()
            assert hashlib.sha256(mine).digest() == hashlib.sha256(theirs).digest(), name


def test_count_of_a_plain_list_of_samples(real_data, model_dir):
    family = load_model(str(model_dir))
    samples = []
    for rec in get_source("jsonl").read(str(real_data / "real_sft.jsonl"), 0, -1, 1, media_root=str(real_data)):
        if isinstance(rec, Sample):
            checked = validate_sample(rec, check="header", family=family, media_root=str(real_data))
            if isinstance(checked, Sample):
                samples.append(checked)
        if len(samples) == 120:
            break
    assert any(s.media for s in samples) and any(not s.media for s in samples)
    counted, rejected = count_samples(family, samples)
    assert len(counted) + len(rejected) == len(samples) and len(counted) > 100
    for s in counted:
        ids = family.encode(s.messages, [m.num_tokens for m in s.media])
        assert s.num_tokens == len(ids) > 0 and 0 < s.label_tokens < s.num_tokens, s.id
