"""The LLaVA layout: ``conversations: [{"from", "value"}]`` with ``<image>`` / ``<video>``
placeholders in the text, the media in ``image`` (a string or a list) / ``images`` and ``video`` /
``videos`` (:func:`vlmpack.layouts.builder.top_level_media`). ``role`` / ``content`` turns and
content-part lists are accepted too (:func:`vlmpack.layouts.chat.chat_turns`). Source of the
layout: LLaVA's ``llava_v1_5_mix665k.json`` and LLaVA-OneVision's data format.

Example: ``{"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>\\nWhat?"},
{"from": "gpt", "value": "A cat."}]}``.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical
from vlmpack.layouts.builder import Builder, top_level_media
from vlmpack.layouts.chat import chat_turns

KEY = "conversations"


class LlavaLayout:
    name = "llava"
    keys = f"{KEY!r}"

    @staticmethod
    def detect(obj: dict) -> bool:
        return KEY in obj

    @staticmethod
    def to_canonical(obj: dict, *, leading: bool = False) -> Canonical:
        builder = Builder(top_level_media(obj))
        if KEY not in obj:
            raise RecordError("unknown_schema", f"schema 'llava' forced but the record has no {KEY!r} key")
        chat_turns(obj[KEY], KEY, builder, ("from", "value"), ("role", "content"), leading=leading)
        return builder.finish()
