"""Config: YAML + flags, validation errors in one line, fingerprint semantics, CLI errors."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

from vlmpack.config import load_config
from vlmpack.errors import ConfigError


@pytest.fixture()
def base(tmp_path, model_dir):
    data = tmp_path / "d.jsonl"
    turns = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]
    data.write_text(json.dumps({"id": "a", "conversations": turns}) + "\n")
    return {"input": [str(data)], "model": str(model_dir), "output": str(tmp_path / "out")}


def test_yaml_then_flags_override(tmp_path, base):
    y = tmp_path / "pack.yaml"
    y.write_text(f"input: {base['input'][0]}\nmodel: {base['model']}\noutput: {base['output']}\n"
                 "seq-len: 4096\nmax_samples_per_pack: 64\nschema: llava\n")
    cfg = load_config(y, seq_len=2048)
    assert (cfg.seq_len, cfg.max_samples_per_pack, cfg.input_schema) == (2048, 64, "llava")
    assert cfg.media_root == str(tmp_path)


@pytest.mark.parametrize("bad,match", [({"seq_len": 0}, "seq_len"), ({"bogus": 1}, "bogus"),
                                       ({"overlong": "maybe"}, "overlong"), ({"shard_prefix": "a.b"}, "shard_prefix")])
def test_invalid_values_are_one_line_config_errors(base, bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        load_config(**base, **bad)
    assert "\n" not in str(e.value)


def test_missing_input_and_model(base, tmp_path):
    with pytest.raises(ConfigError, match="input file not found"):
        load_config(**{**base, "input": [str(tmp_path / "nope.jsonl")]})
    with pytest.raises(ConfigError, match="model directory not found"):
        load_config(**{**base, "model": str(tmp_path / "nomodel")})


def test_fingerprint_tracks_what_changes_the_bytes(base, model_dir, tmp_path):
    fp = load_config(**base).fingerprint()
    assert load_config(**base, workers=7, progress=False).fingerprint() == fp
    assert load_config(**base, seq_len=4096).fingerprint() != fp
    assert load_config(**base, seed=1).fingerprint() != fp
    # a changed chat template changes the counts, so the fingerprint
    import shutil

    other = tmp_path / "model2"
    shutil.copytree(model_dir, other)
    cfg_file = other / "tokenizer_config.json"
    cfg_file.write_text(cfg_file.read_text().replace("You are a helpful assistant.", "You are terse."))
    assert load_config(**{**base, "model": str(other)}).fingerprint() != fp


def test_cli_error_is_one_line_exit_2(base):
    proc = run_cli(["pack", "--input", base["input"][0], "--model", base["model"], "--output", base["output"],
                    "--seq-len", "-5"])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("vlmpack: error: invalid option 'seq_len'")
    assert len(proc.stderr.strip().splitlines()) == 1
