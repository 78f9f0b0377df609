"""The ``prompts`` / ``captions`` layout: ``images`` + ``prompts`` + ``captions``; ``prompts[i]`` /
``captions[i]`` are turn i's user / assistant text (a string, or a list of strings joined with
``"\\n"``); the images go to the ``<image>`` placeholders, or when the record has none, before the
first prompt.

Example: ``{"images": ["a.jpg"], "prompts": ["What?"], "captions": ["A cat."]}``.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical, short
from vlmpack.layouts.builder import PLACEHOLDER, Builder, top_level_media


class PromptsLayout:
    name = "prompts"
    keys = "'prompts'+'captions'"

    @staticmethod
    def detect(obj: dict) -> bool:
        return "prompts" in obj or "captions" in obj

    @staticmethod
    def to_canonical(obj: dict, *, leading: bool = False) -> Canonical:
        """``leading`` is not needed: this layout always puts unplaced images first."""
        builder = Builder(top_level_media(obj))
        if "prompts" not in obj and "captions" not in obj:
            raise RecordError(
                "unknown_schema", "schema 'prompts' forced but the record has no 'prompts'/'captions' key"
            )
        prompts, captions = obj.get("prompts"), obj.get("captions")
        for name, value in (("prompts", prompts), ("captions", captions)):
            if not isinstance(value, list):
                raise RecordError("wrong_type", f"{name!r} must be a list, got {short(value)}")
        if len(prompts) != len(captions):
            raise RecordError("wrong_type", f"{len(prompts)} prompts but {len(captions)} captions")
        if not prompts:
            raise RecordError("empty_conversation", "'prompts' and 'captions' are empty lists")
        texts = [
            [_joined(p, f"prompts[{i}]"), _joined(c, f"captions[{i}]")]
            for i, (p, c) in enumerate(zip(prompts, captions, strict=False))
        ]
        first = not any(PLACEHOLDER.search(t) for pair in texts for t in pair)
        for i, (prompt, caption) in enumerate(texts):
            content: list[dict] = []
            if i == 0 and first:
                builder.add_all_pending(content)
            builder.add_text(content, prompt)
            builder.add_turn("user", content, f"prompts[{i}]")
            content = []
            builder.add_text(content, caption)
            builder.add_turn("assistant", content, f"captions[{i}]")
        return builder.finish()


def _joined(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise RecordError("wrong_type", f"{where} must be a string or a list of strings, got {short(value)}")
