"""Stages called with their own options and plain inputs, no PackConfig (issue 18 item 5).

- The plan stage: ``make_plan(PlanOptions, table)`` on a plain table of real counts gives the plan of
  the pipeline's own run (same ``plan.npz`` arrays), and ``plan_key`` of the options equals the key
  of the config.
- The count of a plain list of samples: ``count_samples(family, samples)`` on samples read and
  validated from the demo JSONL gives each sample the length of the family's own ``encode``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlmpack.config import load_config
from vlmpack.models import load_model
from vlmpack.pack.count_task import count_samples
from vlmpack.pack.pipeline import make_plan, run_pack
from vlmpack.pack.stages import PLAN_OPTIONS, PlanOptions, plan_key
from vlmpack.pack.validate import validate_sample
from vlmpack.packing import PackPlan
from vlmpack.records import Sample
from vlmpack.sources import get_source


def test_plan_stage_takes_plan_options_and_a_plain_table(real_data, model_dir, tmp_path):
    src = tmp_path / "in.jsonl"
    with open(real_data / "real_sft.jsonl", "rb") as f:
        src.write_bytes(b"".join(itertools.islice(f, 400)))
    cfg = load_config(input=[str(src)], media_root=str(real_data), model=str(model_dir), output=str(tmp_path / "out"),
                      seq_len=2048, algorithm="ffd", max_samples_per_pack=8, pad_to_multiple_of=16, seed=3,
                      progress=False, workers=1)
    run_pack(cfg)
    opts = PlanOptions.of(cfg)
    assert {k: getattr(opts, k) for k in PLAN_OPTIONS} == {k: getattr(cfg, k) for k in PLAN_OPTIONS}
    assert plan_key(opts, "digest") == plan_key(cfg, "digest")
    assert plan_key(PlanOptions(**{**vars(opts), "seed": 4}), "digest") != plan_key(opts, "digest")
    run = tmp_path / "out" / ".vlmpack"
    manifest = pq.read_table(run / "manifest.parquet")
    plain = pa.table({c: pa.array(manifest.column(c).to_numpy()) for c in ("num_tokens", "num_media",
                                                                            "media_tokens", "kind")})
    mine, theirs = make_plan(opts, plain), PackPlan.from_npz(run / "plan.npz")
    assert len(mine.offsets) > 2
    for name in ("pack_ids", "offsets", "order", "overlong"):
        assert np.array_equal(getattr(mine, name), getattr(theirs, name)), name


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
