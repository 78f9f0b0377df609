"""What every layout shares: the top-level media lists, the canonical-message builder and the
structural checks (all of them live here, at parse time, so that :mod:`vlmpack.pack.validate`
only touches the file system).

Top-level media, per media kind of the registry (``records.MEDIA_KINDS``): ``image`` (a string or a
list) / ``images`` (a list), ``video`` / ``videos`` and ``audio`` / ``audios`` (LLaMA-Factory's
column), each entry a reference or a Hugging Face ``Image`` struct (:func:`top_level_media`);
``<image>`` / ``<video>`` / ``<audio>`` placeholders in the text and ``{"type": "image"}`` /
``{"type": "video"}`` / ``{"type": "audio"}`` parts that carry no media (the Hugging Face / TRL
chat-template layout) consume them in order. A key set to
``null`` counts as absent; a ``null`` *entry* of a list is ``wrong_type``.

Structural checks (:meth:`Builder.finish`): no empty turn, placeholders == media given, at least
one turn, the first non-system turn is a user turn, an assistant turn exists.
"""

from __future__ import annotations

import re

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical, short
from vlmpack.records import MEDIA_KINDS

#: ``<kind>`` of each media kind (``<image>``, ``<video>``, ``<audio>``: LLaMA-Factory's placeholders).
_PLACEHOLDER_KIND = {f"<{kind}>": kind for kind in MEDIA_KINDS}
PLACEHOLDER = re.compile("(" + "|".join(map(re.escape, _PLACEHOLDER_KIND)) + ")")


class Builder:
    """Accumulates canonical turns; hands out media indices in order of appearance.

    ``pending``: the top-level media per kind (:func:`top_level_media`), consumed by placeholders
    in order."""

    def __init__(self, pending: dict[str, list[object]]) -> None:
        self.pending = pending
        self.used = dict.fromkeys(MEDIA_KINDS, 0)
        self.media: list[tuple[str, object]] = []
        self.messages: list[dict] = []

    def add_media(self, kind: str, ref: object) -> dict:
        self.media.append((kind, ref))
        return {"type": kind, "index": len(self.media) - 1}

    def add_all_pending(self, content: list[dict]) -> None:
        """Append every top-level media item (images, then videos, then audios: the registry's order)
        that no placeholder consumed."""
        for kind in MEDIA_KINDS:
            for ref in self.pending[kind][self.used[kind]:]:
                content.append(self.add_media(kind, ref))
            self.used[kind] = len(self.pending[kind])

    def take(self, kind: str) -> dict:
        """The next top-level media item of ``kind`` as a content part (a placeholder: ``<image>`` in
        the text or a ``{"type": "image"}`` part); past the last one its reference is None and
        :meth:`finish` says ``placeholder_mismatch``."""
        i = self.used[kind]
        self.used[kind] += 1
        refs = self.pending[kind]
        return self.add_media(kind, refs[i] if i < len(refs) else None)

    def add_text(self, content: list[dict], text: str) -> None:
        """Append ``text`` split at placeholders (each consuming the next top-level media item)."""
        if "<" not in text:
            if text:
                content.append({"type": "text", "text": text})
            return
        for piece in PLACEHOLDER.split(text):
            kind = _PLACEHOLDER_KIND.get(piece)
            if kind is None:
                if piece:
                    content.append({"type": "text", "text": piece})
                continue
            content.append(self.take(kind))

    def add_turn(self, role: str, content: list[dict], where: str, extras: dict | None = None,
                 index: int | None = None) -> None:
        """Append one canonical turn; ``extras``: its fields beside the content
        (:data:`vlmpack.records.MESSAGE_EXTRAS`). An assistant turn may have no content when it
        calls a tool or reasons; any other empty turn is ``empty_turn``. ``where`` names the turn in
        that error (with ``index``: ``where[index]``)."""
        if not content and not (extras and ("tool_calls" in extras or "reasoning_content" in extras)):
            where = where if index is None else f"{where}[{index}]"
            raise RecordError("empty_turn", f"{where} ({role}) has neither text nor media")
        self.messages.append({"role": role, "content": content, **(extras or {})})

    def finish(self) -> Canonical:
        """Run the structural checks; ``(messages, media)``. Raises :class:`RecordError`
        (``placeholder_mismatch``, ``empty_conversation``, ``no_assistant_turn``, ``bad_turn_order``)."""
        for kind in MEDIA_KINDS:
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
        return self.messages, self.media


def top_level_media(obj: dict) -> dict[str, list[object]]:
    """The record's top-level media per kind (``{"image": [...], "video": [...], "audio": [...]}``). An entry is a
    reference string or a Hugging Face ``datasets`` ``Image`` / ``Video`` struct as JSON writes it:
    ``{"path": str}`` (the file), or ``{"bytes": base64 str}`` (the bytes, as a ``data:`` URI;
    ``bytes`` wins when both are set, as in ``datasets.features.Image.decode_example``). Raises
    :class:`RecordError` (``wrong_type``: both ``image`` and ``images``, ``images`` not a list, an
    entry that is none of these)."""
    out: dict[str, list[object]] = {}
    for kind in MEDIA_KINDS:
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
        name = kind + "s" if many is not None else kind
        out[kind] = [_entry(ref, f"{name}[{i}]") for i, ref in enumerate(refs)]
    return out


def _entry(ref: object, where: str) -> str:
    """One top-level media entry as a reference string (:func:`top_level_media`)."""
    if isinstance(ref, dict):
        if isinstance(ref.get("bytes"), str) and ref["bytes"]:
            return f"data:;base64,{ref['bytes']}"
        if ref.get("bytes") is None and isinstance(ref.get("path"), str) and ref["path"]:
            return ref["path"]
    if not isinstance(ref, str) or not ref:
        raise RecordError("wrong_type", f"{where} must be a non-empty string or an Image struct with bytes or a "
                          f"path, got {short(ref)}")
    return ref
