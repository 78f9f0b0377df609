"""Model families: chat template + media token rule of each supported model.

:func:`load_model` reads ``config.json`` of a local HF-format model directory and returns the
family object that renders, counts and encodes samples exactly as the model's own transformers
processor would. Supported: ``qwen2_vl``, ``qwen2_5_vl`` (:mod:`vlmpack.models.qwen2_vl`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from vlmpack.errors import ConfigError
from vlmpack.models.qwen2_vl import Qwen2VLFamily

FAMILIES = {"qwen2_vl": Qwen2VLFamily, "qwen2_5_vl": Qwen2VLFamily}

#: Files of a model directory that decide token counts (hashed into the config fingerprint).
COUNTING_FILES = ("config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                  "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                  "chat_template.json", "chat_template.jinja")


def model_type(model_dir: str | Path) -> str:
    """The ``model_type`` of ``model_dir/config.json``; :class:`ConfigError` when absent."""
    cfg = Path(model_dir) / "config.json"
    if not cfg.is_file():
        raise ConfigError(f"{model_dir}: no config.json; --model must be a local HF-format model directory")
    try:
        return str(json.loads(cfg.read_text())["model_type"])
    except (ValueError, KeyError) as e:
        raise ConfigError(f"{cfg}: cannot read model_type ({e})") from None


@lru_cache(maxsize=4)
def load_model(model_dir: str) -> Qwen2VLFamily:
    """The family object for ``model_dir`` (cached per process; pool workers load it once).

    Raises :class:`ConfigError` for an unsupported ``model_type`` or a broken directory.
    """
    mt = model_type(model_dir)
    if mt not in FAMILIES:
        raise ConfigError(f"{model_dir}: model_type {mt!r} is not supported yet; supported: {sorted(FAMILIES)}")
    return FAMILIES[mt](model_dir)
