"""Data-parallel shape (issue 22 item 3): whole global batches, balanced vision load per micro step,
figures before / after in the report and ``vlmpack plan --dp-size``, checked on the output."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from demo_data.packs import demo_packs
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vlmpack.check import check_output
from vlmpack.cli import app
from vlmpack.errors import ConfigError
from vlmpack.packfmt import read_packs
from vlmpack.packing import plan_packs
from vlmpack.packing.balance import balanced_order, fill_global_batches, rank_step_loads


@settings(max_examples=40)
@given(st.lists(st.integers(1, 900), min_size=20, max_size=400), st.sampled_from([(2, 2), (4, 8), (8, 8), (3, 12)]),
       st.integers(0, 3))
def test_whole_global_batches_keep_every_sample_once(lengths, shape, seed):
    n_ranks, k = shape
    lengths = np.array(lengths, dtype=np.int64)
    plan = plan_packs(lengths, 1024, seed=seed)
    try:
        filled, added = fill_global_batches(plan, lengths, k)
    except ConfigError:  # too few packs with two samples to split
        assert int((plan.samples_per_pack() >= 2).sum()) < (-plan.num_packs) % k
        return
    filled.validate(lengths)
    assert filled.num_packs % k == 0 and added == filled.num_packs - plan.num_packs < k
    assert sorted(filled.order.tolist()) == sorted(plan.order.tolist())


@settings(max_examples=40)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=60), st.sampled_from([2, 4, 8]), st.integers(0, 5))
def test_balanced_micro_steps_spread_no_more_than_any_order(vision, n_ranks, seed):
    """One pack per rank per step (K = N): micro steps of sorted neighbours have the least total
    max - min of any grouping, so never more than a random order's."""
    v = np.array(vision * n_ranks, dtype=np.int64)  # a multiple of the ranks
    t = np.full(len(v), 100, dtype=np.int64)
    perm = balanced_order(v, t, n_ranks, seed)
    assert sorted(perm.tolist()) == list(range(len(v)))
    after = rank_step_loads(v[perm], t[perm], n_ranks, n_ranks)["vision_tokens"]["spread_mean"]
    other = np.random.default_rng(seed).permutation(len(v))
    assert after <= rank_step_loads(v[other], t[other], n_ranks, n_ranks)["vision_tokens"]["spread_mean"]


def test_rank_step_loads_follow_the_round_robin_convention():
    v, t = np.arange(8), np.arange(8) * 10  # pack i -> step i // 4, rank i % 2 (two micro steps per step)
    loads = rank_step_loads(v, t, 2, 4)
    # step 0: rank 0 packs 0, 2 (vision 2), rank 1 packs 1, 3 (4); step 1: 4 + 6 = 10 and 5 + 7 = 12
    assert loads["steps"] == 2 and loads["vision_tokens"]["spread_mean"] == 2.0
    assert loads["tokens"] == {"avg": 70.0, "min": 20, "max": 120}


@pytest.fixture(scope="module")
def dp_out(real_data, model_dir):
    return demo_packs(real_data, model_dir, seq_len=1024, n_lines=300, group_by_kind=False, dp_size=4,
                      global_batch_size=8)


def test_pack_fills_global_batches_balances_and_check_holds_it(dp_out):
    report = json.loads((dp_out / "report.json").read_text())
    d = report["data_parallel"]
    assert report["packs"] % 8 == 0 and report["identity_holds"]
    assert d["packs_before"] + d["packs_added"] == report["packs"]
    assert d["tail_packs_before"] + d["packs_added"] in (0, 8)
    assert d["after"]["vision_tokens"]["spread_mean"] < d["before"]["vision_tokens"]["spread_mean"]
    # the figures are those of the packs in output order
    loads = [(sum(m["num_tokens"] for s in json.loads(p["json"])["samples"] for m in s["media"]),
              json.loads(p["json"])["num_tokens"]) for p in read_packs(dp_out)]
    v, t = (np.array(x) for x in zip(*loads))
    assert rank_step_loads(v, t, 4, 8) == d["after"]
    assert check_output(dp_out, num_workers=0)["problems"] == []


def test_check_finds_packs_out_of_the_recorded_order(dp_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(dp_out, out, symlinks=True)
    report = json.loads((out / "report.json").read_text())
    report["data_parallel"]["after"]["vision_tokens"]["spread_max"] += 1
    (out / "report.json").write_text(json.dumps(report))
    problems = check_output(out, num_workers=0)["problems"]
    assert any("per-rank loads in output order" in p for p in problems)


def test_plan_prints_the_ranks_before_and_after(dp_out):
    res = CliRunner().invoke(app, ["plan", str(dp_out), "-L", "1024", "--dp-size", "4", "--global-batch-size", "8",
                                   "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]["data_parallel"]
    report = json.loads((dp_out / "report.json").read_text())["data_parallel"]
    assert (row["packs_before"] + row["packs_added"]) % 8 == 0 and row["after"]["steps"] >= row["before"]["steps"]
    res = CliRunner().invoke(app, ["plan", str(dp_out), "-L", "1024", "--dp-size", "4"])
    assert res.exit_code == 0 and "global_seq_len per rank" in res.output and "4 x 1" in res.output
    res = CliRunner().invoke(app, ["plan", str(dp_out), "--dp-size", "4", "--global-batch-size", "6"])
    assert res.exit_code == 2 and "must be a positive multiple of --dp-size 4" in res.output
    assert report["dp_size"] == 4
