"""Tool use and reasoning as the chat template renders them: which fields a conversation uses,
whether a model's template renders each one, and special tokens inside them.

A conversation may carry, beside its text and media parts (:mod:`vlmpack.records`), tool schemas
(``tools``, passed as ``apply_chat_template(..., tools=tools)``), assistant ``tool_calls`` and
``reasoning_content``, and ``tool`` turns. Templates differ: Qwen3-VL's renders tools, tool calls
and tool turns (as ``<tool_response>`` inside a user turn) but no reasoning; Qwen2-VL's and
InternVL's render none of the first two; Qwen3's text template renders reasoning only for the
assistant turns after the last user query (its ``ns.last_query_index``). vlmpack renders whatever
the model directory's template renders, no more: a conversation using a field the template never
renders would lose it silently, so :func:`unrendered_field` finds such a field by rendering a
probe conversation that holds it under a unique marker (:func:`probe`; the template's own rule,
not a restatement of it) and the sample is rejected ``template_unsupported``.

These fields are rendered by the template as they are (``tojson`` for tool schemas and arguments),
outside the text parts that ``--special-tokens split`` tokenizes as plain text, so a special token
inside them (or a piece of one at an edge, which could join the template's text into one) cannot
be split: :func:`field_special_token` finds it and the sample is rejected ``special_token_in_text``
under either policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from vlmpack.records import MESSAGE_EXTRAS

#: The fields :func:`used_fields` reports, in the order they are checked.
FIELDS = ("tools", "tool_calls", "reasoning_content", "tool turns")
_MARK = "vlmpackprobe7f3a"


def used_fields(messages: Sequence[dict], tools: Sequence[dict] | None) -> list[str]:
    """The :data:`FIELDS` a conversation uses, in that order (empty for a plain conversation)."""
    used = {"tools"} if tools else set()
    for m in messages:
        if m.get("tool_calls"):
            used.add("tool_calls")
        if m.get("reasoning_content"):
            used.add("reasoning_content")
        if m["role"] == "tool":
            used.add("tool turns")
    return [f for f in FIELDS if f in used]


def probe(field: str) -> tuple[list[dict], list[dict] | None]:
    """``(messages, tools)`` of a smallest conversation that holds ``field`` under the marker
    :data:`_MARK` (a template that renders the field writes the marker)."""
    user = {"role": "user", "content": [{"type": "text", "text": "q"}]}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    call = {"type": "function", "function": {"name": _MARK if field == "tool_calls" else "f", "arguments": {}}}
    if field == "tools":
        return [user, answer], [{"type": "function", "function": {
            "name": _MARK, "description": "", "parameters": {"type": "object", "properties": {}}}}]
    if field == "tool_calls":
        return [user, {"role": "assistant", "content": [], "tool_calls": [call]}], None
    if field == "reasoning_content":
        return [user, {**answer, "reasoning_content": _MARK}], None
    return [user, {"role": "assistant", "content": [], "tool_calls": [call]},
            {"role": "tool", "content": [{"type": "text", "text": _MARK}]}, answer], None


def unrendered_field(render: Callable[[list[dict], list[dict] | None], str], fields: Sequence[str],
                     cache: dict[str, str | None]) -> tuple[str, str] | None:
    """``(field, why)`` for the first of ``fields`` that ``render`` (canonical messages, tools ->
    the template's text) never writes, else None. ``cache``: the family's answers per field
    (each probe is rendered once per family)."""
    for f in fields:
        if f not in cache:
            messages, tools = probe(f)
            try:
                cache[f] = None if _MARK in render(messages, tools) else "the template does not write it"
            except Exception as e:  # noqa: BLE001 - a template may raise anything (raise_exception on a role)
                cache[f] = f"the template raises {type(e).__name__}: {str(e)[:120]}"
        if cache[f] is not None:
            return f, cache[f]
    return None


def _strings(value: object) -> Iterator[str]:
    """Every string of a JSON value (object keys included), depth first."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _neutral(value: object) -> object:
    """``value`` with every string that is no object key replaced by ``"x"``."""
    if isinstance(value, str):
        return "x"
    if isinstance(value, dict):
        return {k: _neutral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_neutral(v) for v in value]
    return value


def field_special_token(messages: Sequence[dict], tools: Sequence[dict] | None, pattern: re.Pattern | None,
                        has_cut_edge: Callable[[str], bool],
                        render: Callable[[list[dict], list[dict] | None], str]) -> tuple[str, str] | None:
    """``(where, token)`` for the first special token (``pattern``) inside the tool schemas or a
    turn's ``reasoning_content`` / ``tool_calls`` / ``tool_call_id`` / ``name``; else, when a string
    a template may write bare (the reasoning, the ids, a call's function name and text
    ``arguments``) has an edge that ``has_cut_edge`` flags (a piece of a special token), the first
    special token that the rendering (``render``) holds and the same rendering with every such
    field's strings replaced by ``"x"`` does not (formed where the template joins a field with
    its own text; ``where`` ``"tool use or reasoning"``). None when there is none. Strings inside
    JSON values are written between quotes (``tojson``), so only their content counts."""
    if pattern is None:
        return None
    found: list[tuple[str, object]] = [("tools", tools)] if tools else []
    bare: list[str] = []
    for i, m in enumerate(messages):
        for k in MESSAGE_EXTRAS:
            if k in m:
                found.append((f"turn {i} {k}", m[k]))
                if isinstance(m[k], str):
                    bare.append(m[k])
        for call in m.get("tool_calls") or ():
            fn = call.get("function", call) if isinstance(call, dict) else {}
            bare.extend(fn[k] for k in ("name", "arguments") if isinstance(fn, dict) and isinstance(fn.get(k), str))
    for where, value in found:
        for text in _strings(value):
            hit = pattern.search(text)
            if hit:
                return where, hit.group()
    if not any(text and has_cut_edge(text) for text in bare):
        return None
    neutral = [{**m, **{k: _neutral(m[k]) for k in MESSAGE_EXTRAS if k in m}} for m in messages]
    got = [h.group() for h in pattern.finditer(render(list(messages), tools))]
    own = [h.group() for h in pattern.finditer(render(neutral, tools))]
    if got == own:
        return None
    k = next((k for k, (a, b) in enumerate(zip(got, own)) if a != b), min(len(got), len(own)))
    return "tool use or reasoning", (got[k] if k < len(got) else own[k])
