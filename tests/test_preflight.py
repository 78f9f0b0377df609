"""`vlmpack plan`: inputs (manifest parquet, OUT dir, .npy, text), table contents, plot, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vlmpack.cli import app
from vlmpack.errors import ConfigError, InputError
from vlmpack.pack.preflight import (
    default_grid,
    format_table,
    load_plan_input,
    plan_table,
    recommend_seq_len,
    sweep_lengths,
)
from vlmpack.packing import lower_bound_l2


def _manifest(path, n: int = 3000, seed: int = 0):
    rng = np.random.Generator(np.random.PCG64(seed))
    kind = rng.integers(0, 3, n).astype(np.int8)
    num_media = np.where(kind > 0, rng.integers(1, 3, n), 0).astype(np.int16)
    media_tokens = (num_media * rng.integers(64, 1200, n)).astype(np.int32)
    num_tokens = (media_tokens + rng.integers(20, 3000, n)).astype(np.int32)
    table = pa.table({
        "id": [f"s{i:05d}" for i in range(n)],
        "num_tokens": num_tokens,
        "media_tokens": media_tokens,
        "num_media": num_media,
        "kind": kind,
        "shard": ["in-0.jsonl"] * n,
        "row": np.arange(n, dtype=np.int64),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return num_tokens.astype(np.int64), media_tokens.astype(np.int64), kind


def _l2_by_definition(lengths: list[int], cap: int) -> int:
    best = math.ceil(sum(lengths) / cap)
    for k in range(0, cap // 2 + 1):
        j1 = [s for s in lengths if s > cap - k]
        j2 = [s for s in lengths if cap - k >= s > cap / 2]
        j3 = [s for s in lengths if cap / 2 >= s >= k]
        extra = max(0, math.ceil((sum(j3) - (len(j2) * cap - sum(j2))) / cap))
        best = max(best, len(j1) + len(j2) + extra)
    return best


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), max_size=40), cap=st.integers(1, 60))
def test_l2_matches_definition(lengths: list[int], cap: int) -> None:
    fit = [s for s in lengths if s <= cap]
    assert lower_bound_l2(np.asarray(lengths, dtype=np.int64), cap) == _l2_by_definition(fit, cap)


def test_plan_from_manifest_and_out_dir(tmp_path) -> None:
    lengths, media_tokens, _ = _manifest(tmp_path / "out" / ".vlmpack" / "manifest.parquet")
    for source in (tmp_path / "out", tmp_path / "out" / ".vlmpack" / "manifest.parquet"):
        data = load_plan_input(source)
        assert data.has_media and np.array_equal(data.lengths, lengths)
        rows, plans = plan_table(data, [2048, 4096], max_media_tokens_per_pack=3000)
        for row, plan, L in zip(rows, plans, (2048, 4096)):
            over = lengths > L
            assert row["overlong"] == int(over.sum())  # media tokens are all <= 3000 here
            assert row["L1"] == -(-int(lengths[~over].sum()) // L)
            assert row["packs"] >= row["L2"] >= row["L1"]
            assert row["samples_per_pack_max"] == int(plan.samples_per_pack().max())
            assert row["media_tokens_per_pack_max"] <= 3000
            assert abs(row["utilization"] - lengths[~over].sum() / (row["packs"] * L)) < 1e-12
    assert "| 2048 |" in format_table(rows)


def test_plan_from_lengths_files(tmp_path) -> None:
    rng = np.random.Generator(np.random.PCG64(1))
    lengths = rng.integers(1, 10_000, 2000)
    np.save(tmp_path / "l.npy", lengths)
    (tmp_path / "l.txt").write_text("\n".join(map(str, lengths)) + "\n")
    a = plan_table(load_plan_input(tmp_path / "l.npy"), [8192])[0][0]
    b = plan_table(load_plan_input(tmp_path / "l.txt"), [8192])[0][0]
    assert a["overlong"] == int((lengths > 8192).sum()) and a["media_tokens_per_pack_p50"] is None
    assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}


def test_bad_inputs(tmp_path) -> None:
    with pytest.raises(InputError):
        load_plan_input(tmp_path / "missing.npy")
    with pytest.raises(InputError):
        load_plan_input(tmp_path)  # a dir without a manifest
    (tmp_path / "bad.txt").write_text("12\nabc\n")
    with pytest.raises(InputError):
        load_plan_input(tmp_path / "bad.txt")


def test_cli_plan_table_json_and_plot(tmp_path) -> None:
    _manifest(tmp_path / "out" / ".vlmpack" / "manifest.parquet", n=500)
    runner = CliRunner()
    png = tmp_path / "plan.png"
    res = runner.invoke(app, ["plan", str(tmp_path / "out"), "--seq-len", "4096", "--seq-len", "8192",
                              "--max-samples-per-pack", "8", "--group-by-kind", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "| 4096 |" in res.output and "| 8192 |" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = runner.invoke(app, ["plan", str(tmp_path / "out"), "-L", "4096", "--json"])
    rows = json.loads(res.output)
    assert rows[0]["seq_len"] == 4096 and rows[0]["samples"] == 500
    res = runner.invoke(app, ["plan", str(tmp_path / "nope")])
    assert res.exit_code == 2


def _lengths_with_tail(path) -> np.ndarray:
    """10,000 lengths: 9,975 in [1, 1000], 20 in [1100, 1500] (overlong at L=1024, fit 1536) and
    5 in [2100, 3000] (overlong up to L=2048, fit 3072), shuffled."""
    rng = np.random.Generator(np.random.PCG64(7))
    lengths = np.concatenate([rng.integers(1, 1001, 9975), rng.integers(1100, 1501, 20), rng.integers(2100, 3001, 5)])
    rng.shuffle(lengths)
    np.save(path, lengths)
    return lengths


@pytest.mark.parametrize(("max_drop", "expected"), [(0.001, 1536), (0.003, 1024), (0.0005, 3072), (0.0, 3072)])
def test_recommended_seq_len_rule(tmp_path, max_drop, expected) -> None:
    lengths = _lengths_with_tail(tmp_path / "l.npy")
    data = load_plan_input(tmp_path / "l.npy")
    seq_lens = sweep_lengths(data, [4096], grid=True)
    assert seq_lens == default_grid(int(lengths.max())) and seq_lens[:5] == [1024, 1536, 2048, 3072, 4096]
    rows, _ = plan_table(data, seq_lens)
    for r in rows:  # what the rule reads, from the data itself
        assert r["overlong"] == int((lengths > r["seq_len"]).sum())
        assert r["overlong_tokens"] == int(lengths[lengths > r["seq_len"]].sum())
    best = recommend_seq_len(rows, max_drop)
    assert best is not None and best["seq_len"] == expected
    assert best["overlong"] < max_drop * lengths.size or best["overlong"] == 0
    assert all(r["overlong"] >= max_drop * lengths.size and r["overlong"] > 0 for r in rows
               if r["seq_len"] < expected)
    assert recommend_seq_len(rows[:1], 0.001) is None  # L=1024 alone drops 0.25 %
    with pytest.raises(ConfigError):
        recommend_seq_len(rows, 1.5)


def test_default_grid_covers_the_longest_sample() -> None:
    assert default_grid() == [1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
                              65536, 98304, 131072]
    for longest in (5, 131072, 131073, 200_000, 1_000_000):
        grid = default_grid(longest)
        assert grid[-1] >= longest and grid == sorted(set(grid)) and grid[-2] < max(longest, 131072)


def test_cli_plan_recommends_and_plots(tmp_path) -> None:
    lengths = _lengths_with_tail(tmp_path / "l.npy")
    png = tmp_path / "sweep.png"
    runner = CliRunner()
    res = runner.invoke(app, ["plan", str(tmp_path / "l.npy"), "-L", "1024", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("recommended L:"))
    assert line.startswith("recommended L: 1536 ") and f"5 of {lengths.size:,}" in line
    assert "| 1024 |" in res.output and "| 1536 |" in res.output  # the user's row, then the recommended one
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    res = runner.invoke(app, ["plan", str(tmp_path / "l.npy"), "-L", "1024", "-L", "2048", "--max-drop", "0.0001"])
    assert res.exit_code == 0 and "recommended L: none of the L planned (up to 2048)" in res.output
    res = runner.invoke(app, ["plan", str(tmp_path / "l.npy"), "-L", "1024", "--sweep", "--max-drop", "0"])
    assert "recommended L: 3072 " in res.output
    res = runner.invoke(app, ["plan", str(tmp_path / "l.npy"), "--max-drop", "-0.1"])
    assert res.exit_code == 2 and "--max-drop" in res.output
