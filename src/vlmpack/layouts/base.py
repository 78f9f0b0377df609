"""The ``Layout`` protocol: what one record-layout module provides (see :mod:`vlmpack.layouts`).

A record layout is the shape of one input record's JSON object (LLaVA ``conversations``, OpenAI
``messages``, ``prompts`` + ``captions``, ...). It says whether an object is in its shape
(:meth:`Layout.detect`) and converts one to the canonical sample (:meth:`Layout.to_canonical`):
canonical messages (:mod:`vlmpack.records`) and the media references in order of appearance.
Layouts are pure functions of the object (no I/O); media references stay as written in the record
(the source resolves them). Failures raise :class:`~vlmpack.errors.RecordError` with a reason
code of :data:`vlmpack.records.REASONS`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

#: ``(messages, media)``: canonical messages, whose ``{"type": "image"|"video", "index": i}`` parts
#: index ``media``, a list of ``(kind, ref)`` with ``ref`` as written in the record.
Canonical = tuple[list[dict], list[tuple[str, object]]]


@runtime_checkable
class Layout(Protocol):
    """One record layout. Implementations are stateless."""

    #: the layout's name: the registry key and the value of ``--schema``
    name: str
    #: the key(s) that identify it, as the ``unknown_schema`` message lists them (``"'conversations'"``)
    keys: str

    def detect(self, obj: dict) -> bool:
        """True when the JSON object ``obj`` is in this layout (by its keys; cheap, never raises).
        Detection tries the layouts in registry order; the first that says True converts."""

    def to_canonical(self, obj: dict, *, leading: bool = False) -> Canonical:
        """``obj`` as canonical messages and its media references, after the structural checks of
        :class:`vlmpack.layouts.builder.Builder`. ``leading``: the record names its media apart
        from the text (the WDS-native schema, :func:`vlmpack.layouts.native.normalize_native`), so
        with no placeholder they go before the first user turn's text. Raises
        :class:`~vlmpack.errors.RecordError` (``unknown_schema`` when the layout was forced on an
        object without its key)."""


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (for error details)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
