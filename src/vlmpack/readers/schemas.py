"""Record schemas -> canonical messages: pure functions, no I/O.

Three input schemas (detected per record by :func:`detect_schema`, or forced):

- ``llava``: ``image`` (str or list) / ``images`` (list) and ``video`` / ``videos`` +
  ``conversations: [{"from", "value"}]`` with ``<image>`` / ``<video>`` placeholders in the text.
- ``messages`` (OpenAI / ShareGPT): ``messages: [{"role", "content"}]``; content is a string
  (placeholders map to the top-level ``images`` / ``videos`` lists, as in ``llava``) or a list of
  parts ``{"type": "text", "text"}``, ``{"type": "image", "image"|"path"|"url": ref}``,
  ``{"type": "image_url", "image_url": {"url": ref}}`` and the same for ``video`` / ``video_url``.
- ``prompts``: ``images`` + ``prompts`` + ``captions``; ``prompts[i]`` / ``captions[i]`` are turn i's
  user / assistant text (a string, or a list of strings joined with ``"\\n"``); images go to the
  ``<image>`` placeholders, or when the record has none, before the first prompt.

The WDS-native packer's schema (Megatron-Energon ``sample_loader`` datasets: ``texts`` turns of
``role``/``content``, ``media`` or ``media_type`` = ``"text"``/``"image"``/``"video"``, the media
named by ``name`` or ``media_files``) is read as ``messages`` (:func:`normalize_native`); when its
text holds no placeholder, its media go before the first user turn's text. ``text_key`` (the
``--text-key`` option) names the key of the turns in any record (default: ``texts`` when neither
``conversations`` nor ``messages`` is present).

Both key pairs (``from``/``value`` and ``role``/``content``) are accepted in ``llava`` and
``messages`` turns. A top-level media key set to ``null`` counts as absent; a ``null`` *entry* of a
media list is ``wrong_type``.

:func:`to_canonical` also runs the **structural checks** (all of them live here, at parse time,
so that :mod:`vlmpack.pack.validate` only touches the file system): roles, the first non-system turn is
a user turn, an assistant turn exists, no empty turn, placeholders == media given. Failures raise
:class:`RecordError` with a reason code of :data:`vlmpack.records.REASONS`.
"""

from __future__ import annotations

import re

from vlmpack.errors import RecordError

SCHEMAS = ("auto", "llava", "messages", "prompts")

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
_PLACEHOLDER = re.compile(r"(<image>|<video>)")
_PLACEHOLDER_KIND = {"<image>": "image", "<video>": "video"}
_MEDIA_PART_KEYS = ("path", "url")  # keys of {"type": kind, kind|"path"|"url": ref} parts, in order
_UNSUPPORTED_PARTS = ("audio", "input_audio", "audio_url", "file", "input_file")
NATIVE_KINDS = ("text", "image", "video")
_LEADING = "__vlmpack_leading_media__"  # set by normalize_native: media before the first user turn


def normalize_native(obj: dict, text_key: str | None = None) -> dict:
    """Rewrite a record of the WDS-native packer's schema (or one whose turns sit under
    ``text_key``) into the ``messages`` schema, in place; other records are returned unchanged.

    - turns: ``obj[text_key]`` (``--text-key``), else ``obj["texts"]`` when the record has no
      ``conversations``/``messages`` key, become ``obj["messages"]``;
    - ``media`` / ``media_type`` (a string ``text``/``image``/``video``) with the names in
      ``name`` / ``media_files`` (a list or one string) become ``images`` or ``videos``; without
      names the source supplies them (a WebDataset sample's parts by extension).
    Idempotent. Raises :class:`RecordError`: ``unknown_schema`` (``text_key`` given but absent),
    ``wrong_type`` (turns under two keys, an unknown media kind, names for a ``text`` sample),
    ``media_unsupported`` (``audio``).
    """
    key = text_key if text_key else ("texts" if "texts" in obj and "conversations" not in obj
                                     and "messages" not in obj else None)
    if key is not None and key != "messages":
        if key not in obj:
            if "messages" not in obj or text_key is None:
                raise RecordError("unknown_schema", f"no {key!r} key holding the turns (--text-key {key})")
        elif "messages" in obj:
            raise RecordError("wrong_type", f"both {key!r} and 'messages' hold turns; keep one")
        else:
            obj["messages"] = obj.pop(key)
    kind = obj.get("media", obj.get("media_type"))
    if not isinstance(kind, str):
        return obj
    obj.pop("media", None)
    obj.pop("media_type", None)
    if kind in ("audio", "speech", "sound"):
        raise RecordError("media_unsupported", f"media {kind!r}: only images and videos are supported")
    if kind not in NATIVE_KINDS:
        raise RecordError("wrong_type", f"'media' must be one of {', '.join(NATIVE_KINDS)}, got {_short(kind)}")
    names = obj.pop("name") if "name" in obj else obj.pop("media_files", None)
    if isinstance(names, str):
        names = [names]
    if kind == "text":
        if names:
            raise RecordError("wrong_type", f"media 'text' but {len(names)} media name(s) given")
        obj["images"], obj["videos"] = [], []
    else:
        other = "videos" if kind == "image" else "images"
        if names is not None:
            obj[kind + "s"] = names
        obj.setdefault(other, [])
    obj[_LEADING] = True
    return obj


def detect_schema(obj: dict) -> str:
    """``"llava"`` if ``conversations`` is a key, else ``"messages"`` if ``messages`` is, else
    ``"prompts"`` if ``prompts`` or ``captions`` is; raises :class:`RecordError` (``unknown_schema``)."""
    if "conversations" in obj:
        return "llava"
    if "messages" in obj:
        return "messages"
    if "prompts" in obj or "captions" in obj:
        return "prompts"
    keys = ", ".join(sorted(str(k) for k in obj)[:8]) or "none"
    raise RecordError(
        "unknown_schema", f"no 'conversations', 'messages' or 'prompts'+'captions' key (keys: {keys})"
    )


def to_canonical(obj: dict, schema: str = "auto",
                 text_key: str | None = None) -> tuple[list[dict], list[tuple[str, object]]]:
    """Convert a JSON object of one record to canonical messages and its media references.

    Returns ``(messages, media)``: ``messages`` as documented in :mod:`vlmpack.records`
    (``{"type": "image"|"video", "index": i}`` parts index ``media`` in order of appearance),
    ``media`` a list of ``(kind, ref)`` with ``ref`` as written in the record (not yet resolved).
    Raises :class:`RecordError` for any schema or structural failure; ``ValueError`` for an unknown
    ``schema`` name.
    """
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    obj = normalize_native(obj, text_key)
    leading = bool(obj.pop(_LEADING, False))
    if schema == "auto":
        schema = detect_schema(obj)
    builder = _Builder(_top_level_media(obj))
    if schema == "prompts":
        if "prompts" not in obj and "captions" not in obj:
            raise RecordError(
                "unknown_schema", "schema 'prompts' forced but the record has no 'prompts'/'captions' key"
            )
        _prompts_turns(obj, builder)
    else:
        key = "conversations" if schema == "llava" else "messages"
        if key not in obj:
            raise RecordError("unknown_schema", f"schema {schema!r} forced but the record has no {key!r} key")
        _chat_turns(obj[key], key, builder, leading=leading)
    builder.finish()
    return builder.messages, builder.media


class _Builder:
    """Accumulates canonical turns; hands out media indices in order of appearance."""

    def __init__(self, pending: dict[str, list[object]]) -> None:
        self.pending = pending  # top-level media per kind, consumed by placeholders in order
        self.used = {"image": 0, "video": 0}
        self.media: list[tuple[str, object]] = []
        self.messages: list[dict] = []

    def add_media(self, kind: str, ref: object) -> dict:
        self.media.append((kind, ref))
        return {"type": kind, "index": len(self.media) - 1}

    def add_all_pending(self, content: list[dict]) -> None:
        """Append every top-level media item (images, then videos) that no placeholder consumed."""
        for kind in ("image", "video"):
            for ref in self.pending[kind][self.used[kind]:]:
                content.append(self.add_media(kind, ref))
            self.used[kind] = len(self.pending[kind])

    def add_text(self, content: list[dict], text: str) -> None:
        """Append ``text`` split at placeholders (each consuming the next top-level media item)."""
        if "<" not in text:
            if text:
                content.append({"type": "text", "text": text})
            return
        for piece in _PLACEHOLDER.split(text):
            kind = _PLACEHOLDER_KIND.get(piece)
            if kind is None:
                if piece:
                    content.append({"type": "text", "text": piece})
                continue
            i = self.used[kind]
            self.used[kind] += 1
            refs = self.pending[kind]
            content.append(self.add_media(kind, refs[i] if i < len(refs) else None))

    def add_turn(self, role: str, content: list[dict], where: str) -> None:
        if not content:
            raise RecordError("empty_turn", f"{where} ({role}) has neither text nor media")
        self.messages.append({"role": role, "content": content})

    def finish(self) -> None:
        for kind in ("image", "video"):
            given, used = len(self.pending[kind]), self.used[kind]
            if given != used:
                raise RecordError(
                    "placeholder_mismatch",
                    f"{used} <{kind}> placeholder(s) in the text but {given} {kind}(s) given",
                )
        if not self.messages:
            raise RecordError("empty_conversation", "the conversation has no turns")
        first = next((m["role"] for m in self.messages if m["role"] != "system"), None)
        if first is None:
            raise RecordError("no_assistant_turn", "the conversation has only system turns")
        if first != "user":
            raise RecordError("bad_turn_order", f"the first non-system turn is {first!r}, not 'user'")
        if not any(m["role"] == "assistant" for m in self.messages):
            raise RecordError("no_assistant_turn", "the conversation has no assistant turn")


def _top_level_media(obj: dict) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for kind in ("image", "video"):
        single, many = obj.get(kind), obj.get(kind + "s")
        if single is not None and many is not None:
            raise RecordError("wrong_type", f"both {kind!r} and {kind + 's'!r} are given; use one")
        refs: list[object]
        if many is not None:
            if not isinstance(many, list):
                raise RecordError("wrong_type", f"{kind + 's'!r} must be a list, got {type(many).__name__}")
            refs = many
        elif single is not None:
            refs = single if isinstance(single, list) else [single]
        else:
            refs = []
        for i, ref in enumerate(refs):
            if not isinstance(ref, str) or not ref:
                name = kind + "s" if many is not None else kind
                raise RecordError("wrong_type", f"{name}[{i}] must be a non-empty string, got {_short(ref)}")
        out[kind] = refs
    return out


def _chat_turns(turns: object, key: str, builder: _Builder, leading: bool = False) -> None:
    if not isinstance(turns, list):
        raise RecordError("wrong_type", f"{key!r} must be a list of turns, got {type(turns).__name__}")
    if not turns:
        raise RecordError("empty_conversation", f"{key!r} is an empty list")
    role_key, text_key = ("from", "value") if key == "conversations" else ("role", "content")
    alt_role, alt_text = ("role", "content") if key == "conversations" else ("from", "value")
    # the native schema names its media apart from the text: with no placeholder and no media
    # part anywhere, the media go first in the first user turn (as in the prompts schema)
    leading = leading and not _PLACEHOLDER.search(repr(turns)) and "'type': 'image" not in repr(turns) \
        and "'type': 'video" not in repr(turns)
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            raise RecordError("wrong_type", f"{where} must be an object, got {type(turn).__name__}")
        raw_role = turn.get(role_key, turn.get(alt_role))
        if not isinstance(raw_role, str):
            raise RecordError("wrong_type", f"{where} has no string {role_key!r} (got {_short(raw_role)})")
        role = _ROLES.get(raw_role.lower())
        if role is None:
            raise RecordError(
                "unknown_role", f"{where} role {_short(raw_role)} is not system/user/assistant (or human/gpt)"
            )
        value = turn[text_key] if text_key in turn else turn.get(alt_text)
        content: list[dict] = []
        if leading and role == "user":
            leading = False
            builder.add_all_pending(content)
        if isinstance(value, str):
            builder.add_text(content, value)
        elif isinstance(value, list):
            for j, part in enumerate(value):
                _content_part(part, f"{where}.{text_key}[{j}]", content, builder)
        else:
            raise RecordError(
                "wrong_type", f"{where} {text_key!r} must be a string or a list of parts, got {_short(value)}"
            )
        builder.add_turn(role, content, where)


def _content_part(part: object, where: str, content: list[dict], builder: _Builder) -> None:
    if isinstance(part, str):  # a bare string part: some exports write ["text", ...]
        builder.add_text(content, part)
        return
    if not isinstance(part, dict):
        raise RecordError("wrong_type", f"{where} must be an object, got {type(part).__name__}")
    ptype = part.get("type")
    if ptype == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise RecordError("wrong_type", f"{where} text part needs a string 'text', got {_short(text)}")
        builder.add_text(content, text)
    elif ptype in ("image", "video"):
        ref = next((part[k] for k in (ptype, *_MEDIA_PART_KEYS) if part.get(k) is not None), None)
        content.append(builder.add_media(ptype, _media_ref(ref, ptype, where)))
    elif ptype in ("image_url", "video_url"):
        kind = ptype[:-4]
        spec = part.get(ptype)
        ref = spec.get("url") if isinstance(spec, dict) else spec
        content.append(builder.add_media(kind, _media_ref(ref, kind, where)))
    elif ptype in _UNSUPPORTED_PARTS:
        raise RecordError(
            "media_unsupported", f"{where} has a {ptype!r} part; only images and videos are supported"
        )
    else:
        raise RecordError("wrong_type", f"{where} has unknown part type {_short(ptype)}")


def _media_ref(ref: object, kind: str, where: str) -> str:
    if isinstance(ref, list) and kind == "video":
        raise RecordError("media_unsupported", f"{where}: a video given as a list of frames is not supported")
    if not isinstance(ref, str) or not ref:
        raise RecordError(
            "wrong_type", f"{where} {kind} part needs a non-empty path/url string, got {_short(ref)}"
        )
    return ref


def _prompts_turns(obj: dict, builder: _Builder) -> None:
    prompts, captions = obj.get("prompts"), obj.get("captions")
    for name, value in (("prompts", prompts), ("captions", captions)):
        if not isinstance(value, list):
            raise RecordError("wrong_type", f"{name!r} must be a list, got {_short(value)}")
    if len(prompts) != len(captions):
        raise RecordError("wrong_type", f"{len(prompts)} prompts but {len(captions)} captions")
    if not prompts:
        raise RecordError("empty_conversation", "'prompts' and 'captions' are empty lists")
    texts = [
        [_joined(p, f"prompts[{i}]"), _joined(c, f"captions[{i}]")]
        for i, (p, c) in enumerate(zip(prompts, captions, strict=False))
    ]
    leading = not any(_PLACEHOLDER.search(t) for pair in texts for t in pair)
    for i, (prompt, caption) in enumerate(texts):
        content: list[dict] = []
        if i == 0 and leading:
            builder.add_all_pending(content)
        builder.add_text(content, prompt)
        builder.add_turn("user", content, f"prompts[{i}]")
        content = []
        builder.add_text(content, caption)
        builder.add_turn("assistant", content, f"captions[{i}]")


def _joined(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise RecordError("wrong_type", f"{where} must be a string or a list of strings, got {_short(value)}")


def _short(value: object, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
