"""Processor options: the settings a training recipe passes to transformers' processors
(``--min-pixels``, ``--max-pixels``, ``--fps``, ``--processor-kwargs JSON``, ...), applied to a
model directory so that counting, ``vlmpack verify`` and the collator all see the same processors.

Two kinds of option, one canonical mapping (:func:`canonical`, saved in the run's fingerprint):

- the named options of :data:`NAMED` (flags and YAML keys). Each family declares which it takes
  in its ``processor_options`` class attribute: option -> the settings it sets, as
  ``(component, key)`` or ``(component, key, value)`` with ``component`` ``"image"`` (the image
  processor), ``"video"`` (the video processor) or ``"processor"`` (the processor itself), and
  ``key`` a setting of that component (``"size.longest_edge"``: one entry of the ``size`` dict).
  The value given is set, or the fixed ``value`` when there is one (``--fps F`` also sets
  ``do_sample_frames`` true: without it the processor keeps every frame).
- ``kwargs`` (``--processor-kwargs JSON``): what ``AutoProcessor.from_pretrained(dir, **kwargs)``
  does with them (transformers' ``ProcessorMixin._get_arguments_from_pretrained``): each key goes
  to every component that accepts it (:func:`accepted_keys`: the image processor class's
  ``valid_kwargs``, the video settings the family reads, the processor's own init arguments it
  reads). Named options apply after them.

A key no component of the family takes is a :class:`ConfigError` (one line, exit 2).

How the options reach the processors: :func:`apply_options` builds a *derived model directory*
(links to every file of the model directory, and the components' JSON configs rewritten with the
settings merged), which :func:`vlmpack.models.load_model` loads like any other. This is exact:
transformers' ``from_pretrained(dir, **kwargs)`` builds a processor from its config dict updated
with the kwargs (``ImageProcessingMixin.from_dict``: ``image_processor_dict.update(kwargs)``, the
same in ``BaseVideoProcessor.from_dict`` and ``ProcessorMixin.from_args_and_dict``), which is the
dict of the rewritten file. Each component's settings are written where transformers reads them:
``processor_config.json["image_processor"]`` else ``preprocessor_config.json`` (image);
``processor_config.json["video_processor"]`` else ``video_preprocessor_config.json`` else
``preprocessor_config.json`` (video: written as its own ``video_preprocessor_config.json``, so
image settings never reach the video processor through the shared file); ``processor_config.json``
(processor).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlmpack.errors import ConfigError

__all__ = ["NAMED", "accepted_keys", "apply_options", "canonical", "component_settings", "processor_json"]

#: The named processor options (flag ``--min-pixels`` = key ``min_pixels``) and what each means.
NAMED = {
    "min_pixels": "smallest image after resize, in pixels (the image processor's min_pixels)",
    "max_pixels": "largest image after resize, in pixels (the image processor's max_pixels)",
    "patch_size": "vision patch side in pixels (image and video processors); the seed's --factor = patch x merge",
    "merge_size": "patches merged per side into one token (image and video processors)",
    "fps": "video frames sampled per second (the video processor's fps, with do_sample_frames)",
    "min_frames": "fewest frames sampled of a video (the video processor's min_frames)",
    "max_frames": "most frames sampled of a video (the video processor's max_frames)",
    "video_max_pixels": "largest video frame after resize, in pixels (Qwen2/2.5-VL's video max_pixels)",
    "total_pixels": "largest video after resize, all its frames together, in pixels (Qwen3-VL's video "
                    "size.longest_edge)",
}

#: Per-call arguments of transformers' kwargs dicts, not settings of a processor.
_CALL_ONLY = {"device", "return_tensors", "data_format", "input_data_format", "disable_grouping",
              "return_metadata", "video_metadata"}
#: The files a component's settings are read from (see the module docstring).
_PROCESSOR_FILE, _IMAGE_FILE, _VIDEO_FILE = "processor_config.json", "preprocessor_config.json", \
    "video_preprocessor_config.json"


def canonical(named: Mapping[str, Any] | None = None, kwargs: Mapping[str, Any] | None = None) -> dict:
    """The processor options as one canonical mapping: the named options set (not None), sorted,
    plus ``"kwargs"`` when there are any. Raises :class:`ConfigError` for an unknown name, a
    value that is not a positive number (named options) or kwargs that are not a JSON object."""
    out: dict[str, Any] = {}
    for name, value in sorted((named or {}).items()):
        if value is None:
            continue
        if name not in NAMED:
            raise ConfigError(f"unknown processor option {name!r}; the named ones: {', '.join(NAMED)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} {value!r}: expected a positive number")
        out[name] = float(value) if name == "fps" else int(value)
    if kwargs:
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigError(f"--processor-kwargs {kwargs!r}: expected a JSON object")
        try:
            out["kwargs"] = json.loads(json.dumps(dict(sorted(kwargs.items())), allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"--processor-kwargs: not plain JSON ({e})") from None
    return out


def processor_json(options: Mapping[str, Any] | None) -> str:
    """Processor options (:func:`canonical`) as the canonical JSON the pack stages, their tasks and
    :func:`vlmpack.models.load_model`'s cache carry (hashable); ``""`` for none."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":")) if options else ""


def accepted_keys(family_cls: type) -> dict[str, frozenset[str]]:
    """Per component, the settings of ``family_cls``'s processors that ``--processor-kwargs`` may
    set: the image processor class's ``valid_kwargs`` (transformers' own list, as ``from_dict``
    filters kwargs), the video settings the family reads (``video_option_keys``) and the processor
    init arguments it reads (``processor_option_keys``), per-call arguments left out."""
    # a family whose image processor class cannot be imported everywhere (Kimi-K2.5's is
    # torchvision-only, counting is not) restates its valid_kwargs as ``image_valid_kwargs``
    restated = getattr(family_cls, "image_valid_kwargs", None)
    valid = restated() if restated is not None else family_cls.image_processor_class().valid_kwargs
    image = set(getattr(valid, "__annotations__", {})) - _CALL_ONLY
    return {"image": frozenset(image), "video": frozenset(getattr(family_cls, "video_option_keys", ())),
            "processor": frozenset(getattr(family_cls, "processor_option_keys", ()))}


def component_settings(family_cls: type, options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"image": {...}, "video": {...}, "processor": {...}}``: the settings ``options``
    (:func:`canonical`) give each component of ``family_cls`` (module docstring). Raises
    :class:`ConfigError` (one line) for a named option or a kwarg the family does not have."""
    out: dict[str, dict[str, Any]] = {"image": {}, "video": {}, "processor": {}}
    kwargs = dict(options.get("kwargs") or {})
    if kwargs:
        keys = accepted_keys(family_cls)
        for key, value in kwargs.items():
            to = [c for c in out if key in keys[c]]
            if not to:
                known = sorted(keys["image"] | keys["video"] | keys["processor"])
                raise ConfigError(f"--processor-kwargs: {key!r} is not a setting of the {family_cls.name} processors "
                                  f"(they take: {', '.join(known)})")
            for c in to:
                out[c][key] = value
    table = getattr(family_cls, "processor_options", {})
    for name, value in options.items():
        if name == "kwargs":
            continue
        if name not in table:
            has = ", ".join(f"--{n.replace('_', '-')}" for n in table) or "none"
            raise ConfigError(f"--{name.replace('_', '-')}: the {family_cls.name} processors have no such option "
                              f"(theirs: {has}; others with --processor-kwargs)")
        for target in table[name]:
            component, key = target[0], target[1]
            out[component][key] = target[2] if len(target) > 2 else value
    return out


def _merge(config: dict, settings: Mapping[str, Any]) -> dict:
    """``config`` with ``settings`` set (``"a.b"``: entry ``b`` of dict ``a``)."""
    merged = json.loads(json.dumps(config))
    for key, value in settings.items():
        outer, dot, inner = key.partition(".")
        if dot:
            sub = merged.get(outer)
            merged[outer] = {**(sub if isinstance(sub, dict) else {}), inner: value}
        else:
            merged[key] = value
    return merged


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read it ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def rewritten_files(model_dir: Path, settings: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """File name -> new JSON content of the files :func:`apply_options` rewrites (module docstring).
    Raises :class:`ConfigError` for an unreadable config file."""
    files: dict[str, dict] = {}

    def current(name: str) -> dict:
        if name not in files:
            files[name] = _read(model_dir / name) if (model_dir / name).is_file() else {}
        return files[name]

    proc = current(_PROCESSOR_FILE) if (model_dir / _PROCESSOR_FILE).is_file() else {}
    nested_video = isinstance(proc.get("video_processor"), dict)
    if nested_video and settings["video"]:
        current(_PROCESSOR_FILE)["video_processor"] = _merge(proc["video_processor"], settings["video"])
    elif (model_dir / _VIDEO_FILE).is_file() and settings["video"]:
        files[_VIDEO_FILE] = _merge(current(_VIDEO_FILE), settings["video"])
    elif not nested_video and not (model_dir / _VIDEO_FILE).is_file() and (settings["video"] or settings["image"]):
        # the video processor reads preprocessor_config.json: it gets its own copy, so that image
        # settings written there do not reach it
        files[_VIDEO_FILE] = _merge(current(_IMAGE_FILE), settings["video"])
    if settings["image"]:
        if isinstance(proc.get("image_processor"), dict):
            current(_PROCESSOR_FILE)["image_processor"] = _merge(proc["image_processor"], settings["image"])
        else:
            files[_IMAGE_FILE] = _merge(current(_IMAGE_FILE), settings["image"])
    if settings["processor"]:
        files[_PROCESSOR_FILE] = _merge(current(_PROCESSOR_FILE), settings["processor"])
    return {name: content for name, content in files.items() if content != (
        _read(model_dir / name) if (model_dir / name).is_file() else None)}


_DERIVED: list[str] = []


def apply_options(model_dir: str | Path, family_cls: type, options: Mapping[str, Any]) -> str:
    """A model directory whose processors are those of ``model_dir`` built with ``options``
    (:func:`canonical`): ``model_dir`` itself when the options change nothing, else a new
    directory under the system's temporary folder (removed when the process exits) holding a link
    to each file of ``model_dir`` and the rewritten configs (:func:`rewritten_files`). Built anew
    by each process that asks: nothing of an earlier one is read. Raises :class:`ConfigError` as
    :func:`component_settings` does."""
    src = Path(model_dir)
    files = rewritten_files(src, component_settings(family_cls, options))
    if not files:
        return str(model_dir)
    out = Path(tempfile.mkdtemp(prefix="vlmpack-processor-"))
    if not _DERIVED:
        atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _DERIVED])
    _DERIVED.append(str(out))
    for f in sorted(src.iterdir()):
        if f.name not in files and f.is_file():
            os.symlink(f.resolve(), out / f.name)
    for name, content in sorted(files.items()):
        (out / name).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    return str(out)
