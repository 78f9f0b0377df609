"""The tokenizer and chat template of a model directory, loaded as transformers' processors load
them (:func:`load_chat_tokenizer`; shared by every family)."""

from __future__ import annotations

import json
from pathlib import Path

from vlmpack.errors import ConfigError


def load_chat_tokenizer(model_dir: str | Path):
    """The fast tokenizer of ``model_dir`` with its chat template (from ``chat_template.json`` /
    ``chat_template.jinja`` when ``tokenizer_config.json`` has none, as transformers' processors
    load it). Raises :class:`ConfigError` (one line) when it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
        raise ConfigError(f"{model_dir}: cannot load the tokenizer ({type(e).__name__}: {e})") from None
    if not getattr(tok, "chat_template", None):
        tok.chat_template = _template_from_files(Path(model_dir))
    return tok


def _template_from_files(model_dir: Path) -> str:
    for name in ("chat_template.jinja", "chat_template.json"):
        p = model_dir / name
        if p.is_file():
            text = p.read_text()
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    raise ConfigError(f"{model_dir}: the tokenizer has no chat template and there is no chat_template.json/.jinja")
