"""The LLaMA-Factory ``alpaca`` layout: ``instruction`` + ``input`` + ``output`` (+ ``system``,
``history``, ``images`` / ``videos``).

The turns are those of LLaMA-Factory's ``AlpacaDatasetConverter`` (``src/llamafactory/data/
converter.py``): each ``history`` pair ``[prompt, response]`` a user and an assistant turn (the
responses are trained on too), then one user turn holding the non-empty ones of ``instruction`` and
``input`` joined with ``"\\n"``, then ``output`` as the assistant turn; ``system``, when given and
not empty, is a system turn first. ``<image>`` / ``<video>`` placeholders in these texts take the
top-level ``images`` / ``videos`` in order (their numbers must match: ``placeholder_mismatch``, as
LLaMA-Factory's multimodal plugin checks). Rows of its preference (``chosen`` / ``rejected``), KTO
or pre-training (``text``) forms are no SFT sample: a row without a string ``output`` is
``wrong_type``.

Example: ``{"instruction": "<image>What is it?", "input": "", "output": "A cat.", "images": ["a.jpg"]}``.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import Canonical, short
from vlmpack.layouts.builder import Builder, top_level_media


def _text(obj: dict, key: str, *, required: bool = False) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise RecordError("wrong_type", f"{key!r} must be a string, got {short(value)}")
    return value


class AlpacaLayout:
    """The ``alpaca`` layout (module docstring)."""

    name = "alpaca"
    keys = "'instruction'+'output'"

    @staticmethod
    def detect(obj: dict) -> bool:
        """True when the record has ``instruction`` and ``output``."""
        return "instruction" in obj and "output" in obj

    @staticmethod
    def to_canonical(obj: dict, *, leading: bool = False) -> Canonical:  # noqa: ARG004
        """The canonical messages and media references; :class:`RecordError` with a reason code."""
        if "instruction" not in obj:
            raise RecordError("unknown_schema", "schema 'alpaca' forced but the record has no 'instruction' key")
        builder = Builder(top_level_media(obj))
        turns: list[tuple[str, str, str]] = []
        if system := _text(obj, "system"):
            turns.append(("system", system, "system"))
        history = obj.get("history")
        if history is not None:
            if not isinstance(history, list):
                raise RecordError("wrong_type", f"'history' must be a list of [prompt, response], got {short(history)}")
            for i, pair in enumerate(history):
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                    raise RecordError("wrong_type",
                                      f"history[{i}] must be [prompt, response] strings, got {short(pair)}")
                turns += [("user", pair[0], f"history[{i}][0]"), ("assistant", pair[1], f"history[{i}][1]")]
        query = "\n".join(x for x in (_text(obj, "instruction"), _text(obj, "input")) if x)
        turns += [("user", query, "instruction"), ("assistant", _text(obj, "output", required=True), "output")]
        for role, text, where in turns:
            content: list[dict] = []
            builder.add_text(content, text)
            builder.add_turn(role, content, where)
        return builder.finish()
