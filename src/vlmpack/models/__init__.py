"""Model families: every model-specific rule behind one protocol, looked up by ``model_type``.

:func:`load_model` reads ``config.json`` of a local HF-format model directory and returns the
:class:`~vlmpack.models.base.ModelFamily` object that renders, counts, encodes, labels, positions
and preprocesses samples exactly as the model's own transformers processor and model would.
:data:`FAMILIES` maps ``config.json``'s ``model_type`` to the family class; a new family is one
module plus one line here. Any other ``model_type`` whose own processor builds and answers
``_get_num_multimodal_tokens`` gets the generic family (:mod:`vlmpack.models.generic`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from vlmpack.errors import ConfigError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ModelFamily, ProcessedImages
from vlmpack.models.chat_tokenizer import require_tokenizer_files
from vlmpack.models.gemma3 import Gemma3Family
from vlmpack.models.glm4v import Glm4vFamily
from vlmpack.models.internvl import InternVLFamily
from vlmpack.models.kimi_k25 import KimiK25Family
from vlmpack.models.kimi_vl import KimiVLFamily
from vlmpack.models.llava_onevision import LlavaOnevisionFamily
from vlmpack.models.qwen2_5_omni import Qwen25OmniFamily
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.qwen3_vl import Qwen3_5Family, Qwen3VLFamily
from vlmpack.models.smolvlm import SmolVLMFamily

__all__ = ["COUNTING_FILES", "FAMILIES", "MediaSize", "ModelFamily", "ProcessedImages",
           "check_processor", "family_of", "load_model", "loaded_before", "model_type"]

#: ``model_type`` of ``config.json`` -> family class (one line per supported type).
FAMILIES: dict[str, type] = {
    "qwen2_vl": Qwen2VLFamily,
    "qwen2_5_vl": Qwen2VLFamily,
    "qwen2_5_omni": Qwen25OmniFamily,
    "qwen3_vl": Qwen3VLFamily,
    "qwen3_vl_moe": Qwen3VLFamily,
    "qwen3_5": Qwen3_5Family,
    "qwen3_5_moe": Qwen3_5Family,
    "internvl": InternVLFamily,
    "llava_onevision": LlavaOnevisionFamily,
    "gemma3": Gemma3Family,
    "glm4v": Glm4vFamily,
    "smolvlm": SmolVLMFamily,
    "kimi_k25": KimiK25Family,
    "kimi_vl": KimiVLFamily,
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


def family_of(model_dir: str | Path) -> dict:
    """What ``report.json`` says of the family counting ``model_dir``: ``model_type``, ``family``
    (``"dedicated"``: a class of :data:`FAMILIES`; ``"generic"``: :mod:`vlmpack.models.generic`)
    and the family's ``name`` (the generic one: the processor class it calls). Loads nothing."""
    mt = model_type(model_dir)
    if mt in FAMILIES:
        return {"model_type": mt, "family": "dedicated", "name": FAMILIES[mt].name}
    from vlmpack.models.processor_build import processor_class

    return {"model_type": mt, "family": "generic", "name": processor_class(model_dir).__name__}


def load_model(model_dir: str | Path, processor: Mapping[str, Any] | str | None = None) -> ModelFamily:
    """The family object for ``model_dir`` (cached per process; pool workers load it once).

    ``processor``: processor options (:func:`vlmpack.models.options.canonical`, or its JSON; the
    config's ``processor``): the family's processors are built with them
    (:func:`vlmpack.models.options.apply_options`). Raises :class:`ConfigError` for an
    unsupported ``model_type``, a broken directory or an option the family does not have.
    """
    from vlmpack.models.options import processor_json

    if isinstance(processor, str):
        processor = json.loads(processor) if processor else None
    key = (str(model_dir), processor_json(processor))
    family = _load(*key)
    _LOADED.add(key)
    return family


def loaded_before(model_dir: str | Path, processor: Mapping[str, Any] | str | None = None) -> bool:
    """Whether this process has loaded ``model_dir`` with ``processor`` (:func:`load_model`; its
    cache keeps the last four: a load asked for again is then usually at once). Loads nothing."""
    from vlmpack.models.options import processor_json

    if isinstance(processor, str):
        processor = json.loads(processor) if processor else None
    return (str(model_dir), processor_json(processor)) in _LOADED


#: (directory, processor options JSON) of every :func:`load_model` that returned in this process
_LOADED: set[tuple[str, str]] = set()


def check_processor(model_dir: str | Path, processor: Mapping[str, Any]) -> None:
    """:class:`ConfigError` (one line) when ``model_dir``'s family does not have one of the
    ``processor`` options (:func:`vlmpack.models.options.component_settings`); loads no tokenizer
    (``vlmpack pack`` checks it before reading any input)."""
    if not processor:
        return
    from vlmpack.models.options import component_settings

    cls = FAMILIES.get(model_type(model_dir))
    if cls is not None:  # an unsupported model_type is refused by load_model
        component_settings(cls, processor)


@lru_cache(maxsize=4)
def _load(model_dir: str, processor: str) -> ModelFamily:
    mt = model_type(model_dir)
    require_tokenizer_files(model_dir)  # before transformers is imported: a directory without them fails at once
    if mt not in FAMILIES:
        from vlmpack.models.generic import GenericFamily

        if processor:
            raise ConfigError(f"{model_dir}: processor options are not supported for model_type {mt!r} (the "
                              "generic family); set them in the model directory's processor_config.json")
        try:
            return GenericFamily(model_dir)
        except ConfigError as e:
            raise ConfigError(f"model_type {mt!r} has no dedicated family ({sorted(FAMILIES)}) and the generic one "
                              f"cannot count it: {e}") from None
    cls = FAMILIES[mt]
    if processor:
        from vlmpack.models.options import apply_options

        model_dir = apply_options(model_dir, cls, json.loads(processor))
    return cls(model_dir)
