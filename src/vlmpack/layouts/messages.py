"""The OpenAI / ShareGPT ``messages`` layout: ``messages: [{"role", "content"}]``; content is a
string (its ``<image>`` / ``<video>`` placeholders take the top-level ``images`` / ``videos``, as
in :mod:`~vlmpack.layouts.llava`) or a list of parts ``{"type": "text", "text"}``,
``{"type": "image", "image"|"path"|"url": ref}``, ``{"type": "image_url", "image_url": {"url": ref}}``
and the same for ``video`` / ``video_url`` (:func:`vlmpack.layouts.chat.chat_turns`).
``from`` / ``value`` turns are accepted too. Source of the layout: the OpenAI chat-completions
message format and the Hugging Face chat-template ``messages``.

Example: ``{"messages": [{"role": "user", "content": [{"type": "image", "image": "a.jpg"},
{"type": "text", "text": "What?"}]}, {"role": "assistant", "content": "A cat."}]}``.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical
from vlmpack.layouts.builder import Builder, top_level_media
from vlmpack.layouts.chat import chat_turns

KEY = "messages"


class MessagesLayout:
    name = "messages"
    keys = f"{KEY!r}"

    @staticmethod
    def detect(obj: dict) -> bool:
        return KEY in obj

    @staticmethod
    def to_canonical(obj: dict, *, leading: bool = False) -> Canonical:
        builder = Builder(top_level_media(obj))
        if KEY not in obj:
            raise RecordError("unknown_schema", f"schema 'messages' forced but the record has no {KEY!r} key")
        chat_turns(obj[KEY], KEY, builder, ("role", "content"), ("from", "value"), leading=leading)
        return builder.finish()
