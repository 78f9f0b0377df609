"""The chat template rendered as the tokenizer's ``apply_chat_template(messages, tools=tools,
tokenize=False, add_generation_prompt=False)`` renders it, without its copies of the messages.

transformers 5.x (``tokenization_utils_base.PreTrainedTokenizerBase.apply_chat_template`` and
``utils/chat_template_utils.render_jinja_template``) renders one conversation in these steps:

1. the template: ``get_chat_template(None, tools)`` (the ``tool_use`` one of a named set when
   tools are given);
2. ``_normalize_chat_messages``: message objects become dicts (a deep copy), and the keys of a
   message whose value is None are dropped;
3. ``_plain_template_data`` of the messages, the tools and the template keywords (the tokenizer's
   ``special_tokens_map``): a second deep copy to plain JSON types, anything else a placeholder;
4. ``_alias_reasoning_fields``: a message's reasoning also as ``thinking`` and ``reasoning_content``;
5. the compiled template (``_compile_jinja_template``, an ``ImmutableSandboxedEnvironment``:
   a template cannot change what it is given) rendered with ``messages``, ``tools``,
   ``documents=None``, ``add_generation_prompt`` and the keywords.

The canonical messages a family gives (:meth:`vlmpack.models.qwen2_vl.Qwen2VLFamily.template_messages`)
are already fresh dicts of plain JSON types (they come from JSON, or from a layout's own dicts), so
the two copies of steps 2 and 3 give equal values and cost more than half of a render (measured on
the demo set: ~200 -> ~90 us a conversation). :class:`TemplateRender` takes steps 1, 2 (only the
None drop), 4 and 5 with those functions restated (:mod:`vlmpack.models.jinja_env`, no transformers
import) and the keywords made plain once.

Whether it renders what ``apply_chat_template`` renders is checked on every load
(:meth:`TemplateRender.problem`): both render a set of probe conversations (text, image and video
parts, a system turn, reasoning, tool calls with a null argument, a tool turn, tool schemas, a
message with a null field) and must give equal text, or raise alike; any difference leaves
rendering to ``apply_chat_template``. A conversation
that is not plain JSON (a value of another type, e.g. a NumPy scalar from a table cell) or that
raises is also rendered by ``apply_chat_template`` (so an error is the template's own, word for
word).
"""

from __future__ import annotations

from collections.abc import Sequence

from vlmpack.models.jinja_env import REASONING_FIELDS, alias_reasoning_fields, compile_template, plain_template_data

_PLAIN = (str, int, float, bool, type(None))
_REASONING = frozenset(REASONING_FIELDS)

#: Probe conversations (with their tool schemas) both renders must agree on.
PROBES: tuple[tuple[list[dict], list[dict] | None], ...] = (
    ([{"role": "user", "content": [{"type": "text", "text": "hello"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "hi there"}]}], None),
    ([{"role": "system", "content": [{"type": "text", "text": "be brief"}]},
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is it?"}, {"type": "video"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "a cat"}], "reasoning_content": "it purrs"},
      {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "still a cat"}]}], None),
    ([{"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
      {"role": "assistant", "content": [], "tool_calls": [
          {"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris", "unit": None}}}]},
      {"role": "tool", "content": [{"type": "text", "text": "{\"t\": 21}"}], "tool_call_id": "c1", "name": "weather"},
      {"role": "assistant", "content": [{"type": "text", "text": "21 degrees"}], "thinking": "from the tool"}],
     [{"type": "function", "function": {"name": "weather", "description": "the weather",
                                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                       "required": ["city"]}}}]),
    ([{"role": "user", "content": [{"type": "text", "text": "x"}], "name": None},
      {"role": "assistant", "content": [{"type": "text", "text": "y"}], "reasoning": "r"}], None),
)


def _plain(value) -> bool:
    """Whether ``value`` is JSON data of exact plain types (what ``_plain_template_data`` copies
    unchanged); iterative."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            if not all(type(k) is str for k in v):
                return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
        elif t not in _PLAIN:
            return False
    return True


def template_chat(messages) -> list[dict] | None:
    """The conversation as steps 2 and 4 of the module docstring hand it to the template (each
    message's None values dropped, reasoning aliased: :func:`alias_reasoning_fields`), in one pass
    that also checks it is plain JSON (:func:`_plain`, the common shape first: messages whose values
    are strings, or content lists of parts whose values are strings); None when it is not (or is
    not a list of message dicts), which the caller renders through ``apply_chat_template``."""
    if type(messages) is not list:
        return None
    chat = []
    for m in messages:
        if type(m) is not dict:
            return None
        has_none = False
        for k, v in m.items():
            if type(k) is not str:
                return None
            t = type(v)
            if t is str:
                continue
            if v is None:
                has_none = True
            elif k == "content" and t is list:
                if not all(_plain_dict(p) for p in v):
                    return None
            elif not _plain(v):
                return None
        if has_none:
            m = {k: v for k, v in m.items() if v is not None}
        if not _REASONING.isdisjoint(m):
            m = alias_reasoning_fields([m])[0]
        chat.append(m)  # the message itself when nothing changes: the sandbox cannot change what it is given
    return chat


def _plain_dict(d) -> bool:
    """:func:`_plain` of ``d`` (a content part), its string values taken at once."""
    if type(d) is not dict:
        return _plain(d)
    for k, v in d.items():
        if type(k) is not str:
            return False
        if type(v) is not str and not _plain(v):
            return False
    return True


def apply_template(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
    """``tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
    add_generation_prompt=False)``: transformers' own render, the one :class:`TemplateRender` matches."""
    return tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None, tokenize=False,
                                         add_generation_prompt=False)


class TemplateRender:
    """``render(messages, tools)`` -> the text ``tokenizer.apply_chat_template(messages, tools=tools,
    tokenize=False, add_generation_prompt=False)`` gives (str), by the steps of the module docstring;
    ``slow`` is that call itself. Build it with :meth:`for_tokenizer`, which returns None when the
    check fails."""

    #: the messages as the template gets them, or None (:func:`template_chat`)
    _prepare = staticmethod(template_chat)

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._compile = compile_template
        self._keywords = plain_template_data(dict(tokenizer.special_tokens_map))

    @classmethod
    def for_tokenizer(cls, tokenizer) -> TemplateRender | None:
        """A :class:`TemplateRender` of ``tokenizer`` when it renders the :data:`PROBES` as
        ``apply_chat_template`` does, else None. A tokenizer whose ``render_checked`` is true (a
        :class:`vlmpack.models.light_tokenizer.LightTokenizer`: checked so when it was recorded, with
        this code) is not checked again."""
        try:
            render = cls(tokenizer)
        except (ImportError, AttributeError, TypeError):
            return None
        if getattr(tokenizer, "render_checked", False) is True:
            return render
        return render if render.problem() is None else None

    def problem(self) -> str | None:
        """What differs between this render and ``apply_chat_template`` on :data:`PROBES` (one line),
        or None."""
        for i, (messages, tools) in enumerate(PROBES):
            got, want = _outcome(self._prepared, messages, tools), _outcome(self.slow, messages, tools)
            if got != want:
                at = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                return f"probe {i} from character {at}: {got[at:at + 60]!r} != {want[at:at + 60]!r}"
        return None

    def slow(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """:func:`apply_template` of this tokenizer."""
        return apply_template(self.tokenizer, messages, tools)

    def __call__(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """The rendered text; raises what ``apply_chat_template`` raises for the conversation."""
        tools = list(tools) if tools else None
        chat = self._prepare(messages) if messages and _plain(tools) else None
        if chat is not None:
            try:
                return self._render(chat, tools)
            except Exception:  # noqa: BLE001 - rendered again below, so the error is the template's own
                pass
        return self.slow(messages, tools)

    def _prepared(self, messages: list[dict], tools: list[dict] | None) -> str:
        """What :meth:`__call__` renders for plain ``messages`` (:func:`template_chat`, then :meth:`_render`)."""
        chat = self._prepare(messages)
        if chat is None:
            raise TypeError("not a list of plain JSON messages")
        return self._render(chat, tools)

    def _render(self, chat: list[dict], tools: list[dict] | None) -> str:
        """Steps 1 and 5: the template rendered with the prepared ``chat``."""
        compiled = self._compile(self.tokenizer.get_chat_template(None, tools))
        return compiled.render(messages=chat, tools=tools, documents=None, add_generation_prompt=False,
                               **self._keywords)


def _outcome(render, messages: list[dict], tools: list[dict] | None) -> str:
    """The text ``render`` gives, or ``"raised <type>: <message>"``."""
    try:
        return render(messages, tools)
    except Exception as e:  # noqa: BLE001 - an error is an outcome to compare
        return f"raised {type(e).__name__}: {e}"
