"""The record-layout seam (:mod:`vlmpack.layouts`): the registry, detection order, forced layouts,
and that a layout added to ``LAYOUTS`` is all it takes for every reader to accept its records.

Conversion results per layout are tested on the demo set in ``tests/test_readers.py``
(the same conversations in every layout give the same canonical messages)."""

from __future__ import annotations

import json
import typing

import pytest

from vlmpack.config import PackConfig
from vlmpack.errors import RecordError
from vlmpack.layouts import LAYOUTS, SCHEMAS, Layout, detect_schema, to_canonical
from vlmpack.layouts.builder import Builder, top_level_media
from vlmpack.readers import parse_record
from vlmpack.records import REASONS, Locator, Rejection, Sample

_TURNS = [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}]
_ONE = {  # one minimal record per layout
    "llava": {"image": "a.jpg", "conversations": _TURNS},
    "messages": {"images": ["a.jpg"], "messages": [{"role": "user", "content": "<image>\nWhat?"},
                                                   {"role": "assistant", "content": "A cat."}]},
    "alpaca": {"images": ["a.jpg"], "instruction": "<image>", "input": "What?", "output": "A cat."},
    "prompts": {"images": ["a.jpg"], "prompts": ["<image>\nWhat?"], "captions": ["A cat."]},
}
_WANT = ([{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "\nWhat?"}]},
          {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}], [("image", "a.jpg")])


def test_every_registered_layout_satisfies_the_protocol():
    assert SCHEMAS == ("auto", *LAYOUTS)
    for name, layout in LAYOUTS.items():
        assert isinstance(layout, Layout) and layout.name == name
    # --schema (config input_schema) accepts exactly the registered layouts
    assert typing.get_args(PackConfig.model_fields["input_schema"].annotation) == SCHEMAS
    assert set(_ONE) == set(LAYOUTS), "give every layout a minimal record in _ONE"


@pytest.mark.parametrize("name", list(_ONE))
def test_each_layout_detects_and_converts_its_record(name):
    assert detect_schema(dict(_ONE[name])) == name
    assert [n for n, layout in LAYOUTS.items() if layout.detect(_ONE[name])] == [name]
    assert to_canonical(json.loads(json.dumps(_ONE[name]))) == _WANT
    assert to_canonical(json.loads(json.dumps(_ONE[name])), name) == _WANT


@pytest.mark.parametrize("name", list(_ONE))
def test_a_forced_layout_refuses_a_record_without_its_key(name):
    other = next(n for n in _ONE if n != name)
    with pytest.raises(RecordError) as e:
        to_canonical(json.loads(json.dumps(_ONE[other])), name)
    assert e.value.reason == "unknown_schema" and f"schema {name!r} forced" in e.value.detail


def test_detection_follows_registry_order():
    both = {**_ONE["prompts"], **_ONE["messages"], **_ONE["llava"]}
    del both["images"]  # keep one top-level image key
    with pytest.raises(RecordError) as e:  # two conversations: none is guessed (issue 20, item 7)
        detect_schema(dict(both))
    assert e.value.reason == "two_conversations"
    del both["conversations"]
    assert detect_schema(dict(both)) == "messages"  # before prompts + captions, in registry order
    with pytest.raises(RecordError) as e:
        detect_schema({"text": "hi", "id": 1})
    assert e.value.reason == "unknown_schema"
    assert e.value.detail == ("no 'conversations', 'messages', 'instruction'+'output' or 'prompts'+'captions' key "
                              "(keys: id, text)")
    for layout in LAYOUTS.values():
        assert layout.keys in e.value.detail


def test_unknown_schema_name_is_a_value_error():
    with pytest.raises(ValueError, match="use one of auto, llava, messages, alpaca, prompts"):
        to_canonical(dict(_ONE["llava"]), "sharegpt")


class _QaLike:
    """A toy layout for the seam test: ``question`` + ``answer`` (+ ``images``)."""

    name = "qa_like"
    keys = "'question'+'answer'"

    @staticmethod
    def detect(obj: dict) -> bool:
        return "question" in obj

    @staticmethod
    def to_canonical(obj: dict, *, leading: bool = False):
        builder = Builder(top_level_media(obj))
        for role, key in (("user", "question"), ("assistant", "answer")):
            value = obj.get(key)
            if not isinstance(value, str):
                raise RecordError("wrong_type", f"{key!r} must be a string")
            content: list[dict] = []
            builder.add_text(content, value)
            builder.add_turn(role, content, key)
        return builder.finish()


def test_a_new_layout_is_one_registry_line(monkeypatch, tmp_path):
    """Registering a layout is all it takes: detection, conversion, checks and reasons follow."""
    rec = {"id": 3, "images": ["a.jpg"], "question": "<image>\nWhat?", "answer": "A cat."}
    raw = json.dumps(rec).encode()
    before = parse_record(raw, Locator("f.jsonl", 1, 0), media_root=str(tmp_path))
    assert isinstance(before, Rejection) and before.reason == "unknown_schema"
    monkeypatch.setitem(LAYOUTS, "qa_like", _QaLike())
    assert isinstance(LAYOUTS["qa_like"], Layout)
    res = parse_record(raw, Locator("f.jsonl", 1, 0), media_root=str(tmp_path))
    assert isinstance(res, Sample) and res.id == "3", res
    assert res.messages == _WANT[0] and [(m.kind, m.ref) for m in res.media] == _WANT[1]
    bad = parse_record(json.dumps({**rec, "images": ["a.jpg", "b.jpg"]}).encode(), Locator("f.jsonl", 2, 0),
                       media_root=str(tmp_path))
    assert isinstance(bad, Rejection) and bad.reason == "placeholder_mismatch" and bad.reason in REASONS
    with pytest.raises(RecordError) as e:
        detect_schema({"x": 1})
    assert "'question'+'answer'" in e.value.detail
