"""Model families: every model-specific rule behind one protocol, looked up by ``model_type``.

:func:`load_model` reads ``config.json`` of a local HF-format model directory and returns the
:class:`~vlmpack.models.base.ModelFamily` object that renders, counts, encodes, labels, positions
and preprocesses samples exactly as the model's own transformers processor and model would.
:data:`FAMILIES` maps ``config.json``'s ``model_type`` to the family class; a new family is one
module plus one line here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from vlmpack.errors import ConfigError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ModelFamily, ProcessedImages
from vlmpack.models.internvl import InternVLFamily
from vlmpack.models.llava_onevision import LlavaOnevisionFamily
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.qwen3_vl import Qwen3_5Family, Qwen3VLFamily

__all__ = ["COUNTING_FILES", "FAMILIES", "MediaSize", "ModelFamily", "ProcessedImages",
           "load_model", "model_type"]

#: ``model_type`` of ``config.json`` -> family class (one line per supported type).
FAMILIES: dict[str, type] = {
    "qwen2_vl": Qwen2VLFamily,
    "qwen2_5_vl": Qwen2VLFamily,
    "qwen3_vl": Qwen3VLFamily,
    "qwen3_vl_moe": Qwen3VLFamily,
    "qwen3_5": Qwen3_5Family,
    "qwen3_5_moe": Qwen3_5Family,
    "internvl": InternVLFamily,
    "llava_onevision": LlavaOnevisionFamily,
}


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
def load_model(model_dir: str) -> ModelFamily:
    """The family object for ``model_dir`` (cached per process; pool workers load it once).

    Raises :class:`ConfigError` for an unsupported ``model_type`` or a broken directory.
    """
    mt = model_type(model_dir)
    if mt not in FAMILIES:
        raise ConfigError(f"{model_dir}: model_type {mt!r} is not supported yet; supported: {sorted(FAMILIES)}")
    return FAMILIES[mt](model_dir)
