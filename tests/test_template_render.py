"""The chat template rendered without transformers' message copies (vlmpack.models.template_render)
gives ``apply_chat_template``'s text: on every demo conversation, on random conversations with
reasoning, tool calls and tool schemas, for every tokenizer of the suite; and its check refuses a
render that differs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_models_gemma3 import gemma3_dir  # noqa: F401 - fixture
from test_models_glm4v import glm4v_dir  # noqa: F401 - fixture
from test_models_kimi_k25 import kimi_dir  # noqa: F401 - fixture
from test_models_smolvlm import smolvlm_dir  # noqa: F401 - fixture

from vlmpack.layouts import to_canonical
from vlmpack.models import FAMILIES, model_type
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.template_render import TemplateRender

DIRS = ("model_dir", "qwen3_5_dir", "qwen3_vl_thinking_dir", "internvl_dir", "llava_ov_dir", "gemma3_dir",
        "glm4v_dir", "kimi_dir", "smolvlm_dir")


def _conversations(real_data) -> list[list[dict]]:
    out = []
    for line in (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            out.append(to_canonical(json.loads(line))[0])
        except Exception:  # noqa: BLE001 - a record the layouts reject is no conversation to render
            continue
    return out


@pytest.mark.parametrize("name", ("model_dir", "qwen3_5_dir"))
def test_every_demo_conversation_renders_as_apply_chat_template(request, real_data, name):
    family = FAMILIES[model_type(request.getfixturevalue(name))](request.getfixturevalue(name))
    render = family.template_render
    assert render is not None
    conversations = _conversations(real_data)
    assert len(conversations) > 5000
    for messages in conversations:
        plain = family.template_messages(messages)
        assert render(plain) == render.slow(plain)


@pytest.mark.parametrize("name", DIRS)
def test_the_suite_tokenizers_pass_the_check(request, name):
    tok = load_chat_tokenizer(request.getfixturevalue(name))
    assert TemplateRender(tok).problem() is None
    assert TemplateRender.for_tokenizer(tok) is not None


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["<image>", "<|im_end|>", "{{ x }}", "{% if %}", "\n\n", " ", "</think>", "<think>"])
_args = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
_call = st.builds(lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}},
                  _text, st.dictionaries(_text, _args, max_size=3))


@st.composite
def _conversation(draw):
    turns = []
    if draw(st.booleans()):
        turns.append({"role": "system", "content": [{"type": "text", "text": draw(_text)}]})
    for _ in range(draw(st.integers(1, 3))):
        parts = draw(st.lists(st.sampled_from(["text", "image", "video"]), min_size=1, max_size=3))
        turns.append({"role": "user", "content": [{"type": "text", "text": draw(_text)} if p == "text" else {"type": p}
                                                  for p in parts]})
        reply = {"role": "assistant", "content": [{"type": "text", "text": draw(_text)}]}
        if draw(st.booleans()):
            reply[draw(st.sampled_from(["reasoning_content", "reasoning", "thinking"]))] = draw(_text)
        if draw(st.booleans()):
            reply["tool_calls"] = draw(st.lists(_call, min_size=1, max_size=2))
            turns.append(reply)
            reply = {"role": "tool", "content": [{"type": "text", "text": draw(_text)}], "tool_call_id": draw(_text),
                     "name": draw(_text)}
        turns.append(reply)
    tools = draw(st.none() | st.lists(st.builds(
        lambda n, d: {"type": "function", "function": {"name": n, "description": d, "parameters": {"type": "object"}}},
        _text, _text), min_size=1, max_size=2))
    return turns, tools


@pytest.fixture(scope="module")
def renders(request):
    return {name: TemplateRender.for_tokenizer(load_chat_tokenizer(request.getfixturevalue(name)))
            for name in ("model_dir", "qwen3_5_dir", "qwen3_vl_thinking_dir", "glm4v_dir", "kimi_dir")}


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=_conversation())
def test_random_conversations_render_alike_or_raise_alike(renders, conv):
    messages, tools = conv
    for name, render in renders.items():
        try:
            want = render.slow(messages, tools)
        except Exception as e:  # noqa: BLE001 - then the render raises the same
            with pytest.raises(type(e)) as got:
                render(messages, tools)
            assert str(got.value) == str(e), name
        else:
            assert render(messages, tools) == want, name


def test_the_check_refuses_a_render_that_differs(qwen3_vl_thinking_dir):
    """Without the reasoning aliases (a step transformers takes) a template that renders reasoning
    renders the probes otherwise: refused."""

    class NoAliases(TemplateRender):
        _prepare = staticmethod(lambda messages: [{k: v for k, v in m.items() if v is not None} for m in messages])

    tok = load_chat_tokenizer(qwen3_vl_thinking_dir)
    assert TemplateRender.for_tokenizer(tok) is not None
    problem = NoAliases(tok).problem()
    assert problem is not None and problem.startswith("probe ")
    assert NoAliases.for_tokenizer(tok) is None


def test_values_that_are_not_plain_json_go_through_apply_chat_template(qwen3_5_dir):
    """A NumPy scalar in a tool call (from a table cell, say) is rendered by transformers' own call,
    which makes it plain: the same text as that call."""
    render = TemplateRender.for_tokenizer(load_chat_tokenizer(qwen3_5_dir))
    messages = [{"role": "user", "content": [{"type": "text", "text": "n?"}]},
                {"role": "assistant", "content": [], "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": {"n": np.int64(3)}}}]}]
    assert render(messages) == render.slow(messages)
    assert '"arguments": {"n": 3}' in render(messages)


def test_a_template_error_is_the_templates_own(model_dir):
    """An unknown role raises in the template: the same exception and message as apply_chat_template."""
    tok = load_chat_tokenizer(model_dir)
    tok.chat_template = "{% for m in messages %}{% if m.role == 'x' %}{{ raise_exception('no x') }}{% endif %}" \
                        "{{ m.role }}{% endfor %}"
    render = TemplateRender.for_tokenizer(tok)
    assert render is not None
    messages = [{"role": "x", "content": []}]
    with pytest.raises(Exception, match="no x") as fast:
        render(messages)
    with pytest.raises(Exception, match="no x") as slow:
        render.slow(messages)
    assert type(fast.value) is type(slow.value)


_any = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
                    | st.builds(np.int64, st.integers(-3, 3)) | st.builds(np.str_, st.text(max_size=2)),
                    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
                    | st.dictionaries(st.text(max_size=2) | st.integers(0, 2), inner, max_size=3), max_leaves=12)
_message = st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "reasoning", "thinking"]),
                           _any | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), _any, max_size=2)),
                           max_size=4)


@settings(deadline=None, max_examples=300)
@given(st.lists(_message, max_size=3) | st.lists(_message | _any, max_size=2) | _any)
def test_the_one_pass_preparation_is_the_walk_the_drop_and_the_aliases(value):
    """Which conversations go through the copy-free render, and what the template gets: a list of
    message dicts that the walk finds plain, with each message's None values dropped and its reasoning
    aliased (transformers' steps); anything else goes to apply_chat_template (None)."""
    from vlmpack.models.jinja_env import alias_reasoning_fields
    from vlmpack.models.template_render import _plain, template_chat

    plain = type(value) is list and all(type(m) is dict for m in value) and _plain(value)
    want = alias_reasoning_fields([{k: v for k, v in m.items() if v is not None} for m in value]) if plain else None
    got = template_chat(value)
    assert repr(got) == repr(want)
    assert got is None or [list(m) for m in got] == [list(m) for m in want]
