"""The chat template environment restated from transformers (vlmpack.models.jinja_env) behaves as
transformers' own (``utils/chat_template_utils``): the same input rebuilding, the same renders, the
same refusals of what the sandbox forbids."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import (
    _alias_reasoning_fields,
    _compile_jinja_template,
    _plain_template_data,
)

from vlmpack.models.jinja_env import PLAIN_TYPES, alias_reasoning_fields, compile_template, plain_template_data


class _Str(str):
    pass


class _Int(int):
    pass


@dataclasses.dataclass
class _Point:
    x: int
    y: object


class _Model:
    def model_dump(self):
        return {"a": (1, np.float32(2.5))}


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                     st.text(max_size=8), st.builds(_Str, st.text(max_size=4)), st.builds(_Int, st.integers(0, 9)),
                     st.builds(np.int64, st.integers(-99, 99)), st.builds(np.float32, st.floats(-1, 1, width=32)),
                     st.builds(np.bool_, st.booleans()), st.just(np.zeros(())), st.just(np.arange(3)),
                     st.just(_Model()), st.just(object()), st.just(b"bytes"))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=4), inner, max_size=4),
    st.builds(_Point, inner, inner)), max_leaves=12)


@settings(deadline=None, max_examples=300)
@given(_values)
def test_inputs_are_rebuilt_as_transformers_rebuilds_them(value):
    got, want = plain_template_data(value), _plain_template_data(value)
    assert repr(got) == repr(want) and type(got) is type(want)


@given(st.lists(st.one_of(st.dictionaries(st.sampled_from(["role", "content", "thinking", "reasoning",
                                                            "reasoning_content", "x"]),
                                          st.one_of(st.none(), st.text(max_size=3)), max_size=5),
                          st.text(max_size=2)), max_size=4))
def test_reasoning_is_aliased_as_transformers_aliases_it(chat):
    assert alias_reasoning_fields(chat) == _alias_reasoning_fields(chat)
    assert [list(m) if isinstance(m, dict) else m for m in alias_reasoning_fields(chat)] == \
        [list(m) if isinstance(m, dict) else m for m in _alias_reasoning_fields(chat)]


TEMPLATES = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content | tojson }}\n{% endfor %}",
    "{%- for m in messages %}\n  {{- m.role }}\n{% endfor %}  tail",
    "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
    "{% endfor %}",
    "{% generation %}gen {{ messages | length }}{% endgeneration %}",
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
    "{{ dict(a=1, b=[2]) | tojson(indent=2) }} {{ dict.fromkeys(['x'], 0) | tojson(sort_keys=True) }}",
    "{{ {'é': '<b>'} | tojson }} {{ {'é': 1} | tojson(ensure_ascii=True) }}",
    "{{ strftime_now('%Y') }}",
    "{{ raise_exception('no ' + messages[0].role) }}",
    "{{ ''.__class__ }}",
    "{{ messages.append(1) }}",
    "{% set ns = namespace(_hidden=1) %}{{ ns._hidden }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "{{ dict.__init__ }}",
    "{{ dict.mro() }}",
    "{% for %}",
    # asked once a loop: the second answer comes from the remembering sandbox's memo
    "{% for m in messages %}{{ loop.first }}{{ m.items() | list | length }}{{ m.clear() }}{% endfor %}",
    "{% for m in messages %}{{ m.content.upper() }}{{ m.content.__class__ }}{% endfor %}",
)


def _outcome(render):
    """The render, or the error it raised (the dict maker's class named alike: an error in a render is
    shown from transformers' own render, :class:`vlmpack.models.template_render.TemplateRender`)."""
    try:
        return render()
    except Exception as e:  # noqa: BLE001 - an error is an outcome to compare
        text = str(e).replace("vlmpack.models.jinja_env.DictMaker", "DICT").replace(
            "transformers.utils.chat_template_utils.TemplateDict", "DICT")
        return f"raised {type(e).__name__}: {text}"


@pytest.mark.parametrize("source", TEMPLATES)
def test_templates_render_and_fail_as_in_transformers(source):
    messages = [{"role": "user", "content": "hi <b>"}, {"role": "assistant", "content": "yo"}]
    got = _outcome(lambda: compile_template(source).render(messages=messages, tools=None))
    want = _outcome(lambda: _compile_jinja_template(source).render(messages=messages, tools=None))
    if "strftime_now" in source:
        assert got == want == str(datetime.now().year)
    assert got == want
    assert "<class" not in got and "method" not in got  # the sandbox hands out no Python internals


def test_the_sandbox_remembers_the_answers_jinja_gives():
    """The template's environment answers ``is_safe_attribute`` as Jinja's ``ImmutableSandboxedEnvironment``
    on every attribute name of the remembered types (asked twice: computed, then remembered), and
    remembers only those types."""
    import jinja2.runtime
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source = "{% set ns = namespace(n=0) %}{% for m in messages %}{{ loop.first }}{% endfor %}"
    tpl = compile_template(source)
    env, jinja = tpl.environment, ImmutableSandboxedEnvironment()
    namespace = env.globals["namespace"](n=0)
    loop = jinja2.runtime.LoopContext(iter([1, 2]), env.undefined)
    objects = [v() for v in PLAIN_TYPES] + [namespace, loop]
    names = {"mro", "__class__", "_x", "__init__", "n", "first", "update", "append", "pop", "keys", "upper",
             "format", "format_map", "__globals__", "gi_frame"}
    env._answers.clear()
    for obj in objects:
        for name in sorted(names | set(dir(obj))):
            want = jinja.is_safe_attribute(obj, name, None)
            assert env.is_safe_attribute(obj, name, None) == want == env.is_safe_attribute(obj, name, None), (obj, name)
    assert {kind for kind, _ in env._answers} == {type(o) for o in objects}
    assert not env._answers[(dict, "update")] and not env._answers[(str, "__class__")] and env._answers[(str, "upper")]
    fn = lambda: None  # noqa: E731 - a function's internals are refused and never remembered
    assert env.is_safe_attribute(fn, "__code__", None) is jinja.is_safe_attribute(fn, "__code__", None) is False
    assert not any(kind is type(fn) for kind, _ in env._answers)
    messages = [{"role": "user"}] * 3
    assert tpl.render(messages=messages) == _compile_jinja_template(source).render(messages=messages) == \
        "TrueFalseFalse"
