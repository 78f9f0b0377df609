"""The OpenAI / ShareGPT ``messages`` layout: ``messages: [{"role", "content"}]``; content is a
string (its ``<image>`` / ``<video>`` placeholders take the top-level ``images`` / ``videos``, as
in :mod:`~vlmpack.layouts.llava`) or a list of parts ``{"type": "text", "text"}``,
``{"type": "image", "image"|"path"|"url": ref}``, ``{"type": "image", "base64": data}``,
``{"type": "image_url", "image_url": {"url": ref}}`` and the same for ``video`` / ``video_url``
(:func:`vlmpack.layouts.chat.chat_turns`); a bare ``{"type": "image"}`` part takes the next entry
of the top-level ``images`` list (the Hugging Face / TRL layout: a path or a ``datasets`` ``Image``
struct).
``from`` / ``value`` turns are accepted too. Source of the layout: the OpenAI chat-completions
message format and the Hugging Face chat-template ``messages``.

Example: ``{"messages": [{"role": "user", "content": [{"type": "image", "image": "a.jpg"},
{"type": "text", "text": "What?"}]}, {"role": "assistant", "content": "A cat."}]}``.
"""

from __future__ import annotations

from vlmpack.layouts.chat import ChatLayout


class MessagesLayout(ChatLayout):
    """The ``messages`` layout (module docstring)."""

    def __init__(self) -> None:
        super().__init__("messages", "messages", ("role", "content"), ("from", "value"))
