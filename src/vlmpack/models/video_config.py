"""The video processor settings of a model directory, read as transformers reads them.

Shared by every family that counts videos from the container header (:mod:`vlmpack.models.qwen_video_rule`,
:mod:`vlmpack.models.qwen3_vl`, :mod:`vlmpack.models.qwen_video`); pure functions of the directory's
JSON files.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlmpack.errors import MediaRuleError


def video_settings(model_dir: Path, defaults: dict, *, pixels_keys: bool = False) -> dict:
    """The video processor settings transformers would load from ``model_dir``: the first of
    ``processor_config.json["video_processor"]``, ``video_preprocessor_config.json``,
    ``preprocessor_config.json`` (``BaseVideoProcessor.get_video_processor_dict``) over
    ``defaults``; with ``pixels_keys`` (Qwen2-VL's ``__init__``) top-level ``min_pixels`` /
    ``max_pixels`` set ``size``'s ``shortest_edge`` / ``longest_edge``."""
    found = None
    proc = model_dir / "processor_config.json"
    if proc.is_file():
        found = json.loads(proc.read_text()).get("video_processor")
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        if found is None and (model_dir / name).is_file():
            found = json.loads((model_dir / name).read_text())
    cfg = {**defaults, **{k: v for k, v in (found or {}).items() if k in defaults}}
    size = dict(cfg["size"] or {})
    if pixels_keys and found:
        if found.get("min_pixels") is not None:
            size["shortest_edge"] = found["min_pixels"]
        if found.get("max_pixels") is not None:
            size["longest_edge"] = found["max_pixels"]
    cfg["size"] = size
    return cfg


def video_size_edges(size: dict) -> tuple[int, int]:
    """``(shortest_edge, longest_edge)`` of a video processor's ``size`` (pixels); raises
    :class:`MediaRuleError` when either is missing."""
    lo, hi = size.get("shortest_edge"), size.get("longest_edge")
    if not lo or not hi:
        raise MediaRuleError(f"the video processor's size needs shortest_edge and longest_edge, got {size}")
    return int(lo), int(hi)
