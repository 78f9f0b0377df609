"""The LLaVA layout: ``conversations: [{"from", "value"}]`` with ``<image>`` / ``<video>``
placeholders in the text, the media in ``image`` (a string or a list) / ``images`` and ``video`` /
``videos`` (:func:`vlmpack.layouts.builder.top_level_media`). ``role`` / ``content`` turns and
content-part lists are accepted too (:func:`vlmpack.layouts.chat.chat_turns`). Source of the
layout: LLaVA's ``llava_v1_5_mix665k.json`` and LLaVA-OneVision's data format.

Example: ``{"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>\\nWhat?"},
{"from": "gpt", "value": "A cat."}]}``.
"""

from __future__ import annotations

from vlmpack.layouts.chat import ChatLayout


class LlavaLayout(ChatLayout):
    """The ``llava`` layout (module docstring)."""

    def __init__(self) -> None:
        super().__init__("llava", "conversations", ("from", "value"), ("role", "content"))
