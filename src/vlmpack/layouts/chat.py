"""The turn walker shared by the chat layouts (:mod:`~vlmpack.layouts.llava`,
:mod:`~vlmpack.layouts.messages`): a list of ``{role, text}`` turns whose text is a string (with
``<image>`` / ``<video>`` placeholders) or a list of content parts.

Roles: ``system``, ``user`` / ``human``, ``assistant`` / ``gpt``, ``tool`` / ``observation`` /
``function`` (a tool's result) and LLaMA-Factory's ``function_call`` (an assistant's tool call as
JSON text), any case; assistant ``tool_calls`` / reasoning and tool ``tool_call_id`` / ``name``
are read by :mod:`vlmpack.layouts.tools`. Parts: a bare string,
``{"type": "text", "text"}``, ``{"type": "image", "image"|"path"|"url": ref}`` or
``{"type": "image", "base64": data}`` (the keys transformers' ``apply_chat_template`` loads an
image from, ``transformers.processing_utils``), ``{"type": "image"}`` alone (a placeholder for the
next top-level ``images`` entry: the Hugging Face / TRL layout, e.g. HuggingFaceH4/llava-instruct-mix-vsft),
``{"type": "image_url", "image_url": {"url": ref}}`` (or the url string) and the same for every
media kind of the registry (``records.MEDIA_KINDS``): ``video`` / ``video_url``, ``audio`` /
``audio_url`` (vLLM's form); OpenAI's ``{"type": "input_audio", "input_audio": {"data": base64,
"format": "wav"}}`` is an audio item of those bytes (a ``data:`` reference); file parts are
``media_unsupported``.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical, short
from vlmpack.layouts.builder import PLACEHOLDER, Builder, top_level_media
from vlmpack.layouts.tools import EXTRA_KEYS, tool_calls_from_text, turn_extras
from vlmpack.records import MEDIA_KINDS

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "tool": "tool", "observation": "tool", "function": "tool", "function_call": "assistant"}
_MEDIA_PART_KEYS = ("path", "url")  # keys of {"type": kind, kind|"path"|"url": ref} parts, in order
_URL_PARTS = {f"{kind}_url": kind for kind in MEDIA_KINDS}  # {"type": "image_url", "image_url": {"url": ref}}
_UNSUPPORTED_PARTS = ("file", "input_file")


def chat_turns(turns: object, key: str, builder: Builder, names: tuple[str, str], alt_names: tuple[str, str],
               leading: bool = False) -> None:
    """Add the turns of ``obj[key]`` to ``builder``. ``names``: the ``(role, text)`` keys of a
    turn; ``alt_names``: the other pair, also accepted. ``leading``: with no placeholder and no
    media part anywhere, the pending media go first in the first user turn (see
    :meth:`vlmpack.layouts.base.Layout.to_canonical`). Raises :class:`RecordError`."""
    if not isinstance(turns, list):
        raise RecordError("wrong_type", f"{key!r} must be a list of turns, got {type(turns).__name__}")
    if not turns:
        raise RecordError("empty_conversation", f"{key!r} is an empty list")
    role_key, text_key = names
    alt_role, alt_text = alt_names
    if leading:
        text = repr(turns)
        leading = not PLACEHOLDER.search(text) and not any(f"'type': '{k}" in text for k in MEDIA_KINDS)
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RecordError("wrong_type", f"{key}[{i}] must be an object, got {type(turn).__name__}")
        raw_role = turn[role_key] if role_key in turn else turn.get(alt_role)
        if not isinstance(raw_role, str):
            raise RecordError("wrong_type", f"{key}[{i}] has no string {role_key!r} (got {short(raw_role)})")
        name = raw_role if raw_role in ROLES else raw_role.lower()
        role = ROLES.get(name)
        if role is None:
            raise RecordError(
                "unknown_role", f"{key}[{i}] role {short(raw_role)} is not system/user/assistant/tool (or human/gpt)"
            )
        value = turn[text_key] if text_key in turn else turn.get(alt_text)
        content: list[dict] = []
        extras = {} if turn.keys().isdisjoint(EXTRA_KEYS) else turn_extras(turn, role, f"{key}[{i}]")
        if leading and role == "user":
            leading = False
            builder.add_all_pending(content)
        if name == "function_call":  # LLaMA-Factory: the value is the call itself
            extras["tool_calls"] = tool_calls_from_text(value, f"{key}[{i}]")
        elif isinstance(value, str):
            builder.add_text(content, value)
        elif value is None and role == "assistant" and extras:  # OpenAI: content null beside tool_calls
            pass
        elif isinstance(value, list):
            for j, part in enumerate(value):
                _content_part(part, f"{key}[{i}].{text_key}[{j}]", content, builder)
        else:
            raise RecordError(
                "wrong_type", f"{key}[{i}] {text_key!r} must be a string or a list of parts, got {short(value)}"
            )
        builder.add_turn(role, content, key, extras, i)


def _content_part(part: object, where: str, content: list[dict], builder: Builder) -> None:
    if isinstance(part, str):  # a bare string part: some exports write ["text", ...]
        builder.add_text(content, part)
        return
    if not isinstance(part, dict):
        raise RecordError("wrong_type", f"{where} must be an object, got {type(part).__name__}")
    ptype = part.get("type")
    if ptype == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise RecordError("wrong_type", f"{where} text part needs a string 'text', got {short(text)}")
        builder.add_text(content, text)
    elif ptype in MEDIA_KINDS:
        ref = next((part[k] for k in (ptype, *_MEDIA_PART_KEYS) if part.get(k) is not None), None)
        if ref is None and isinstance(part.get("base64"), str):
            ref = f"data:;base64,{part['base64']}" if part["base64"] else ""
        if ref is None:  # {"type": "image"}: a placeholder for the next top-level item (HF / TRL)
            content.append(builder.take(ptype))
        else:
            content.append(builder.add_media(ptype, _media_ref(ref, ptype, where)))
    elif ptype in _URL_PARTS:
        kind = _URL_PARTS[ptype]
        spec = part.get(ptype)
        ref = spec.get("url") if isinstance(spec, dict) else spec
        content.append(builder.add_media(kind, _media_ref(ref, kind, where)))
    elif ptype == "input_audio":  # OpenAI: the bytes inline, base64
        spec = part.get("input_audio")
        data = spec.get("data") if isinstance(spec, dict) else None
        if not isinstance(data, str) or not data:
            raise RecordError("wrong_type", f"{where} input_audio part needs 'input_audio': {{'data': base64 str}}, "
                              f"got {short(spec)}")
        content.append(builder.add_media("audio", f"data:;base64,{data}"))
    elif ptype in _UNSUPPORTED_PARTS:
        raise RecordError(
            "media_unsupported", f"{where} has a {ptype!r} part; only {', '.join(MEDIA_KINDS)} media are supported"
        )
    else:
        raise RecordError("wrong_type", f"{where} has unknown part type {short(ptype)}")


def _media_ref(ref: object, kind: str, where: str) -> str:
    if isinstance(ref, list) and kind == "video":
        raise RecordError("media_unsupported", f"{where}: a video given as a list of frames is not supported")
    if not isinstance(ref, str) or not ref:
        raise RecordError(
            "wrong_type", f"{where} {kind} part needs a non-empty path/url string, got {short(ref)}"
        )
    return ref


class ChatLayout:
    """A layout whose record holds a list of chat turns under one ``key`` (a
    :class:`vlmpack.layouts.base.Layout`): turns are read by :func:`chat_turns` with ``names``
    (the layout's own role/text keys) first and ``alt_names`` accepted too; media from the
    top-level lists (:func:`vlmpack.layouts.builder.top_level_media`). A top-level ``system``
    string (LLaMA-Factory's ``system`` column) is the system turn unless the turns start with
    one (a system turn in the turns wins, as in LLaMA-Factory's ``SharegptDatasetConverter``)."""

    def __init__(self, name: str, key: str, names: tuple[str, str], alt_names: tuple[str, str]):
        self.name, self.key, self.names, self.alt_names = name, key, names, alt_names
        self.keys = f"{key!r}"

    def detect(self, obj: dict) -> bool:
        """True when the record has the layout's key."""
        return self.key in obj

    def to_canonical(self, obj: dict, *, leading: bool = False) -> Canonical:
        """The canonical messages and media references; :class:`RecordError` with a reason code."""
        builder = Builder(top_level_media(obj))
        if self.key not in obj:
            raise RecordError("unknown_schema",
                              f"schema {self.name!r} forced but the record has no {self.key!r} key")
        system = obj.get("system")
        if system is not None and not isinstance(system, str):
            raise RecordError("wrong_type", f"'system' must be a string, got {short(system)}")
        chat_turns(obj[self.key], self.key, builder, self.names, self.alt_names, leading=leading)
        if system and (not builder.messages or builder.messages[0]["role"] != "system"):  # plain text: no media
            builder.messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
        return builder.finish()
