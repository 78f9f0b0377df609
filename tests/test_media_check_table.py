"""The media check table (vlmpack.media.check_table): each accepted media content is checked once
across runs, count keys and datasets, with the same decisions as checking everything.

Real data: the first 600 records of the demo set (two count tasks; real PNG/JPEG images) plus the
broken records (images truncated, empty, not images: rejected), the real Qwen tokenizer. That an
image was not checked again is proven by a spy on the decode check
(``vlmpack.media.kinds.image.check_decodes``, called in process with ``workers=1``), never by a timing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from pathlib import Path

from vlmpack.config import load_config
from vlmpack.media import probe
from vlmpack.media.check_table import TABLE_NAME, CheckTable, rules
from vlmpack.media.kinds import image as image_kind
from vlmpack.media.kinds.spec import MediaInfo
from vlmpack.pack.pipeline import run_pack


def _spy(monkeypatch) -> list[str]:
    """Names of the image files whose bytes the decode check reads (a fresh probe of this process each run)."""
    seen: list[str] = []
    real = image_kind.check_decodes

    def spy(im, *args, **kwargs):
        seen.append(str(getattr(im, "filename", "") or "<bytes>"))
        return real(im, *args, **kwargs)

    monkeypatch.setattr(image_kind, "check_decodes", spy)
    return seen


def _run(inputs, real_data, model_dir, out: Path, cache: str, seen: list[str], **kw) -> tuple[dict, dict, int]:
    """One pack run (in process) after the process's own probe cache is cleared; returns report.json,
    {file: sha256} of the shards, and the number of decode checks it made."""
    probe.clear_cache()
    before = len(seen)
    report = run_pack(load_config(input=inputs, media_root=str(real_data), model=str(model_dir), output=str(out),
                                  progress=False, workers=1, cache_dir=cache, seq_len=8192, **kw))
    shards = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}
    return report, shards, len(seen) - before


def _rejects(out: Path) -> list[tuple]:
    return [(r["file"], r["line"], r["reason"]) for x in (out / "rejects.jsonl").read_text().splitlines()
            if (r := json.loads(x))]


def test_each_accepted_image_is_checked_once_across_runs_with_the_same_decisions(
        small_demo, real_data, model_dir, tmp_path, monkeypatch):
    seen = _spy(monkeypatch)
    cache = tmp_path / "cache"
    _, _, checked = _run(small_demo, real_data, model_dir, tmp_path / "a", str(cache), seen)
    assert checked > 250 and (cache / TABLE_NAME).is_file()
    with sqlite3.connect(cache / TABLE_NAME) as db:
        rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT sha256) FROM checks").fetchone()
    # one row per distinct accepted image content; the rejected ones (broken.jsonl) are not kept
    assert rows[0] == rows[1] and 0 < rows[0] <= checked

    # another count key (another --special-tokens: nothing of the count cache applies) and another
    # output: only the images that were rejected are checked again
    again, again_shards, rechecked = _run(small_demo, real_data, model_dir, tmp_path / "b", str(cache), seen,
                                          special_tokens="split")
    assert again["reused"]["count_tasks_from_cache"] == 0
    assert rechecked == checked - rows[0], (rechecked, checked, rows[0])
    # the same decisions and bytes as a run that checks everything (no cache at all)
    cold, cold_shards, cold_checked = _run(small_demo, real_data, model_dir, tmp_path / "c", "off", seen,
                                           special_tokens="split")
    assert cold_checked >= checked  # without the table, a content at two paths is checked at each
    assert again_shards == cold_shards and _rejects(tmp_path / "b") == _rejects(tmp_path / "c")
    assert {k: again[k] for k in ("samples_packed", "rejected", "rejected_by_reason", "packs")} == \
        {k: cold[k] for k in ("samples_packed", "rejected", "rejected_by_reason", "packs")}
    assert any(r[2] == "media_undecodable" for r in _rejects(tmp_path / "b"))  # broken images still rejected


def test_an_edited_or_damaged_table_is_not_trusted(small_demo, real_data, model_dir, tmp_path, monkeypatch, caplog):
    seen = _spy(monkeypatch)
    cache = tmp_path / "cache"
    _, shards, checked = _run(small_demo, real_data, model_dir, tmp_path / "a", str(cache), seen)
    # rows edited to say something that is not a media check: read as a miss, every image checked again
    with sqlite3.connect(cache / TABLE_NAME) as db:
        db.execute("UPDATE checks SET info = ?", (json.dumps({"width": 1, "height": "x"}),))
    _, edited_shards, rechecked = _run(small_demo, real_data, model_dir, tmp_path / "b", str(cache), seen,
                                       max_media_bytes=100_000_000)  # another count key, the same output
    assert rechecked == checked and edited_shards == shards
    # a table file that is not SQLite: one warning, every image checked, the run goes on
    for p in cache.glob(TABLE_NAME + "*"):
        p.unlink()
    (cache / TABLE_NAME).write_bytes(b"not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="vlmpack.media.check_table"):
        _, damaged_shards, damaged_checked = _run(small_demo, real_data, model_dir, tmp_path / "c", str(cache), seen,
                                                  max_media_bytes=200_000_000)  # another count key again
    assert damaged_checked == checked and damaged_shards == shards
    assert any("media check table" in r.getMessage() for r in caplog.records)


def test_rows_are_keyed_by_content_kind_level_and_rules(tmp_path):
    table = CheckTable(tmp_path / TABLE_NAME)
    info = MediaInfo(640, 480, "PNG", 1234)
    table.put("ab" * 32, "image", "verify", info)
    table.flush()
    assert table.get("ab" * 32, "image", "verify") == info
    assert table.get("ab" * 32, "image", "decode") is None  # another check level is checked itself
    assert table.get("ab" * 32, "video", "verify") is None
    assert table.get("cd" * 32, "image", "verify") is None
    with sqlite3.connect(tmp_path / TABLE_NAME) as db:  # a row of other rules (another Pillow, say)
        db.execute("UPDATE checks SET rules = ?", (rules() + " other",))
    assert table.get("ab" * 32, "image", "verify") is None
    assert "Pillow" in rules() and "bomb" in rules()
    # a video's numbers come back as the probe gave them (30 and 30.0 are written apart in a pack's JSON)
    video = MediaInfo(320, 240, "mp4", 99, duration_s=2.0, fps=30, frames=60)
    table.put("ef" * 32, "video", "verify", video)
    table.close()
    again = CheckTable(tmp_path / TABLE_NAME).get("ef" * 32, "video", "verify")
    assert again == video and type(again.fps) is int and type(again.duration_s) is float


def test_the_table_is_in_wal_mode_before_the_count_workers_start(small_demo, real_data, model_dir, tmp_path,
                                                                  monkeypatch):
    """Two pool workers switching a new table file to write-ahead-log mode at once can be answered
    "database is locked" at once (one of them then checks every image itself): the count stage
    makes the file first, so the workers find it in WAL mode (a switch that takes no lock)."""
    from vlmpack.pack import count_stage

    cache = tmp_path / "cache"
    modes: list[str | None] = []
    real = count_stage.guarded_executor

    def spy(*args, **kwargs):
        path = cache / TABLE_NAME
        if not path.is_file():
            modes.append(None)
        else:
            with sqlite3.connect(path) as db:
                modes.append(db.execute("PRAGMA journal_mode").fetchone()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(count_stage, "guarded_executor", spy)
    seen = _spy(monkeypatch)
    _run(small_demo[:1], real_data, model_dir, tmp_path / "a", str(cache), seen)
    assert modes == ["wal"]
