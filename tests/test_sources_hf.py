"""A Hugging Face ``datasets`` ``save_to_disk`` directory as one input.

The demo set saved with ``datasets`` (an ``Image`` feature holding the real image bytes, the
``conversations`` column, two Arrow shards) is given as its directory: it expands to its Arrow
files in the dataset's order and packs like the JSONL route (per id the same ``num_tokens`` and
byte-identical media parts); a ``DatasetDict`` directory expands split by split; a broken
listing is refused with one line.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_sources_parquet import _rows
from test_sources_wds import _pack, _samples, assert_same_samples

from vlmpack.errors import ConfigError
from vlmpack.packfmt import read_packs
from vlmpack.sources.paths import expand_inputs

datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.slow


def _dataset(rows, real_data):
    text = datasets.Value("string")
    feats = datasets.Features({"id": text, "images": datasets.Sequence(datasets.Image(decode=False)),
                               "conversations": [{"from": text, "value": text}]})
    return datasets.Dataset.from_dict({
        "id": [r["id"] for r in rows],
        "images": [[{"bytes": (real_data / p).read_bytes(), "path": p} for p in r["images"]] for r in rows],
        "conversations": [r["conversations"] for r in rows]}, features=feats)


def test_save_to_disk_directory_packs_like_the_jsonl_route(tmp_path, real_data, model_dir):
    rows = _rows(real_data, 500)
    ds = _dataset(rows, real_data)
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    files = expand_inputs([str(tmp_path / "saved")])
    state = json.loads((tmp_path / "saved" / "state.json").read_text())
    assert [f.rsplit("/", 1)[1] for f in files] == [d["filename"] for d in state["_data_files"]] and len(files) == 2
    (tmp_path / "same.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    empty = tmp_path / "no_media"  # every image comes out of the Arrow cells
    empty.mkdir()
    rep_h = _pack([tmp_path / "saved"], tmp_path / "h", model_dir, empty)
    rep_j = _pack([tmp_path / "same.jsonl"], tmp_path / "j", model_dir, real_data)
    got, want = _samples(tmp_path / "h"), _samples(tmp_path / "j")
    assert rep_h["records_read"] == len(rows) and rep_h["rejected"] == rep_j["rejected"]
    assert_same_samples(got, want)
    assert sum(len(v[1]) for v in got.values()) > 200  # images really came from the dataset

    from vlmpack.verify import verify_output

    res = verify_output(tmp_path / "h", workers=1)  # check (Energon: every accepted id once) + recount
    assert res["problems"] == [] and res["samples"] == rep_h["samples_packed"] == len(res["ids"]) == len(got)


def test_dataset_dict_and_broken_listing(tmp_path, real_data):
    rows = _rows(real_data, 60)
    dd = datasets.DatasetDict({"train": _dataset(rows[:40], real_data), "test": _dataset(rows[40:], real_data)})
    dd.save_to_disk(str(tmp_path / "dd"))
    files = expand_inputs([str(tmp_path / "dd")])
    splits = json.loads((tmp_path / "dd" / "dataset_dict.json").read_text())["splits"]
    assert [f.split("/")[-2] for f in files] == splits
    shutil.copytree(tmp_path / "dd" / "train", tmp_path / "broken")
    arrow = next((tmp_path / "broken").glob("*.arrow"))
    arrow.unlink()
    with pytest.raises(ConfigError, match="missing or not in the directory"):
        expand_inputs([str(tmp_path / "broken")])
    (tmp_path / "broken" / "state.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read"):
        expand_inputs([str(tmp_path / "broken")])


def _sources(out):
    """The ``source`` locator of every packed sample of a pack output."""
    return [s["source"] for raw in read_packs(out) for s in json.loads(raw["json"])["samples"]]


def test_locators_name_rows_and_tar_samples(tmp_path, real_data, model_dir):
    """A packed sample's ``source`` (and a rejection) names a table row by row and row group, a tar
    sample by position, offset and key, a JSONL record by line."""
    rows = [{**r, "id": f"pq-{r['id']}"} for r in _rows(real_data, 30)]  # ids apart from the tar's
    rows[3]["conversations"] = []  # rejected: empty_conversation
    ds = _dataset(rows, real_data)
    ds.to_parquet(str(tmp_path / "t.parquet"), batch_size=10)
    shard = sorted((real_data / "wds").glob("*.tar"))[0]
    (tmp_path / "l.jsonl").write_text(json.dumps({**rows[0], "id": "jsonl-0"}) + "\n")
    _pack([tmp_path / "t.parquet", shard, tmp_path / "l.jsonl"], tmp_path / "o", model_dir, real_data)
    by_file = {}
    for src in _sources(tmp_path / "o"):
        by_file.setdefault(src["file"].rsplit("/", 1)[1], []).append(src)
    assert {tuple(sorted(s)) for s in by_file["t.parquet"]} == {("file", "row", "row_group")}
    assert sorted(s["row"] for s in by_file["t.parquet"]) == [i + 1 for i in range(30) if i != 3]
    assert all(s["row_group"] == (s["row"] - 1) // 10 for s in by_file["t.parquet"])
    assert {tuple(sorted(s)) for s in by_file[shard.name]} == {("file", "key", "offset", "sample")}
    assert {tuple(sorted(s)) for s in by_file["l.jsonl"]} == {("file", "line", "offset")}
    rej = [json.loads(x) for x in (tmp_path / "o" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["row_group"], r["reason"]) for r in rej] == [(4, 0, "empty_conversation")]
