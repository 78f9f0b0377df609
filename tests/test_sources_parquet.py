"""Parquet / Arrow tables as input, media read in place from their cells.

The demo set converted to Parquet (the HF ``datasets`` ``Image`` struct ``{"bytes", "path"}`` in a
list column ``images`` + the ``conversations`` column, several row groups) packs like the JSONL
route: per id the same ``num_tokens`` and byte-identical media parts; Energon loads the output
and ``check`` passes; 1 vs 2 workers give identical bytes and a CLI run SIGKILLed mid-write resumes
to them; broken inputs (cut file, corrupt page, bytes that do not decode, missing file) are refused
with one line or rejected with a reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_sources_wds import _pack, _samples, assert_same_samples, shard_hashes

from vlmpack.config import load_config
from vlmpack.errors import InputError
from vlmpack.media.ref import parse_ref, read_ref
from vlmpack.pack.pipeline import run_pack
from vlmpack.sources import detect_format
from vlmpack.sources.parquet import ParquetSource

pytestmark = pytest.mark.slow
N_ROWS = 600
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _rows(real_data: Path, n: int = N_ROWS) -> list[dict]:
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(x) for x in lines]


def _table(rows: list[dict], real_data: Path, embed: bool = True) -> pa.Table:
    images = [[{"bytes": (real_data / p).read_bytes() if embed else None, "path": p} for p in r["images"]]
              for r in rows]
    return pa.table({
        "id": pa.array([r["id"] for r in rows], pa.string()),
        "images": pa.array(images, pa.list_(IMAGE)),
        "conversations": pa.array([r["conversations"] for r in rows]),
    })


@pytest.fixture(scope="module")
def both(tmp_path_factory, real_data, model_dir):
    tmp = tmp_path_factory.mktemp("parquet")
    rows = _rows(real_data)
    pq.write_table(_table(rows, real_data), tmp / "set.parquet", row_group_size=200)
    assert detect_format(str(tmp / "set.parquet")) == "parquet"
    assert pq.ParquetFile(tmp / "set.parquet").metadata.num_row_groups == 3
    (tmp / "same.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    empty = tmp / "no_media"  # the table's images never come from the media root
    empty.mkdir()
    rep_p = _pack([tmp / "set.parquet"], tmp / "p", model_dir, empty)
    rep_j = _pack([tmp / "same.jsonl"], tmp / "j", model_dir, real_data)
    return tmp, rep_p, rep_j


def test_parquet_packs_like_the_jsonl_route(both):
    tmp, rep_p, rep_j = both
    p, j = _samples(tmp / "p"), _samples(tmp / "j")
    assert rep_p["rejected"] == rep_j["rejected"] and rep_p["identity_holds"]
    assert len(p) == rep_p["samples_packed"] > 500
    assert_same_samples(p, j)
    assert sum(len(v[1]) for v in p.values()) > 300  # images really came out of the table


def test_energon_loads_every_id_once_and_check_passes(both):
    from vlmpack.check import check_output

    tmp, rep_p, _ = both
    res = check_output(tmp / "p", num_workers=2)
    assert res["problems"] == [] and res["samples"] == rep_p["samples_packed"] == len(res["ids"])


def test_one_or_two_workers_give_the_same_bytes(both, model_dir):
    tmp, _, _ = both
    _pack([tmp / "set.parquet"], tmp / "p1", model_dir, tmp / "no_media", workers=1)
    assert shard_hashes(tmp / "p1") == shard_hashes(tmp / "p")


def test_split_covers_every_row_once_and_refs_read_the_cell(both, real_data):
    tmp, _, _ = both
    path = str(tmp / "set.parquet")
    whole = list(ParquetSource.read(path, 0, -1, 1))
    tasks = ParquetSource.split(path, 1)
    assert len(tasks) == 3 and tasks[0] == (0, 1, 1) and tasks[1][2] == 201
    parts = [s for t in tasks for s in ParquetSource.read(path, *t)]
    assert [(s.id, s.locator) for s in parts] == [(s.id, s.locator) for s in whole]
    assert [s.locator.line for s in whole] == list(range(1, N_ROWS + 1))
    rows = {r["id"]: r for r in _rows(real_data)}
    with_media = [s for s in whole if s.media]
    for s in with_media[::50]:
        for m, name in zip(s.media, rows[s.id]["images"], strict=True):
            assert parse_ref(m.path).file == path and read_ref(m.path) == (real_data / name).read_bytes()


def test_arrow_ipc_file_and_stream_read_like_parquet(tmp_path, real_data):
    table = _table(_rows(real_data, 120), real_data)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=50)
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        for b in table.to_batches(max_chunksize=50):
            w.write_batch(b)
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for b in table.to_batches(max_chunksize=50):
            w.write_batch(b)

    def media(name: str) -> list:
        path = str(tmp_path / name)
        assert detect_format(path) == "parquet"
        return [(s.id, s.locator.line, [read_ref(m.path) for m in s.media]) for s in ParquetSource.read(path, 0, -1, 1)]

    assert media("t.arrow") == media("t.parquet") == media("s.arrow")


def test_broken_inputs(tmp_path, real_data, model_dir):
    rows = _rows(real_data, 60)
    pq.write_table(_table(rows, real_data), tmp_path / "ok.parquet", row_group_size=20)
    data = (tmp_path / "ok.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated") as e:
        load_config(input=[str(tmp_path / "cut.parquet")], model=str(model_dir), output=str(tmp_path / "o"))
    assert "\n" not in str(e.value)
    # bytes that do not decode, and a path-only image whose file is missing: rejected with a reason
    t = _table(rows, real_data)
    imgs = t.column("images").to_pylist()
    with_img = [i for i, x in enumerate(imgs) if x]
    bad, gone = with_img[0], with_img[1]
    imgs[bad][0]["bytes"] = b"\x89PNG\r\n\x1a\n not an image"
    imgs[gone][0] = {"bytes": None, "path": "images/no/such/file.png"}
    t = t.set_column(1, "images", pa.array(imgs, pa.list_(IMAGE)))
    pq.write_table(t, tmp_path / "edited.parquet", row_group_size=20)
    cfg = load_config(input=[str(tmp_path / "edited.parquet")], model=str(model_dir), output=str(tmp_path / "e"),
                      media_root=str(real_data), seq_len=8192, workers=1, progress=False, max_reject_fraction=1)
    report = run_pack(cfg)
    rejects = {json.loads(x)["id"]: json.loads(x)["reason"]
               for x in (tmp_path / "e" / "rejects.jsonl").read_text().splitlines()}
    assert rejects == {rows[bad]["id"]: "media_undecodable", rows[gone]["id"]: "media_missing"}
    assert report["identity_holds"] and report["samples_packed"] == report["records_read"] - 2
    # a path-only image that exists is read from the media root
    ok = [s for s in ParquetSource.read(str(tmp_path / "edited.parquet"), 0, -1, 1, media_root=str(real_data))
          if s.id == rows[gone]["id"]]
    assert ok[0].media[0].path == str(real_data / "images/no/such/file.png")


def test_hf_datasets_files_read_in_place(tmp_path, real_data):
    """What ``datasets`` writes: ``to_parquet`` and the Arrow stream files of ``save_to_disk``,
    with the ``Image`` feature (its ``{"bytes", "path"}`` struct)."""
    datasets = pytest.importorskip("datasets")
    rows = [r for r in _rows(real_data, 200) if r["images"]][:40]
    text = datasets.Value("string")
    feats = datasets.Features({"id": text, "images": datasets.Sequence(datasets.Image()),
                               "conversations": [{"from": text, "value": text}]})
    ds = datasets.Dataset.from_dict({"id": [r["id"] for r in rows],
                                     "images": [[str(real_data / p) for p in r["images"]] for r in rows],
                                     "conversations": [r["conversations"] for r in rows]}, features=feats)
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image(decode=False)))
    ds = ds.map(lambda r: {"images": [{"bytes": Path(x["path"]).read_bytes(), "path": x["path"]}
                                      for x in r["images"]]}, features=feats)
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    want = [(r["id"], [(real_data / p).read_bytes() for p in r["images"]]) for r in rows]
    arrows = sorted((tmp_path / "saved").glob("*.arrow"))
    assert arrows
    for path in [tmp_path / "hf.parquet", *arrows]:
        assert detect_format(str(path)) == "parquet"
        got = [(s.id, [read_ref(m.path) for m in s.media]) for s in ParquetSource.read(str(path), 0, -1, 1)]
        assert got == want


def assert_killed_run_resumes_to_the_same_bytes(args: list, tmp: Path) -> None:
    """``vlmpack ARGS`` into ``tmp/kref`` uninterrupted, and into ``tmp/killed`` SIGKILLed mid-write
    then run again: the same shard bytes, the shards done before the kill kept (same mtime), and a
    rerun on the finished output changes nothing."""
    from hostile_corpus import kill_mid_write, run_cli

    ref = run_cli([*args, "--output", tmp / "kref"])
    assert ref.returncode == 0, ref.stderr
    want = shard_hashes(tmp / "kref")
    assert len(want) > 4  # many shards: the kill below lands between the first and the last
    done = kill_mid_write(args, tmp / "killed")
    again = run_cli([*args, "--output", tmp / "killed"])
    assert again.returncode == 0, again.stderr
    assert shard_hashes(tmp / "killed") == want
    assert {n: (tmp / "killed" / n).stat().st_mtime_ns for n in done} == done  # resumed: done shards kept
    once_more = run_cli([*args, "--output", tmp / "killed"])
    assert once_more.returncode == 0, once_more.stderr
    assert shard_hashes(tmp / "killed") == want


def test_killed_parquet_run_resumes_to_the_same_bytes(both, model_dir):
    """A CLI run on the Parquet input SIGKILLed mid-write and run again gives the bytes of an
    uninterrupted run (a rerun is byte-identical); a rerun on the finished output changes nothing."""
    tmp, _, _ = both
    args = ["pack", "--input", tmp / "set.parquet", "--model", model_dir, "--media-root", tmp / "no_media",
            "--seq-len", 4096, "--max-packs-per-shard", 2, "--pretokenize", "--workers", 1, "--no-progress"]
    assert_killed_run_resumes_to_the_same_bytes(args, tmp)


def test_corrupt_parquet_page(tmp_path, real_data, model_dir):
    """A footer that reads but a page that does not: a broken page header is refused with one line
    naming the row group (exit 2, no traceback); image bytes flipped inside a page (a snappy
    literal, so the page still decompresses) reject that row as ``media_undecodable`` and nothing
    else is lost: records_read == samples_packed + rejected."""
    from hostile_corpus import one_error_line, run_cli

    rows = _rows(real_data, 60)
    pq.write_table(_table(rows, real_data), tmp_path / "ok.parquet", row_group_size=20)
    data = (tmp_path / "ok.parquet").read_bytes()
    meta = pq.ParquetFile(tmp_path / "ok.parquet").metadata
    names = [meta.row_group(1).column(c).path_in_schema for c in range(meta.num_columns)]
    text = meta.row_group(1).column(names.index("conversations.list.element.value"))
    assert text.compression == "SNAPPY"

    def pack(name: str, flip: int, n: int):
        (tmp_path / name).write_bytes(data[:flip] + bytes(b ^ 0xA5 for b in data[flip:flip + n]) + data[flip + n:])
        return run_cli(["pack", "--input", tmp_path / name, "--model", model_dir, "--output", tmp_path / f"o_{name}",
                        "--media-root", tmp_path, "--seq-len", 8192, "--workers", 1, "--no-progress",
                        "--max-reject-fraction", 1])

    res = pack("header.parquet", text.dictionary_page_offset or text.data_page_offset, 8)
    assert res.returncode == 2
    line = one_error_line(res.stderr)
    assert "header.parquet" in line and "row group 1 cannot be read" in line and "corrupt" in line
    assert not (tmp_path / "o_header.parquet" / "report.json").exists()
    # the middle of one image of row group 1, stored verbatim (a literal) in the compressed page
    victim = next(r for r in rows[20:40] if r["images"] and len((real_data / r["images"][0]).read_bytes()) > 4096)
    img = (real_data / victim["images"][0]).read_bytes()
    at = data.find(img[len(img) // 2: len(img) // 2 + 64])
    assert at > 0 and data.find(img[len(img) // 2: len(img) // 2 + 64], at + 1) < 0
    res = pack("pixels.parquet", at, 16)
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "o_pixels.parquet" / "report.json").read_text())
    rejects = {json.loads(x)["id"]: json.loads(x)["reason"]
               for x in (tmp_path / "o_pixels.parquet" / "rejects.jsonl").read_text().splitlines()}
    assert rejects == {victim["id"]: "media_undecodable"}
    assert report["identity_holds"] and report["records_read"] == report["samples_packed"] + report["rejected"] == 60


def test_cell_cache_stays_bounded(both, real_data, monkeypatch):
    """Reading cells in an order that jumps between row groups keeps the per-process column cache
    under its byte bound (here: one group's image column) and every cell still reads its own bytes."""
    from vlmpack.media import tables as parquet

    tmp, _, _ = both
    path = str(tmp / "set.parquet")
    tab = parquet.Table(path)
    cap = max(tab.group(g, ["images"]).column(0).nbytes for g in range(len(tab.rows)))
    monkeypatch.setattr(parquet, "_CELLS", parquet.OrderedDict())
    monkeypatch.setattr(parquet, "_CACHE_BYTES", cap)
    rows = {r["id"]: r for r in _rows(real_data)}
    samples = [s for s in ParquetSource.read(path, 0, -1, 1) if s.media]
    seen = set()
    for s in sorted(samples, key=lambda s: s.locator.line * 7919 % N_ROWS):  # a permutation across the groups
        for m, name in zip(s.media, rows[s.id]["images"], strict=True):
            assert read_ref(m.path) == (real_data / name).read_bytes()
            assert len(parquet._CELLS) == 1 and sum(v[1] for v in parquet._CELLS.values()) <= cap
            seen.add(parse_ref(m.path).group)
    assert len(samples) > 200 and seen == set(range(len(tab.rows)))


def test_row_values_are_those_of_the_former_dump_and_parse():
    """A row reaches the record checks as plain JSON values built directly, equal to what the former
    ``json.dumps(row, default=_json_default)`` + ``json.loads`` gave (bytes -> base64 text, dates /
    decimals / times -> ``str``, map entries -> lists, non-string dict keys -> strings)."""
    import datetime
    import decimal

    from vlmpack.sources.parquet import _json_default, _plain

    row = {
        "id": 3, "f": 1.5, "nan": float("nan"), "big": 2**70, "t": True, "n": None, "s": "é\U0001f600",
        "b": b"\x00\xff", "ba": bytearray(b"ab"), "d": datetime.date(2024, 1, 2),
        "dt": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc), "dec": decimal.Decimal("1.10"),
        "td": datetime.timedelta(seconds=3), "map": [("k", 1), ("j", [b"x"])],
        "nested": {"a": [{"b": datetime.time(1, 2)}], "c": {1: "int key", None: "none key"}},
        "conversations": [{"from": "human", "value": "x"}],
    }
    want = json.loads(json.dumps(row, ensure_ascii=True, default=_json_default))
    got = _plain(row)
    assert json.dumps(got, sort_keys=False) == json.dumps(want, sort_keys=False)
    assert list(got) == list(want) and got["nan"] != got["nan"]
