"""``vlmpack export``: the packs as Parquet files that Hugging Face ``datasets`` loads as they are
(issue: ``load_dataset("webdataset", ...)`` cannot read packs with different media members)."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

from vlmpack.errors import InputError
from vlmpack.export import export_parquet
from vlmpack.packfmt import read_packs

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def packed(real_data, model_dir):
    from demo_data.packs import demo_packs

    return demo_packs(real_data, model_dir, seq_len=4096, n_lines=300)


def test_load_dataset_parquet_reads_every_pack_with_its_samples_and_media_bytes(packed, tmp_path):
    res = export_parquet(packed, tmp_path / "hf", num_workers=0)
    report = json.loads((packed / "report.json").read_text())
    assert (res["packs"], res["samples"]) == (report["packs"], report["samples_packed"])
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "hf" / "*.parquet"), split="train",
                               cache_dir=str(tmp_path / "cache"))
    want = {p["__key__"]: p for p in read_packs(packed)}
    assert len(ds) == len(want) == report["packs"]
    images = 0
    for row in ds:
        raw = want.pop(row["key"])
        obj = json.loads(raw["json"])
        assert json.loads(row["samples"]) == obj["samples"]
        assert (row["num_tokens"], row["seq_len"]) == (obj["num_tokens"], obj["seq_len"]) and row["num_tokens"] <= 4096
        parts = [m["part"] for s in obj["samples"] for m in s["media"]]
        assert row["media_parts"] == parts and row["media"] == [raw[p] for p in parts]
        images += len(parts)
    assert not want and images > 20


def test_an_output_check_refuses_is_not_exported(packed, tmp_path):
    """Exit 2 with one line; ``--no-check`` exports what the shards hold."""
    import shutil

    out = tmp_path / "o"
    shutil.copytree(packed, out, symlinks=True)
    report = out / "report.json"
    report.write_text(report.read_text().replace('"samples_packed": ', '"samples_packed": 1'))
    with pytest.raises(InputError, match="does not pass vlmpack check"):
        export_parquet(out, tmp_path / "hf", num_workers=0)
    assert not (tmp_path / "hf").exists()
    proc = run_cli(["export", out, tmp_path / "hf"])
    assert proc.returncode == 2 and "does not pass vlmpack check" in proc.stderr and not (tmp_path / "hf").exists()
    proc = run_cli(["export", out, tmp_path / "hf", "--no-check"])  # the shards themselves are intact
    assert proc.returncode == 0 and "into 1 Parquet files" in proc.stdout, proc.stderr
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["shard-000000.parquet"]
