"""``OUT/report.html`` and the report.json keys of issue 12 on a real pack of the demo set.

The html must be self-contained (every figure an embedded PNG) and carry the key numbers; the new
report.json keys must add up: per input file records read = packed + rejected + dropped overlong,
the files' sums equal the totals, and the overlong tokens equal the manifest tokens of the samples
that rejects.jsonl lists as overlong.
"""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from vlmpack.config import load_config
from vlmpack.pack.figures import REPORT_FIGURES
from vlmpack.pack.pipeline import run_pack
from vlmpack.records import SAMPLE_KINDS

pytestmark = pytest.mark.slow


class _Page(HTMLParser):
    """Collects the ``<figure id>`` names, the ``<img>`` sources and the visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[str] = []
        self.imgs: list[dict] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag == "figure":
            self.figures.append(a.get("id", ""))
        elif tag == "img":
            self.imgs.append(a)

    def handle_data(self, data) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def packed(tmp_path_factory, real_data: Path, model_dir: Path):
    out = tmp_path_factory.mktemp("report") / "out"
    cfg = load_config(input=[str(real_data / "real_sft.jsonl"), str(real_data / "broken.jsonl")],
                      media_root=str(real_data), model=str(model_dir), output=str(out), seq_len=8192,
                      progress=False, workers=2)
    return cfg, out, run_pack(cfg)


def test_report_html_has_every_figure_and_the_key_numbers(packed) -> None:
    _cfg, out, report = packed
    doc = (out / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(doc)
    page.close()
    assert page.figures == [f"fig-{name}" for name, _caption, _draw in REPORT_FIGURES]
    assert len(page.imgs) == len(REPORT_FIGURES)
    for img in page.imgs:
        head, _, b64 = img["src"].partition(",")
        assert head == "data:image/png;base64" and img["alt"]
        png = base64.b64decode(b64, validate=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a drawn figure, not an empty canvas
    text = " ".join(page.text)
    for key in ("records_read", "samples_packed", "rejected", "dropped_overlong", "tokens", "packs",
                "lower_bound_packs", "overlong_tokens"):
        assert f"{report[key]:,}" in text, key
    assert f"{100 * report['utilization']:.2f} %" in text
    for src in report["sources"]:
        assert src["file"] in text and f"{src['tokens']:,}" in text
    assert "http://" not in doc and "https://" not in doc  # self-contained: nothing fetched


def test_report_json_new_keys_add_up(packed, real_data: Path) -> None:
    cfg, out, report = packed
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["sources"] == report["sources"] and on_disk["overlong_tokens"] == report["overlong_tokens"]
    sources = report["sources"]
    assert [s["file"] for s in sources] == [str(p) for p in cfg.input]
    for s in sources:
        assert s["samples_packed"] + s["rejected"] + s["dropped_overlong"] == s["records_read"], s
    for total, key in (("records_read", "records_read"), ("samples_packed", "samples_packed"),
                       ("rejected", "rejected"), ("dropped_overlong", "dropped_overlong"), ("tokens", "tokens")):
        assert sum(s[key] for s in sources) == report[total], key
    # every broken record is in broken.jsonl, every overlong sample in real_sft.jsonl (the demo set's design)
    broken = sum(1 for line in (real_data / "broken.jsonl").read_bytes().splitlines() if line.strip())
    assert sources[1]["records_read"] == broken and sources[0]["rejected"] == 0
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    manifest = pq.read_table(out / ".vlmpack" / "manifest.parquet")
    tokens = dict(zip(manifest.column("id").to_pylist(), manifest.column("num_tokens").to_pylist()))
    kinds = dict(zip(manifest.column("id").to_pylist(), manifest.column("kind").to_pylist()))
    over = [r["id"] for r in rejects if r["reason"] == "overlong"]
    assert len(over) == report["dropped_overlong"] > 0
    assert report["overlong_tokens"] == sum(tokens[i] for i in over)
    assert all(tokens[i] > cfg.seq_len for i in over)
    by_kind = report["overlong_tokens_by_kind"]
    assert by_kind == {k: sum(tokens[i] for i in over if kinds[i] == code)
                       for code, k in enumerate(SAMPLE_KINDS)}  # text, image, video, audio
    mtp = report["media_tokens_per_pack"]
    assert 0 < mtp["p50"] <= mtp["p99"] <= mtp["max"] <= cfg.seq_len
    assert report["tokens"] + report["overlong_tokens"] == int(np.sum(manifest.column("num_tokens").to_numpy()))


def test_report_figures_when_nothing_or_everything_is_dropped() -> None:
    """A run that packed nothing still gets every figure (a labelled placeholder), without warnings."""
    import warnings

    from vlmpack.pack.figures import ReportData, report_pngs

    z = np.zeros(0, np.int64)
    lengths, kinds, media = np.array([5000, 6000, 7000]), np.array([0, 1, 1]), np.array([0, 4000, 100])
    src = [{"file": "a.jsonl", "records_read": 5, "samples_packed": 0, "rejected": 2, "dropped_overlong": 3,
            "tokens": 0}]
    cases = [ReportData(z, z, z, z, np.zeros(1, np.int64), z, z, 4096),
             ReportData(lengths, kinds, media, np.arange(3), np.zeros(1, np.int64), z, z, 4096,
                        {"overlong": 3, "invalid_json": 2}, src)]
    for d in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pngs = report_pngs(d)
        assert list(pngs) == [name for name, _caption, _draw in REPORT_FIGURES]
        assert all(p[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs.values())


def test_report_figures_fit_their_texts_without_tight_layout() -> None:
    """The report's figures are laid out from their texts' sizes (no second drawing pass): on a
    small run and on a large one (10^6 samples, 20 input files with long names, 10^8 tokens, a long
    reason code) everything drawn (tick labels, axis labels, titles) lies inside the figure with
    at most 0.4 in to spare at the left, bottom and top, and each bar's note lies inside its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from vlmpack.pack import figure_layout, figures
    from vlmpack.pack.figures import ReportData

    rng = np.random.default_rng(1)
    cases = []
    for n, files, reason in ((300, 2, "invalid_json"), (1_000_000, 20, "media_undecodable_with_a_long_reason_code")):
        lengths = rng.lognormal(6.5, 1.2, n).astype(np.int64) + 20
        kinds, L = rng.integers(0, 3, n), 8192
        ok = np.flatnonzero(lengths <= L)
        offsets = np.append(np.arange(0, ok.size, 8), ok.size)
        pack_tokens = np.minimum(np.add.reduceat(lengths[ok], offsets[:-1]), L)
        src = [{"file": f"/data/a/long/folder/shard-{i:05d}-of-00100.parquet", "tokens": int(rng.integers(1, 10**8)),
                "records_read": n, "samples_packed": ok.size, "rejected": 10, "dropped_overlong": n - ok.size}
               for i in range(files)]
        cases.append(ReportData(lengths, kinds, np.where(kinds > 0, lengths // 2, 0), np.flatnonzero(lengths > L),
                                offsets, ok, pack_tokens, L, {"overlong": n - ok.size, reason: 123_456}, src,
                                {"video_tokens": np.where(kinds == 2, lengths // 3, 0)}))
    for d in cases:
        for name, _caption, draw in figures.REPORT_FIGURES:
            fig = Figure(figsize=(7.5, 4.2))
            ax = fig.subplots()
            draw(ax, d)
            renderer = FigureCanvasAgg(fig).get_renderer()
            figure_layout.png_bytes(fig, tight=False)  # lays out and draws
            drawn, page = ax.get_tightbbox(renderer), fig.bbox
            assert page.x0 <= drawn.x0 and drawn.x1 <= page.x1 + 1 and page.y0 <= drawn.y0 and drawn.y1 <= page.y1, name
            spare = [(drawn.x0 - page.x0) / fig.dpi, (drawn.y0 - page.y0) / fig.dpi, (page.y1 - drawn.y1) / fig.dpi]
            assert max(spare) <= 0.4, (name, spare)
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1, (name, text.get_text())


def test_label_tokens_equal_the_collators_labels(packed, model_dir: Path) -> None:
    """report.json's label_tokens (counted with the tokens, from unexpanded ids) equals what the
    collator trains on over every pack of the output."""
    from image_memo import shape_only_pixels

    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator

    cfg, out, report = packed
    collator = PackCollator(model_dir)
    enc = collator.encoder
    with shape_only_pixels():  # labels come from the ids; pixel values play no part (tests/image_memo.py)
        labelled = sum(int((enc.encode(raw).labels != -100).sum()) for raw in read_packs(out))
    assert report["label_tokens"] == labelled > 0
    assert report["label_token_share"] == pytest.approx(labelled / report["tokens"])
    assert 0 < report["label_token_share"] < 1


def test_summary_in_the_users_words() -> None:
    """The summary names stages as the user does, calls a run ``resumed`` only when it took work from
    an unfinished earlier run of its output (``already packed`` when the output was complete; counts
    from the shared cache alone are said so), and ends with
    report.html, rejects.jsonl and the next command."""
    from vlmpack.pack.report import _reuse_rows, _seconds, next_steps

    seconds = _seconds({"measure": 20.3, "plan": 0.3, "write": 1.2, "worker_read_validate": 9.7, "worker_count": 13.5})
    assert "worker_" not in seconds and "read / validate" in seconds and "count" in seconds
    assert "plan 0.3" in seconds and "write 1.2" in seconds
    fresh = {"count_tasks": 4, "count_tasks_reused": 4, "count_tasks_from_cache": 4, "plan_reused": False,
             "shards": 1, "shards_reused": 0}
    assert [label for label, _ in _reuse_rows(fresh)] == ["counts from the cache"]
    again = {"count_tasks": 4, "count_tasks_reused": 4, "count_tasks_from_cache": 0, "plan_reused": True,
             "shards": 2, "shards_reused": 1}
    rows = _reuse_rows(again)
    assert [label for label, _ in rows] == ["resumed"] and "1/2 shards" in rows[0][1]
    done = {**again, "shards_reused": 2}  # a run of a finished output: everything reused
    assert [label for label, _ in _reuse_rows(done)] == ["already packed"]
    assert _reuse_rows({"count_tasks": 4, "count_tasks_reused": 0, "count_tasks_from_cache": 0}) == []
    assert next_steps("/data/out x") == [("report", "/data/out x/report.html"),
                                         ("rejects", "/data/out x/rejects.jsonl"),
                                         ("next", "vlmpack verify '/data/out x'")]


def _figure_spy(monkeypatch) -> list[tuple[str, object, dict[str, bytes]]]:
    """Each draw of the report's figures: (thread name, its ReportData, the PNGs)."""
    import threading

    from vlmpack.pack import figures

    draws: list[tuple[str, object, dict[str, bytes]]] = []
    real = figures.report_pngs

    def spy(d):
        pngs = real(d)
        draws.append((threading.current_thread().name, d, pngs))
        return pngs

    monkeypatch.setattr(figures, "report_pngs", spy)
    return draws


def test_figures_are_drawn_beside_the_write_stage_and_are_the_ones_shown(small_demo, real_data, model_dir, tmp_path,
                                                                          monkeypatch) -> None:
    """The driver draws the figures on a thread while its write workers run; report.html shows those
    PNGs, byte for byte what a draw in the main thread gives; a finished run started again draws none,
    nor does the same data packed into another output of the same cache root (the shared PNG cache),
    unless that cache's file was edited or the cache is off."""
    draws = _figure_spy(monkeypatch)
    cache = tmp_path / "cache"  # a cache root of its own: no PNGs of other tests' runs of these records
    cfg = load_config(input=small_demo, media_root=str(real_data), model=str(model_dir), output=str(tmp_path / "o"),
                      seq_len=8192, progress=False, workers=2, cache_dir=str(cache))
    run_pack(cfg)
    assert [name for name, _, _ in draws] == ["vlmpack-figures"]
    _, data, pngs = draws[0]
    page = _Page()
    page.feed((tmp_path / "o" / "report.html").read_text(encoding="utf-8"))
    shown = [base64.b64decode(i["src"].split(",", 1)[1]) for i in page.imgs]
    assert shown == list(pngs.values()) and len(shown) == len(REPORT_FIGURES)
    from vlmpack.pack.figures import report_pngs

    assert report_pngs(data) == pngs  # the thread draws what the main thread draws
    run_pack(cfg)  # nothing new: the PNGs come from the run directory's cache, no thread
    assert len(draws) == 2  # (report_pngs above went through the spy)

    def shown_in(out: str) -> list[bytes]:
        page = _Page()
        page.feed((tmp_path / out / "report.html").read_text(encoding="utf-8"))
        return [base64.b64decode(i["src"].split(",", 1)[1]) for i in page.imgs]

    run_pack(cfg.model_copy(update={"output": str(tmp_path / "o2")}))  # another output: the shared PNGs
    assert len(draws) == 2 and shown_in("o2") == shown
    [shared] = (cache / "figures").glob("*.json")
    shared.write_bytes(shared.read_bytes().replace(b'"pngs"', b'"PNGs"', 1))  # edited: its seal no longer holds
    run_pack(cfg.model_copy(update={"output": str(tmp_path / "o3")}))
    assert [name for name, _, _ in draws[2:]] == ["vlmpack-figures"] and shown_in("o3") == shown
    run_pack(cfg.model_copy(update={"output": str(tmp_path / "o4"), "cache_dir": "off"}))
    assert len(draws) == 4 and shown_in("o4") == shown
