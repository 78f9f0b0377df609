"""The command line fits users' habits: ``--version``, and every ``pack`` option shows its default
(or that it is required) in ``--help``."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from vlmpack import __version__
from vlmpack.cli import app
from vlmpack.config import PackConfig


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"vlmpack {__version__}"


def test_pack_help_shows_every_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per option
    res = CliRunner().invoke(app, ["pack", "--help"])
    assert res.exit_code == 0
    rows = [x for x in res.output.splitlines() if re.match(r"^\W*--(?!help|config)", x)]
    assert len(rows) >= 28
    missing = [x.split()[1] for x in rows if "(default: " not in x and "(required" not in x]
    assert not missing, f"options without a default in --help: {missing}"
    assert "(default: 8192)" in res.output and "(default: 0.05)" in res.output
    for name, field in PackConfig.model_fields.items():  # required config fields say so
        if field.is_required():
            assert f"--{name}" in res.output and "(required, here or in --config)" in res.output


def test_shard_prefix_flag_names_the_shards(tmp_path, real_data, model_dir):
    """``--shard-prefix`` (until now a YAML key only) names the shards, the report and Energon's split;
    a prefix that is no file-name word is one line, exit 2."""
    import json

    from cli_runner import run_cli

    from vlmpack.energon.load import iter_energon_packs

    src = tmp_path / "in.jsonl"
    src.write_text("".join((real_data / "real_sft.jsonl").read_text().splitlines(keepends=True)[:60]))
    args = ["pack", "--input", src, "--media-root", real_data, "--model", model_dir, "--seq-len", 4096,
            "--no-progress", "--max-packs-per-shard", 1]
    proc = run_cli([*args, "--output", tmp_path / "out", "--shard-prefix", "coco_a"])
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    names = sorted(p.name for p in out.glob("*.tar"))
    assert len(names) >= 2 and names == sorted(report["shard_sha256"])
    assert all(re.fullmatch(r"coco_a-\d{6}\.tar", n) for n in names)
    assert "coco_a-000000.tar" in (out / ".nv-meta" / "split.yaml").read_text()
    assert sum(len(p.samples) for p in iter_energon_packs(out, num_workers=0)) == report["samples_packed"]
    assert run_cli(["check", out]).returncode == 0
    bad = run_cli([*args, "--output", tmp_path / "bad", "--shard-prefix", "a/b"])
    assert bad.returncode == 2 and "shard_prefix" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
