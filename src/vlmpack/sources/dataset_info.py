"""LLaMA-Factory's dataset registry, ``dataset_info.json``, as an input: the data files of the datasets
it names (``--input data/dataset_info.json``, all of them in its order, or those chosen with
``--dataset NAME``).

The registry maps each dataset name to ``file_name`` (a file or folder beside the registry),
``formatting`` (``alpaca``, the default, or ``sharegpt``), ``columns`` (which column holds what) and,
for ``sharegpt``, ``tags`` (the keys and values of a turn's role and content); see LLaMA-Factory's
``data/README.md`` and its ``DatasetAttr`` parser (its media columns ``images`` / ``videos`` /
``audios``, with the ``<image>`` / ``<video>`` / ``<audio>`` placeholders, are the record's image /
video / audio items). vlmpack reads the records with its own layouts,
which take the columns and tags LLaMA-Factory uses by default and the OpenAI form of ``sharegpt``
(:mod:`vlmpack.layouts.alpaca`, :mod:`vlmpack.layouts.llava`, :mod:`vlmpack.layouts.messages`);
an entry that names other columns or tags has its records rewritten to those names first
(:mod:`vlmpack.layouts.mapping`, the run's ``record_map``; datasets packed together must map
alike). A hub or script dataset (``hf_hub_url``,
``ms_hub_url``, ``script_url``, ``cloud_file_name``: vlmpack reads local files) or a preference
dataset (``ranking``: not SFT) is refused with one :class:`~vlmpack.errors.ConfigError` line that
names the dataset and the key, as is a ``file_name`` that does not exist. Pure apart from reading
the registry; the files it gives are then checked like any ``--input``."""

from __future__ import annotations

import json
import os

from vlmpack.errors import ConfigError
from vlmpack.fsio import printable_path
from vlmpack.layouts.mapping import record_map

#: The file name of the registry (LLaMA-Factory's ``dataset_dir/dataset_info.json``).
REGISTRY = "dataset_info.json"
#: Keys of an entry that name a source vlmpack does not read (no hub, no loading script).
REMOTE = ("hf_hub_url", "ms_hub_url", "script_url", "om_hub_url", "cloud_file_name")
#: The columns vlmpack's layouts read, by formatting: LLaMA-Factory's column -> the accepted names.
_COLUMNS = {
    "alpaca": {"prompt": ("instruction",), "query": ("input",), "response": ("output",), "history": ("history",),
               "system": ("system",), "tools": ("tools",), "images": ("images",), "videos": ("videos",),
               "audios": ("audios",)},
    "sharegpt": {"messages": ("conversations", "messages"), "system": ("system",), "tools": ("tools",),
                 "images": ("images",), "videos": ("videos",), "audios": ("audios",)},
}
#: The ``sharegpt`` tags vlmpack's chat layouts read: tag -> accepted values.
TAGS = {"role_tag": ("from", "role"), "content_tag": ("value", "content"), "user_tag": ("human", "user"),
         "assistant_tag": ("gpt", "assistant"), "system_tag": ("system",),
         "observation_tag": ("observation", "tool"), "function_tag": ("function_call",)}


def is_registry(path: str) -> bool:
    """True when ``path`` is a file named :data:`REGISTRY` whose JSON object maps names to entries
    with ``file_name`` or a hub key (a ``datasets`` ``dataset_info.json`` holds ``features`` instead)."""
    if os.path.basename(path) != REGISTRY or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and bool(obj) and all(
        isinstance(v, dict) and any(k in v for k in ("file_name", *REMOTE)) for v in obj.values())


def registry_files(path: str, names: list[str] | None = None) -> list[str]:
    """The data files (paths) of the datasets of the registry at ``path``: ``names`` in that order,
    or every dataset in the registry's order; a ``file_name`` that is a folder gives its files
    (sorted, not recursive). Raises :class:`ConfigError` (one line) for an unknown name or an entry
    vlmpack does not read as it is (module docstring)."""
    with open(path, encoding="utf-8") as f:
        registry = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    where = printable_path(path)
    unknown = [n for n in names or () if n not in registry]
    if unknown:
        raise ConfigError(f"{where} has no dataset {unknown[0]!r} (it has {', '.join(sorted(registry)[:8])})")
    out: list[str] = []
    for name in names or list(registry):
        out += _entry_files(registry[name], name, base, where)
    return out


def entry_map(entry: dict, formatting: str, refuse, defaults: tuple[dict, dict] = ({}, {})) -> str | None:
    """The :data:`vlmpack.layouts.mapping.RecordMap` of an entry's ``columns`` and ``tags``: None
    when every name is one vlmpack's layouts read as they are (LLaMA-Factory's defaults, the OpenAI
    form of ``sharegpt``), else the mapping to those names. ``defaults``: the ``(columns, tags)``
    the registry's format assumes where the entry names none, when they are not LLaMA-Factory's
    (NeMo's meta file), laid under the entry's. ``refuse(why)`` makes the one-line
    :class:`ConfigError` for names vlmpack does not map."""
    columns, tags = entry.get("columns") or {}, entry.get("tags") or {}
    if not isinstance(columns, dict) or not isinstance(tags, dict):
        raise refuse("has columns / tags that are not objects")
    if formatting != "sharegpt" and tags:
        raise refuse(f"sets tags.{next(iter(tags))}; tags belong to sharegpt datasets")
    if (all(v in _COLUMNS[formatting].get(k, ()) for k, v in columns.items())
            and all(v in TAGS.get(k, ()) for k, v in tags.items())):
        return None
    try:
        return record_map(formatting, {**defaults[0], **columns}, {**defaults[1], **tags})
    except ValueError as e:
        raise refuse(str(e)) from None


def registry_map(path: str, names: list[str] | None = None) -> str | None:
    """The record mapping (:func:`entry_map`) shared by the datasets ``names`` of the registry at
    ``path`` (every dataset when empty). Raises :class:`ConfigError` (one line) when two of them
    map their records differently: they are packed one per output."""
    with open(path, encoding="utf-8") as f:
        registry = json.load(f)
    where = printable_path(path)
    maps = {}
    for name in names or list(registry):
        entry = registry.get(name)
        if not isinstance(entry, dict) or entry.get("formatting", "alpaca") not in _COLUMNS:
            continue  # an unknown name or formatting: registry_files says so in one line
        maps[name] = entry_map(entry, entry.get("formatting", "alpaca"),
                               lambda why, name=name: ConfigError(f"{where}: dataset {name!r} {why}"))
    if not maps:
        return None
    first = next(iter(maps))
    if (other := next((n for n in maps if maps[n] != maps[first]), None)) is not None:
        raise ConfigError(f"{where}: datasets {first!r} and {other!r} name their columns or tags differently; pack "
                          "each to its own output with --dataset NAME")
    return maps[first]


def _entry_files(entry: dict, name: str, base: str, where: str) -> list[str]:
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{where}: dataset {name!r} {why}")

    if remote := next((k for k in REMOTE if entry.get(k)), None):
        raise refuse(f"is read from {remote}; vlmpack reads local files: download it and name it by file_name")
    if entry.get("ranking"):
        raise refuse("is a preference dataset (ranking: true), not SFT data")
    formatting = entry.get("formatting", "alpaca")
    if formatting not in _COLUMNS:
        raise refuse(f"has formatting {formatting!r}; vlmpack reads alpaca and sharegpt")
    entry_map(entry, formatting, refuse)
    file_name = entry.get("file_name")
    if not isinstance(file_name, str) or not file_name:
        raise refuse("has no file_name")
    target = os.path.join(base, file_name)
    if os.path.isdir(target):
        files = sorted(os.path.join(target, f) for f in os.listdir(target) if os.path.isfile(os.path.join(target, f)))
    else:
        files = [target]
    if not files or not all(os.path.isfile(f) for f in files):
        raise refuse(f"names file_name {file_name!r}, which is no file or folder of files beside the registry")
    return files
