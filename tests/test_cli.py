"""The command line fits users' habits: ``--version``, and every ``pack`` option shows its default
(or that it is required) in ``--help``."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from vlmpack import __version__
from vlmpack.cli import app
from vlmpack.config import PackConfig


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"vlmpack {__version__}"


def _option_entries(text: str) -> dict[str, tuple[str, str]]:
    """``--name`` -> (its declaration, its description) of each option of a ``--help`` text, the
    description's wrapped lines joined."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            current = re.search(r"--[\w-]+", line).group(0)
            entries[current] = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        elif current is not None and re.match(r"^ {3,}\S", line):
            entries[current].append(line.strip())
        else:
            current = None
    return {k: (v[0], " ".join(v[1:])) for k, v in entries.items()}


def test_pack_help_shows_every_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["pack", "--help"])
    assert res.exit_code == 0
    rows = {k: d for k, (_, d) in _option_entries(res.output).items() if k not in ("--help", "--config")}
    assert len(rows) >= 28
    missing = [k for k, d in rows.items() if "(default: " not in d and "(required" not in d]
    assert not missing, f"options without a default in --help: {missing}"
    assert "(default: 8192)" in rows["--seq-len"] and "(default: 0.05)" in rows["--max-reject-fraction"]
    for name, field in PackConfig.model_fields.items():  # required config fields say so
        if field.is_required():
            assert "(required, here or in --config)" in rows[f"--{name}"]


COMMANDS = ["pack", "plan", "check", "verify", "inspect", "metadataset", "export"]


def _choice_options() -> dict[str, list[str]]:
    """Every option whose value is one of a fixed set -> that set."""
    from typing import Literal, get_args, get_origin

    from vlmpack.energon.metadataset import WEIGHTS
    from vlmpack.packing import ALGORITHMS
    from vlmpack.sinks import SINKS

    out = {"--algorithm": list(ALGORITHMS), "--layout": list(SINKS), "--weight": list(WEIGHTS)}
    for name, field in PackConfig.model_fields.items():
        if get_origin(field.annotation) is Literal:
            out["--" + (field.alias or name).replace("_", "-")] = [str(c) for c in get_args(field.annotation)]
    return out


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_reads_at_80_columns(monkeypatch, command):
    """``COLUMNS=80 vlmpack [CMD] --help``: no option name cut, no internal sentinel, defaults one way
    (``(default: X)``), every option described, the choices of a choice option listed, arguments
    upper case in the usage line."""
    monkeypatch.setenv("COLUMNS", "80")
    res = CliRunner().invoke(app, [command, "--help"] if command else ["--help"])
    assert res.exit_code == 0, res.output
    text = res.output
    assert "…" not in text and "PydanticUndefined" not in text and "[default:" not in text
    assert max(len(x) for x in text.splitlines()) <= 80
    usage = text.splitlines()[0]
    assert not re.search(r"[{<]", usage) and usage == usage.replace(" output", " OUTPUT"), usage
    entries = _option_entries(text)
    assert "--help" in entries
    undescribed = [k for k, (_, d) in entries.items() if not d.strip()]
    assert not undescribed, f"{command}: options without a description: {undescribed}"
    for name, values in _choice_options().items():
        if name in entries:
            flat = re.sub(r"\s+", "", " ".join(entries[name]))
            missing = [v for v in values if v not in flat]
            assert not missing, f"{command} {name} does not list {missing}"


def test_usage_names_arguments_upper_case():
    import typer

    group = typer.main.get_command(app)
    want = {"plan": ["[OPTIONS]", "[SOURCE]"], "export": ["[OPTIONS]", "OUTPUT", "DEST"],
            "metadataset": ["[OPTIONS]", "OUTPUTS..."]}
    for name, pieces in want.items():
        cmd = group.commands[name]
        assert cmd.collect_usage_pieces(typer.Context(cmd)) == pieces


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


def test_library_warnings_hidden_unless_verbose():
    """check / verify / inspect drop the warnings of PIL, transformers, torch, ... unless --verbose;
    vlmpack's own still show."""
    import warnings

    from vlmpack.cli.progress import library_warnings

    def warn_from(module: str) -> None:
        warnings.warn_explicit("noise", UserWarning, "x.py", 1, module=module, registry={})

    for verbose, want in ((False, ["vlmpack.x"]), (True, ["PIL.Image", "transformers.utils", "vlmpack.x"])):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            with library_warnings(verbose):
                for m in ("PIL.Image", "transformers.utils", "vlmpack.x"):
                    warn_from(m)
        assert len(got) == len(want), (verbose, [str(w.message) for w in got])


_EXIT_PROBE = """
import atexit, sys, threading, time
atexit.register(lambda: print("atexit handler ran", flush=True))
class Teardown:
    def __del__(self):
        print("interpreter teardown ran", flush=True)
keep = Teardown()
if sys.argv[1] == "thread":  # a thread that is not a daemon: Python must join it, so the normal exit
    threading.Thread(target=time.sleep, args=(3,)).start()
sys.argv = ["vlmpack", *sys.argv[2:]]
from vlmpack.cli import main
main()
"""


@pytest.mark.parametrize("args, code", [(["--version"], 0), (["pack", "--seq-len", "0"], 2)])
def test_the_console_script_runs_exit_handlers_and_skips_the_teardown(tmp_path, args, code):
    """``vlmpack.cli.main`` ends a finished command through ``os._exit`` after the ``atexit``
    handlers and a flush of stdout/stderr (the interpreter's teardown costs ~0.6 s after a pack);
    with a thread that is not a daemon still running it exits as Python does."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(_EXIT_PROBE)
    fast = subprocess.run([sys.executable, str(probe), "fast", *args], capture_output=True, text=True, timeout=120)
    assert fast.returncode == code, fast.stderr
    assert "atexit handler ran" in fast.stdout and "interpreter teardown ran" not in fast.stdout
    assert (__version__ in fast.stdout) if code == 0 else fast.stderr.startswith("vlmpack: error")
    if code == 0:  # once: the thread keeps the process 3 s
        slow = subprocess.run([sys.executable, str(probe), "thread", *args], capture_output=True, text=True,
                              timeout=120)
        assert slow.returncode == code, slow.stderr
        assert "atexit handler ran" in slow.stdout and "interpreter teardown ran" in slow.stdout
