"""Errors that say what to change, and a failed start that blocks nothing (the first hour of a new user).

- a run that failed before counting (wrong ``--model``) or at the reject gate leaves no run record
  that refuses the corrected command; a run of other options is refused naming them as flags;
- the reject gate names ``--media-root`` when media are missing; a JSON array read as JSONL names
  ``--input-format json``; a model directory without tokenizer files names them; ``pack`` without its
  required options names the flags; ``plan`` errors start ``vlmpack: error:`` like every command's;
  ``verify`` loads the model before it checks or recounts anything.

Real commands (the console script's ``main``) on the demo data and the real Qwen2.5-VL directory.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hostile_corpus import one_error_line, run_cli
from typer.testing import CliRunner

import vlmpack.check
from vlmpack.cli import app
from vlmpack.config import load_config
from vlmpack.errors import ConfigError, InputError, RunDirError
from vlmpack.models import load_model
from vlmpack.pack.rundir import prepare_output, unlock_output
from vlmpack.readers import sniff_input

pytestmark = pytest.mark.slow


@pytest.fixture()
def config_only(tmp_path, model_dir):
    """A model directory holding only ``config.json`` (the weights' folder, a partial download)."""
    d = tmp_path / "config_only"
    d.mkdir()
    shutil.copy(model_dir / "config.json", d / "config.json")
    return d


def _lines(real_data, n: int) -> bytes:
    return b"".join((real_data / "real_sft.jsonl").read_bytes().splitlines(keepends=True)[:n])


def _pack(inp, out, model, *extra):
    return run_cli(["pack", "-i", inp, "-o", out, "--model", model, "--workers", 1, "--no-progress",
                    "--cache-dir", "off", *extra])


def test_a_failed_start_blocks_nothing_and_verify_checks_the_model_first(tmp_path, real_data, model_dir, config_only,
                                                                        monkeypatch):
    (tmp_path / "in.jsonl").write_bytes(_lines(real_data, 40))
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    wrong = _pack(inp, out, config_only, "--media-root", real_data)
    assert wrong.returncode == 2
    assert one_error_line(wrong.stderr) == (  # (c): the files missing, not "no chat template"
        f"vlmpack: error: {config_only}: no tokenizer files (tokenizer.json / tokenizer_config.json not found); "
        "--model must be a full HF-format model directory (tokenizer, chat template, processor and config)")
    fixed = _pack(inp, out, model_dir, "--media-root", real_data)  # item 4: no --overwrite needed
    assert fixed.returncode == 0, fixed.stderr
    other = _pack(inp, out, model_dir, "--media-root", real_data, "--seq-len", 4096)
    assert other.returncode == 2
    assert one_error_line(other.stderr) == (f"vlmpack: error: {out} holds a run of another config: --seq-len 8192 "
                                            "-> 4096; pass --overwrite to start over or choose another --output")

    # (f): a wrong --model fails before the Energon load and the recount
    def no_check(*a, **k):
        raise AssertionError("checked before the model was loaded")

    monkeypatch.setattr(vlmpack.check, "check_output", no_check)
    res = CliRunner().invoke(app, ["verify", str(out), "--model", str(config_only), "--no-progress"])
    assert isinstance(res.exception, ConfigError) and "no tokenizer files" in str(res.exception), res.output


def test_the_refusal_names_the_options_that_differ(tmp_path):
    out = tmp_path / "out"
    opts = {"model": "/a", "seq_len": 4096, "input": ["/d/x.jsonl"], "seed": 0}
    payload = {"vlmpack": "1", "options": opts, "inputs": [], "model_files": {}}
    try:
        prepare_output(out, "fp1", payload, overwrite=False)
        (out / ".vlmpack" / "outputs.json").write_text("{}")  # the run wrote something: a previous run
        later = {**payload, "options": {**opts, "model": "/b", "seq_len": 8192, "dedup": "exact"}}
        with pytest.raises(RunDirError) as e:
            prepare_output(out, "fp2", later, overwrite=False)
        assert str(e.value) == (f"{out} holds a run of another config: --dedup default -> exact, --model /a -> /b, "
                                "--seq-len 4096 -> 8192; pass --overwrite to start over or choose another --output")
        # a record written before the options were kept: the fingerprints, as before
        record = out / ".vlmpack" / "config.json"
        record.write_text(json.dumps({"fingerprint": "f" * 64}))
        with pytest.raises(RunDirError, match=r"another config \(fingerprint ffffffffffff != fp2\)"):
            prepare_output(out, "fp2", later, overwrite=False)
        # a run stopped by the reject gate wrote nothing but its report: the next command replaces it
        (out / ".vlmpack" / "outputs.json").unlink()
        (out / "report.json").write_text(json.dumps({"status": "failed", "stage": "count"}))
        prepare_output(out, "fp2", later, overwrite=False)
        assert json.loads(record.read_text())["fingerprint"] == "fp2" and not (out / "report.json").exists()
    finally:
        unlock_output(out)


def test_missing_media_name_the_media_root(tmp_path, real_data, model_dir):
    (tmp_path / "in.jsonl").write_bytes(_lines(real_data, 40))  # media paths relative to real_data, not tmp_path
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    failed = _pack(inp, out, model_dir)
    assert failed.returncode == 3
    line = one_error_line(failed.stderr)
    first = json.loads(inp.read_text().splitlines()[0])["images"][0]
    assert line.startswith("vlmpack: failed: ") and "media_missing" in line, line
    assert (f"records name media not found under --media-root {tmp_path} (the first: {tmp_path / first}, for "
            f"{inp}:1): pass --media-root DIR, the folder the media paths are relative to (or raise "
            "--max-reject-fraction to pack anyway)") in line, line
    fixed = _pack(inp, out, model_dir, "--media-root", real_data)  # not refused: the failed run wrote nothing
    assert fixed.returncode == 0, fixed.stderr


def test_a_json_array_read_as_jsonl_names_the_format(tmp_path, real_data, model_dir):
    records = [json.loads(x) for x in _lines(real_data, 3).splitlines()]
    for name, text in (("one.jsonl", json.dumps(records)), ("many.jsonl", json.dumps(records, indent=1))):
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError) as e:
            sniff_input(str(tmp_path / name))
        assert str(e.value) == (f"{tmp_path / name} holds one JSON array, not JSON lines: pass --input-format json "
                                "(or leave it auto) to read it as one array, or convert it to JSONL (jq -c '.[]')")
    proc = _pack(tmp_path / "one.jsonl", tmp_path / "out", model_dir, "--input-format", "jsonl")
    assert proc.returncode == 2 and "pass --input-format json" in one_error_line(proc.stderr), proc.stderr


def test_a_model_without_tokenizer_files_names_them(config_only):
    with pytest.raises(ConfigError, match=r"no tokenizer files \(tokenizer.json / tokenizer_config.json not found\)"):
        load_model(config_only)


def test_missing_required_options_are_named_as_flags(tmp_path, real_data):
    proc = run_cli(["pack"])
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == ("vlmpack: error: missing --input, --output, --model "
                                           "(or give them in --config)")
    with pytest.raises(ConfigError, match=r"^missing --model \(or give it in --config\)$"):
        load_config(input=[str(real_data / "real_sft.jsonl")], output=str(tmp_path / "o"))


def test_plan_errors_have_the_prefix_of_every_command(tmp_path):
    proc = run_cli(["plan"])
    assert proc.returncode == 2
    assert one_error_line(proc.stderr).startswith("vlmpack: error: nothing to plan"), proc.stderr
    proc = run_cli(["plan", tmp_path / "missing"])
    assert proc.returncode == 2 and one_error_line(proc.stderr).startswith("vlmpack: error: "), proc.stderr
