"""The chat template's Jinja environment and input preparation as transformers' ``apply_chat_template``
has them, restated so that rendering does not import transformers (about 0.6 s of a process).

Source: transformers 5.x ``utils/chat_template_utils.py``: ``_compile_jinja_template`` (an
``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension and a ``{% generation %}`` block tag; the ``tojson`` filter as ``json.dumps`` without HTML
escaping, ``ensure_ascii=False`` by default; the globals ``raise_exception``, ``strftime_now``, a
``dict`` that can only build dicts and a ``namespace`` that refuses underscore-prefixed names; Jinja
3.1.6 at least, as older ones have known sandbox escapes), ``_alias_reasoning_fields`` and
``_plain_template_data``. The ``generation`` tag renders its body (transformers also records where
it is, for assistant masks; counting does not ask). :class:`vlmpack.models.template_render.TemplateRender`
checks that a template renders with this environment exactly as ``apply_chat_template`` renders it
(probe conversations), so a difference in any transformers release is seen, not trusted.

A chat template is code from the model's author: it runs only inside this sandbox, and its inputs
are rebuilt as plain JSON data first (:func:`plain_template_data`). The sandbox's answer to "may the
template read this attribute" is remembered per exact type and name for the types whose answer
depends on nothing else (:func:`_remembering_sandbox`: the same answers, each asked once).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["REASONING_FIELDS", "alias_reasoning_fields", "compile_template", "plain_template_data"]

#: Names a message's reasoning comes under; the first is the one chat templates read.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
#: The oldest Jinja whose sandbox transformers accepts.
MIN_JINJA = (3, 1, 6)


@lru_cache(maxsize=16)
def compile_template(source: str):
    """The ``jinja2.Template`` of the chat template ``source`` in the sandboxed environment of the
    module docstring (compiled once per process and template). Raises ``ImportError`` for a Jinja
    older than :data:`MIN_JINJA` and ``jinja2.TemplateSyntaxError`` for a template that does not parse."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.runtime
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    version = tuple(int(p) for p in jinja2.__version__.split(".")[:3] if p.isdigit())
    if version < MIN_JINJA:
        raise ImportError(f"chat templates need jinja2>={'.'.join(map(str, MIN_JINJA))}, found {jinja2.__version__}")

    class GenerationBlock(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: the body, rendered as it is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class DictMaker:
        """``dict(...)`` and ``dict.fromkeys(...)``, and nothing else of the type."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class SafeNamespace(jinja2.utils.Namespace):
        """Jinja's ``namespace`` refusing names that start with an underscore."""

        def __init__(*args, **kwargs):  # noqa: N805 - Jinja's own signature trick: namespace(self=...) works
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                SafeNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            SafeNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute.")

    env = _remembering_sandbox(ImmutableSandboxedEnvironment, (jinja2.runtime.LoopContext, SafeNamespace))(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=DictMaker(),
                       namespace=SafeNamespace)
    return env.from_string(source)


#: Exact types whose sandbox answer (``is_safe_attribute``) depends on the type and the attribute's name only:
#: Jinja's checks (``jinja2.sandbox.is_internal_attribute``, ``modifies_known_mutable``) are ``isinstance``
#: tests against fixed types and a test of the name, and these types define no ``__class__`` of their own.
PLAIN_TYPES = (str, dict, list, tuple, int, float, bool, type(None))
#: At most this many remembered answers (the attributes a template reads are few: ``loop.first``,
#: ``ns.value``, ``content.startswith``); then forgotten at once.
MEMO_ANSWERS = 4096


def _remembering_sandbox(base: type, more_types: tuple[type, ...]) -> type:
    """A subclass of the sandbox ``base`` whose ``is_safe_attribute`` remembers its answer per (exact
    type, attribute name) for :data:`PLAIN_TYPES` and ``more_types`` (a Jinja loop, the namespace):
    the same answers as ``base``, asked once. Jinja's sandbox asks on every attribute a template
    reads (``loop.first`` once a message: ~1/3 of a demo conversation's render, 1.44 -> 0.95 CPU-s on
    30,000 of them)."""
    types_ = frozenset((*PLAIN_TYPES, *more_types))

    class RememberingSandbox(base):
        _answers: dict[tuple[type, str], bool] = {}

        def is_safe_attribute(self, obj, attr, value) -> bool:
            kind = type(obj)
            if kind not in types_ or type(attr) is not str:
                return super().is_safe_attribute(obj, attr, value)
            answers = self._answers
            known = answers.get((kind, attr))
            if known is None:
                if len(answers) >= MEMO_ANSWERS:
                    answers.clear()
                known = answers[(kind, attr)] = bool(super().is_safe_attribute(obj, attr, value))
            return known

    RememberingSandbox.__name__ = RememberingSandbox.__qualname__ = f"Remembering{base.__name__}"
    return RememberingSandbox


def alias_reasoning_fields(chat: list) -> list:
    """Each message dict whose reasoning is under one of :data:`REASONING_FIELDS` (the first not
    None) gets it also as ``thinking`` (before its own keys) and ``reasoning_content`` (after);
    other messages as they are. Returns a new list (the messages with reasoning are new dicts)."""
    out = []
    for message in chat:
        if isinstance(message, dict):
            reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def plain_template_data(value: Any) -> Any:
    """``value`` rebuilt of plain JSON types for a template: exact ``str``/``int``/``float``/``bool``/
    None as they are, their subclasses as the base type, mappings as dicts, lists and tuples item by
    item, NumPy scalars as their Python value, dataclass instances and pydantic models as dicts of
    their fields, anything else the placeholder ``"<TypeName>"``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_template_data(k): plain_template_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_template_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_template_data(v) for v in value)
    if isinstance(value, np.generic):
        return plain_template_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_template_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_template_data(value.model_dump())
    return f"<{type(value).__name__}>"
