"""Tool use and reasoning in a conversation: the record's ``tools`` list, assistant ``tool_calls``
and ``reasoning_content``, ``tool`` turns; read into the canonical fields of
:mod:`vlmpack.records` that the chat template renders (``apply_chat_template(messages, tools=...)``).

Read as transformers' chat-template inputs take them (``transformers.utils.chat_template_utils``):

- ``tools`` (top level): a list of JSON-schema objects (``{"type": "function", "function": {"name",
  "description", "parameters"}}``), or that list as JSON text (LLaMA-Factory's ``tools`` column);
  passed to the template as it is;
- an assistant turn's ``tool_calls``: a list of objects, each with a string ``name`` under
  ``function`` (OpenAI: ``{"type": "function", "function": {"name", "arguments"}}``) or at its top;
  kept as written (``arguments`` an object or JSON text: the template decides how to print it);
- an assistant turn's reasoning: ``reasoning_content``, or its older names ``thinking`` /
  ``reasoning`` (transformers' ``_REASONING_FIELDS``), kept as ``reasoning_content``;
- a ``tool`` turn (also ``observation``, LLaMA-Factory's tag, and OpenAI's older ``function``
  role): the tool's result as content, with optional string ``tool_call_id`` / ``name``;
- LLaMA-Factory's ``function_call`` turn: its value is the call as JSON text (one object or a
  list of ``{"name", "arguments"}``), an assistant turn with those ``tool_calls`` and no text.

Pure, no I/O; failures are :class:`~vlmpack.errors.RecordError` ``wrong_type``.
"""

from __future__ import annotations

import json

from vlmpack.errors import RecordError
from vlmpack.layouts.base import short

#: transformers' names of a message's reasoning (``_REASONING_FIELDS``), the first the canonical one.
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
#: every key :func:`turn_extras` reads (a turn with none of them has no extra field)
EXTRA_KEYS = frozenset((*REASONING_KEYS, "tool_calls", "tool_call_id", "name"))


def record_tools(obj: dict) -> list[dict] | None:
    """The record's ``tools`` as a list of objects, or None when it has none (absent, null, empty
    list or empty text). Raises ``wrong_type`` for anything else (text that is no JSON list of
    objects included)."""
    tools = obj.get("tools")
    if isinstance(tools, str):
        if not tools.strip():
            return None
        try:
            tools = json.loads(tools)
        except ValueError:
            raise RecordError("wrong_type", f"'tools' is text but not JSON: {short(tools)}") from None
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RecordError("wrong_type", f"'tools' must be a list of objects, got {short(tools)}")
    return tools


def tool_calls_from_text(value: object, where: str) -> list[dict]:
    """LLaMA-Factory's ``function_call`` value (JSON text of one call or a list of calls, each
    ``{"name", "arguments"}``) as OpenAI-style ``tool_calls``. Raises ``wrong_type``."""
    try:
        calls = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        calls = None
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list) or not calls:
        raise RecordError("wrong_type", f"{where} function_call must be JSON text of a call or a list of calls, "
                                        f"got {short(value)}")
    return check_tool_calls([{"type": "function", "function": c} if isinstance(c, dict) else c for c in calls],
                            where)


def check_tool_calls(calls: object, where: str) -> list[dict]:
    """``calls`` when it is a list of tool-call objects, each naming its function by a non-empty
    string (``function.name`` or ``name``); raises ``wrong_type`` otherwise."""
    if not isinstance(calls, list):
        raise RecordError("wrong_type", f"{where} 'tool_calls' must be a list, got {short(calls)}")
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RecordError("wrong_type", f"{where}.tool_calls[{j}] must name its function "
                                            f"(function.name), got {short(call)}")
    return calls


def turn_extras(turn: dict, role: str, where: str) -> dict:
    """The canonical extra fields of one turn (:data:`vlmpack.records.MESSAGE_EXTRAS`, only those set): an assistant's
    ``reasoning_content`` (from any of :data:`REASONING_KEYS`) and ``tool_calls``, a tool turn's
    ``tool_call_id`` and ``name``. A field on a turn of another role is ``wrong_type`` (it would
    not be rendered), as is a field of the wrong type; empty values count as absent."""
    if turn.keys().isdisjoint(EXTRA_KEYS):  # most turns: none of the fields
        return {}
    out: dict = {}
    reasoning = next((turn[k] for k in REASONING_KEYS if turn.get(k) not in (None, "")), None)
    calls = turn.get("tool_calls")
    ids = {k: turn[k] for k in ("tool_call_id", "name") if turn.get(k) not in (None, "")}
    if role != "assistant" and (reasoning is not None or calls):
        raise RecordError("wrong_type", f"{where} is a {role} turn with reasoning or tool_calls; only assistant "
                                        "turns carry them")
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise RecordError("wrong_type", f"{where} reasoning must be a string, got {short(reasoning)}")
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = check_tool_calls(calls, where)
    if role == "tool":
        for k, v in ids.items():
            if not isinstance(v, str):
                raise RecordError("wrong_type", f"{where} {k!r} must be a string, got {short(v)}")
            out[k] = v
    return out
