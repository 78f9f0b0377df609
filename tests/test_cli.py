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
