"""Record layouts: one module per layout of an input record's JSON object, and the registry.

A layout (:class:`vlmpack.layouts.base.Layout`) detects its shape and converts a record to the
canonical sample: canonical messages (:mod:`vlmpack.records`) and its media references, after the
structural checks of :class:`vlmpack.layouts.builder.Builder`. Pure functions, no I/O; every
source (JSONL, WebDataset, Parquet) and the online task encoder read records through
:func:`to_canonical`.

Layouts (:data:`LAYOUTS`, in detection order; ``--schema`` forces one):

- ``llava`` (:mod:`~vlmpack.layouts.llava`): ``conversations: [{"from", "value"}]`` + ``image(s)``
  / ``video(s)`` named by ``<image>`` / ``<video>`` placeholders;
- ``messages`` (:mod:`~vlmpack.layouts.messages`): ``messages: [{"role", "content"}]``, content a
  string with placeholders or a list of text / image / video parts;
- ``alpaca`` (:mod:`~vlmpack.layouts.alpaca`): LLaMA-Factory's ``instruction`` + ``input`` +
  ``output`` (+ ``system``, ``history``);
- ``prompts`` (:mod:`~vlmpack.layouts.prompts`): ``images`` + ``prompts`` + ``captions``.

Tool use and reasoning (``tools``, ``tool_calls``, ``reasoning_content``, ``tool`` turns) are read by
:mod:`~vlmpack.layouts.tools` in every chat layout; the record's ``tools`` list by
:func:`~vlmpack.layouts.tools.record_tools` (after :func:`to_canonical`, on the rewritten object).

Before detection every record goes through :func:`~vlmpack.layouts.native.normalize_native`,
which rewrites the WDS-native packer's ``texts`` + ``media`` + ``name`` schema (and turns under
``--text-key``) into ``messages``.

Adding a layout: write ``vlmpack/layouts/<name>.py`` with a class that satisfies
:class:`~vlmpack.layouts.base.Layout` and add one line to :data:`LAYOUTS` where its detection
must run (CONTRIBUTING.md).
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.alpaca import AlpacaLayout
from vlmpack.layouts.base import Canonical, Layout
from vlmpack.layouts.chat import ChatLayout
from vlmpack.layouts.llava import LlavaLayout
from vlmpack.layouts.mapping import RecordMap, apply_map
from vlmpack.layouts.messages import MessagesLayout
from vlmpack.layouts.native import LEADING, NATIVE_KINDS, normalize_native
from vlmpack.layouts.prompts import PromptsLayout
from vlmpack.layouts.tools import record_tools

#: The registry: layout name -> layout. Detection tries them in order; the first match converts.
LAYOUTS: dict[str, Layout] = {"llava": LlavaLayout(), "messages": MessagesLayout(), "alpaca": AlpacaLayout(),
                               "prompts": PromptsLayout()}
#: Values of ``--schema`` (config ``input_schema``).
SCHEMAS = ("auto", *LAYOUTS)


def detect_schema(obj: dict) -> str:
    """The name of the first layout of :data:`LAYOUTS` that detects ``obj`` (``"llava"`` if
    ``conversations`` is a key, else ``"messages"`` if ``messages`` is, else ``"alpaca"`` if
    ``instruction`` and ``output`` are, else ``"prompts"`` if ``prompts`` or ``captions`` is);
    raises :class:`RecordError` (``unknown_schema``; a record with two conversation keys,
    ``conversations`` and ``messages``: ``two_conversations``, never one packed silently)."""
    found = [name for name, layout in LAYOUTS.items() if layout.detect(obj)]
    if len(found) > 1 and all(isinstance(LAYOUTS[n], ChatLayout) for n in found[:2]):
        keys = " and ".join(LAYOUTS[n].keys for n in found[:2])
        raise RecordError("two_conversations", f"the record holds both {keys}; keep one (or force one with --schema)")
    if found:
        return found[0]
    *rest, last = (layout.keys for layout in LAYOUTS.values())
    keys = ", ".join(sorted(str(k) for k in obj)[:8]) or "none"
    raise RecordError("unknown_schema", f"no {', '.join(rest)} or {last} key (keys: {keys})")


def to_canonical(obj: dict, schema: str = "auto", text_key: str | None = None,
                 record_map: RecordMap | None = None) -> Canonical:
    """Convert a JSON object of one record to canonical messages and its media references.

    Returns ``(messages, media)``: ``messages`` as documented in :mod:`vlmpack.records`
    (``{"type": "image"|"video", "index": i}`` parts index ``media`` in order of appearance),
    ``media`` a list of ``(kind, ref)`` with ``ref`` as written in the record (not yet resolved).
    ``schema``: ``"auto"`` (detect) or a layout name; ``text_key``: the key of the turns
    (``--text-key``, :func:`normalize_native`); ``record_map``: a registry's column and tag mapping,
    applied first (:func:`vlmpack.layouts.mapping.apply_map`). Rewrites ``obj`` in place. Raises
    :class:`RecordError` for any layout or structural failure; ``ValueError`` for an unknown
    ``schema`` name.
    """
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    obj = normalize_native(apply_map(obj, record_map), text_key)
    leading = bool(obj.pop(LEADING, False))
    layout = LAYOUTS[detect_schema(obj) if schema == "auto" else schema]
    return layout.to_canonical(obj, leading=leading)


__all__ = ["LAYOUTS", "NATIVE_KINDS", "SCHEMAS", "Canonical", "Layout", "detect_schema", "normalize_native",
           "record_tools", "to_canonical"]
