"""The media pre-check (vlmpack.pack.media_precheck): while the driver loads the model, a forked
process probes the count tasks' media into the media check table; the workers then find those items
there. It changes no verdict and no output byte.

Real data: the first 600 records of the demo set plus its broken records (truncated, empty and
non-image files: rejected), the real Qwen tokenizer. What the pre-check did is read from the table it
wrote and from the probes it made, never from a timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import sqlite3
import threading
from pathlib import Path

from vlmpack.config import load_config
from vlmpack.media import probe
from vlmpack.media.check_table import TABLE_NAME, close_tables
from vlmpack.pack import count_stage, media_precheck
from vlmpack.pack.nodes import node_ranges
from vlmpack.pack.pipeline import run_pack
from vlmpack.pack.stages import CountOptions, Workers, task_bytes


def _tasks(inputs, real_data, model_dir, cache: Path, store: Path):
    cfg = load_config(input=inputs, media_root=str(real_data), model=str(model_dir), output=str(store / "out"),
                      progress=False, workers=2, cache_dir=str(cache), seq_len=8192)
    ranges, _ = node_ranges(cfg, task_bytes(cfg))
    return count_stage._tasks(CountOptions.of(cfg), store, ranges, cache)


def _rows(cache: Path) -> set[str]:
    with sqlite3.connect(cache / TABLE_NAME) as db:
        return {r[0] for r in db.execute("SELECT sha256 FROM checks")}


def test_the_precheck_keeps_what_the_workers_accept_and_never_raises(small_demo, real_data, model_dir, tmp_path):
    cache = tmp_path / "cache"
    tasks = _tasks(small_demo, real_data, model_dir, cache, tmp_path)
    assert len(tasks) >= 2 and tasks[0].check_table == str(cache)
    probe.clear_cache()
    close_tables()
    try:
        probed = media_precheck.precheck_tasks(tasks)
    finally:
        close_tables()
    kept = _rows(cache)
    # the records' media were probed (the broken ones too, without an exception; each reference counts,
    # rejected ones keep no row, two paths of the same bytes share one) ...
    assert probed > 250 and 200 < len(kept) < probed

    # ... and the table holds exactly what a count that checks everything itself (no pre-check) keeps
    probe.clear_cache()
    alone = tmp_path / "alone"
    run_pack(load_config(input=small_demo, media_root=str(real_data), model=str(model_dir),
                         output=str(tmp_path / "out"), progress=False, workers=1, cache_dir=str(alone), seq_len=8192))
    assert kept == _rows(alone)


def test_a_stopped_precheck_probes_nothing_more(small_demo, real_data, model_dir, tmp_path):
    cache = tmp_path / "cache"
    tasks = _tasks(small_demo, real_data, model_dir, cache, tmp_path)
    stop = threading.Event()
    stop.set()
    probe.clear_cache()
    try:
        assert media_precheck.precheck_tasks(tasks, stop) == 0
    finally:
        close_tables()
    assert _rows(cache) == set()
    assert media_precheck.precheck_tasks([]) == 0  # nothing to do: no table opened


def _pack(inputs, real_data, model_dir, out: Path, cache: Path) -> tuple[dict, dict]:
    probe.clear_cache()
    report = run_pack(load_config(input=inputs, media_root=str(real_data), model=str(model_dir), output=str(out),
                                  progress=False, workers=2, cache_dir=str(cache), seq_len=8192))
    return report, {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}


def test_a_run_prechecks_while_the_model_loads_and_packs_the_same_bytes(small_demo, real_data, model_dir, tmp_path,
                                                                      monkeypatch, caplog):
    """A pool's first count in a process: the pre-check is forked before the model load (made slow
    here, as a load without its recipe is) and stopped once the workers exist; the workers take what
    it kept. Shards, rejections and the report's figures equal a run without it."""
    from vlmpack.pack import executors

    started: list[bool] = []
    real_precheck = media_precheck.Precheck

    def spy(tasks):
        started.append(tasks is not None)
        return real_precheck(tasks)

    slow_load = executors.load_model

    def load(*args, **kwargs):
        threading.Event().wait(1.5)
        return slow_load(*args, **kwargs)

    monkeypatch.setattr(media_precheck, "Precheck", spy)
    monkeypatch.setattr(executors, "load_model", load)
    monkeypatch.setattr(media_precheck, "loaded_before", lambda *a: False)
    caplog.set_level(logging.INFO, logger="vlmpack.pack.media_precheck")
    with_pre, with_shards = _pack(small_demo, real_data, model_dir, tmp_path / "a", tmp_path / "c1")
    assert started == [True]
    said = [r.getMessage() for r in caplog.records if "pre-check" in r.getMessage()]
    assert len(said) == 1 and int(said[0].split()[2]) > 0, said
    assert _rows(tmp_path / "c1")

    # the model loaded before in this process: no pre-check (the pool starts at once)
    monkeypatch.setattr(media_precheck, "loaded_before", lambda *a: True)
    without, without_shards = _pack(small_demo, real_data, model_dir, tmp_path / "b", tmp_path / "c2")
    assert started == [True, False]
    assert with_shards == without_shards and with_shards
    assert (tmp_path / "a" / "rejects.jsonl").read_bytes() == (tmp_path / "b" / "rejects.jsonl").read_bytes()
    keys = ("samples_packed", "rejected", "rejected_by_reason", "packs", "tokens")
    assert {k: with_pre.get(k) for k in keys} == {k: without.get(k) for k in keys}
    assert _rows(tmp_path / "c1") == _rows(tmp_path / "c2")


def test_no_precheck_without_a_pool_or_a_table(small_demo, real_data, model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(media_precheck, "loaded_before", lambda *a: False)
    tasks = _tasks(small_demo, real_data, model_dir, tmp_path / "cache", tmp_path)
    for workers, ok in ((Workers(2), True), (Workers(1), False), (Workers(4, "ray"), False)):
        with media_precheck.media_precheck(tasks, workers, str(model_dir)) as pre:
            assert (pre._proc is not None) == ok
        assert pre._proc is None  # reaped on leaving
    no_table = [dataclasses.replace(t, check_table="") for t in tasks]
    with media_precheck.media_precheck(no_table, Workers(2), str(model_dir)) as pre:
        assert pre._proc is None


def _in_a_daemon(tasks, model_dir) -> bool:
    with media_precheck.media_precheck(tasks, Workers(2), model_dir) as pre:
        return pre._proc is None


def test_a_daemonic_process_counts_without_a_precheck(small_demo, real_data, model_dir, tmp_path, monkeypatch):
    """multiprocessing forbids a daemonic process children: there the count goes on without one."""
    import multiprocessing

    monkeypatch.setattr(media_precheck, "loaded_before", lambda *a: False)
    tasks = _tasks(small_demo, real_data, model_dir, tmp_path / "cache", tmp_path)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # a Pool's workers are daemonic
        assert pool.apply(_in_a_daemon, (tasks, str(model_dir))) is True


def test_text_only_records_end_the_precheck_early(real_data, model_dir, tmp_path, monkeypatch):
    """Records without media give the workers nothing to take: after DRY_RECORDS of them in a row
    the pre-check stops reading (it read the whole input before, for nothing)."""
    import json

    lines = [x for x in (real_data / "real_sft.jsonl").read_text().splitlines() if not json.loads(x).get("images")]
    assert len(lines) > 2 * media_precheck.DRY_RECORDS
    (tmp_path / "text.jsonl").write_text("\n".join(lines) + "\n")
    tasks = _tasks([str(tmp_path / "text.jsonl")], real_data, model_dir, tmp_path / "cache", tmp_path)
    read: list[int] = []
    real = media_precheck.read_records

    def spy(task, stats):
        for rec in real(task, stats):
            read.append(task.index)
            yield rec

    monkeypatch.setattr(media_precheck, "read_records", spy)
    try:
        assert media_precheck.precheck_tasks(tasks) == 0
    finally:
        close_tables()
    assert len(read) == media_precheck.DRY_RECORDS and read[0] == tasks[-1].index  # the last task first
