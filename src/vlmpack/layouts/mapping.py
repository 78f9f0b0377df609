"""Column and tag mappings of a dataset registry, applied to a record before its layout is detected.

LLaMA-Factory's ``dataset_info.json`` and NeMo Automodel's meta file describe a dataset whose
records use their own key names with ``columns`` (which key holds the turns, the system prompt, the
images, ...) and, for conversations, ``tags`` (which keys of a turn hold its role and its text, and
which role values mean user, assistant, system). :func:`record_map` turns such a description into a
:data:`RecordMap`; :func:`apply_map` rewrites a record with it into the default names the layouts
read (:mod:`vlmpack.layouts.llava` for conversations: ``conversations`` of ``from`` / ``value`` with
``human`` / ``gpt`` / ``system``; :mod:`vlmpack.layouts.alpaca`: ``instruction`` / ``input`` /
``output`` / ``history`` / ``system``; ``images`` / ``videos`` / ``audios``), as LLaMA-Factory's
``SharegptDatasetConverter`` / ``AlpacaDatasetConverter`` (``src/llamafactory/data/converter.py``)
read them through ``DatasetAttr``. Pure, no I/O.

A :data:`RecordMap` is a JSON string (canonical: sorted keys), so it travels unchanged through
options, tasks and cache keys: ``{"formatting": "sharegpt" | "alpaca", "columns": {canonical
column: record key}, "tags": {tag: value}}`` with LLaMA-Factory's column and tag names.
"""

from __future__ import annotations

import json

from vlmpack.errors import RecordError
from vlmpack.layouts.base import short

#: A mapping as canonical JSON (see the module docstring).
RecordMap = str

#: The record keys the layouts read, per formatting: LLaMA-Factory's column name -> vlmpack's key.
#: The media columns are LLaMA-Factory's ``images`` / ``videos`` / ``audios`` (``DatasetAttr``, read by
#: both converters; ``<image>`` / ``<video>`` / ``<audio>`` its placeholders), which the layouts read as
#: the image / video / audio items of the record (:func:`vlmpack.layouts.builder.top_level_media`).
TARGET_COLUMNS = {
    "sharegpt": {"messages": "conversations", "system": "system", "tools": "tools", "images": "images",
                 "videos": "videos", "audios": "audios"},
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "history": "history",
               "system": "system", "tools": "tools", "images": "images", "videos": "videos", "audios": "audios"},
}
#: LLaMA-Factory's ``sharegpt`` tags (``DatasetAttr`` defaults) and the values vlmpack's layout reads.
TARGET_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
               "system_tag": "system", "observation_tag": "observation", "function_tag": "function_call"}
_ROLE_TAGS = ("user_tag", "assistant_tag", "system_tag", "observation_tag", "function_tag")


def record_map(formatting: str, columns: dict, tags: dict) -> RecordMap | None:
    """The :data:`RecordMap` of a registry entry, or None when it names nothing other than the
    defaults of vlmpack's layouts (nothing to rewrite). ``columns`` / ``tags``: the entry's, every
    value a non-empty string naming a key or a role. Raises ``ValueError`` (one line: the caller
    names the dataset) for a formatting, column or tag vlmpack does not map."""
    if formatting not in TARGET_COLUMNS:
        raise ValueError(f"has formatting {formatting!r}; vlmpack reads alpaca and sharegpt")
    for what, given, known in (("columns", columns, TARGET_COLUMNS[formatting]),
                               ("tags", tags, TARGET_TAGS if formatting == "sharegpt" else {})):
        for key, value in given.items():
            if key not in known:
                raise ValueError(f"sets {what}.{key}, which vlmpack does not map for {formatting} "
                                 f"(it maps {', '.join(known) or 'no tags'})")
            if not isinstance(value, str) or not value:
                raise ValueError(f"sets {what}.{key} to {value!r}; give a key name")
    cols = {k: v for k, v in columns.items() if v != TARGET_COLUMNS[formatting][k]}
    tag = {k: v for k, v in tags.items() if v != TARGET_TAGS[k]}
    if not cols and not tag:
        return None
    return json.dumps({"formatting": formatting, "columns": cols, "tags": tag}, sort_keys=True)


def apply_map(obj: dict, spec: RecordMap | None) -> dict:
    """``obj`` rewritten in place into the default names (module docstring) by ``spec``; ``obj``
    unchanged for None. Each mapped column is moved to its default key (a record that also holds
    that key already: ``wrong_type``); with tags, each turn of the turns column becomes
    ``{"from": role, "value": text}`` with the mapped role values replaced by ``human`` / ``gpt`` /
    ``system`` / ``observation`` / ``function_call`` (other values stay, and the layout judges them). Idempotent. Raises
    :class:`RecordError` (``wrong_type``)."""
    if spec is None:
        return obj
    m = json.loads(spec)
    target = TARGET_COLUMNS[m["formatting"]]
    for column, key in m["columns"].items():
        if key in obj:
            if target[column] in obj and target[column] != key:
                raise RecordError("wrong_type", f"the record holds both {key!r} (mapped to {target[column]!r}) and "
                                                f"{target[column]!r}; keep one")
            obj[target[column]] = obj.pop(key)
    tags = m["tags"]
    turns = obj.get(target.get("messages", ""))
    if tags and isinstance(turns, list):
        role_key = tags.get("role_tag", TARGET_TAGS["role_tag"])
        text_key = tags.get("content_tag", TARGET_TAGS["content_tag"])
        roles = {tags[t]: TARGET_TAGS[t] for t in _ROLE_TAGS if t in tags}
        out = []
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise RecordError("wrong_type", f"turn {i} must be an object, got {short(turn)}")
            if role_key in turn or text_key in turn:
                role = turn.get(role_key)
                turn = {"from": roles.get(role, role) if isinstance(role, str) else role,
                        "value": turn.get(text_key)}
            out.append(turn)
        obj[target["messages"]] = out
    return obj
