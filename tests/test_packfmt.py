"""``vlmpack.packfmt``: the one grouping of tar members into packs / samples, and the writing of a pack
object from entries serialized once (``sample_entry``, ``join_pack``, the content digests): invariants.

The readers built on it are tested on real outputs (``tests/test_writer.py``: ``ShardPacks``
offsets = the ``.tar.idx``; ``tests/test_check.py``: truncated and tampered shards) and real
input shards (``tests/test_sources_wds.py``)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.packfmt import (
    FORMAT,
    MAX_JSON_DEPTH,
    compact_json,
    entry_digest,
    group_by_key,
    join_pack,
    loads_json,
    media_part,
    parse_pack,
    sample_digest,
    sample_entry,
    shift_part,
    split_member,
)
from vlmpack.records import Locator, Media, Sample


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers()), max_size=40))
def test_groups_are_the_runs_of_equal_keys(members):
    groups = list(group_by_key(iter(members)))
    assert [item for _, items in groups for item in items] == [item for _, item in members]  # order, nothing lost
    assert all(a[0] != b[0] for a, b in itertools.pairwise(groups))  # a new group only where the key changes
    assert [(k, len(items)) for k, items in groups] == [(k, len(list(g))) for k, g in
                                                        itertools.groupby(members, key=lambda m: m[0])]


def test_split_member_keeps_the_dots_of_the_part():
    assert split_member("pack000000007.img3.png") == ("pack000000007", "img3.png")
    assert split_member("pack000000007.input_ids.npy") == ("pack000000007", "input_ids.npy")


# --- writing: each sample serialized once (sample_entry), joined into <key>.json unparsed (join_pack) ---

_TRICKY = st.lists(st.sampled_from(['"', "\\", "{", ",", ":", "part", "img", "vid", "0", "7", ".jpg", "\n", "\u2028",
                                    "é", "漢", "\x00", " ", "}", "type", '{"part":"img0', ',"part":"vid3.mp4"']),
                   max_size=12).map("".join)
_MEDIA = st.tuples(st.sampled_from(["image", "video"]), st.sampled_from(["JPEG", "PNG", "WEBP", "MP4", ""]),
                   st.integers(1, 5000), st.integers(1, 5000), st.integers(0, 10**6))


@st.composite
def _samples(draw):
    media = [Media(kind, f"/m/{i}", f"/m/{draw(_TRICKY)}{i}", w, h, fmt, 0, n)
             for i, (kind, fmt, w, h, n) in enumerate(draw(st.lists(_MEDIA, max_size=4)))]
    content = [{"type": "text", "text": draw(_TRICKY)} for _ in range(draw(st.integers(0, 3)))]
    content += [{"type": m.kind, "index": i} for i, m in enumerate(media)]
    messages = [{"role": "user", "content": draw(st.permutations(content))},
                {"role": "assistant", "content": [{"type": "text", "text": draw(_TRICKY)}]}]
    key = draw(st.one_of(st.none(), _TRICKY))
    return Sample(draw(_TRICKY), messages, media, Locator(draw(_TRICKY), 3, 17, key),
                  num_tokens=draw(st.integers(0, 10**6)), id_kind=draw(st.sampled_from(["str", "int", "line"]))), \
        draw(st.sampled_from(["reject", "split"]))


def _pack_object(samples, seq_len):
    """The pack object restated from docs/format.md: media numbered over the pack in sample order."""
    out, n = [], 0
    for s, special in samples:
        names = [media_part(m.kind, m.format, n + i) for i, m in enumerate(s.media)]
        n += len(s.media)
        entry = {"id": s.id, "id_kind": s.id_kind, "num_tokens": s.num_tokens, "source": s.locator.to_dict(),
                 "messages": [{"role": msg["role"], "content": [{"type": c["type"], "part": names[c["index"]]}
                                                                if "index" in c else c for c in msg["content"]]}
                              for msg in s.messages],
                 "media": [{"part": p, "kind": m.kind, "width": m.width, "height": m.height,
                            "num_tokens": m.num_tokens} for p, m in zip(names, s.media)]}
        if special == "split":
            entry["special_tokens"] = "split"
        out.append(entry)
    return {"format": FORMAT, "seq_len": seq_len, "num_tokens": sum(s.num_tokens for s, _ in samples),
            "samples": out}


@settings(max_examples=300)
@given(st.lists(_samples(), min_size=1, max_size=5), st.integers(1, 2**31 - 1))
def test_joined_entries_are_the_pack_object_and_keep_their_digest(samples, seq_len):
    """join_pack of the samples' entries (serialized once each, media named within the sample) is
    byte-equal to json.dumps of the pack object, whatever the texts hold (quotes, backslashes,
    ``"part":"img0`` written as text); parse_pack reads it back; each sample's digest from the
    shard equals the digest of the bytes the count stage wrote."""
    entries = [sample_entry(s, special) for s, special in samples]
    total = sum(s.num_tokens for s, _ in samples)
    data = join_pack([e for e, _ in entries], [len(s.media) for s, _ in samples], total, seq_len)
    want = _pack_object(samples, seq_len)
    assert data == json.dumps(want, ensure_ascii=False, separators=(",", ":")).encode()
    obj = parse_pack(data)
    assert obj == want
    shas = [[f"{i:064x}" for i, _ in enumerate(s.media)] for s, _ in samples]
    for (entry, names), s, got, sh in zip(entries, samples, obj["samples"], shas):
        assert names == [media_part(m.kind, m.format, i) for i, m in enumerate(s[0].media)]
        assert sample_digest(got, sh) == entry_digest(entry, sh)
        assert sample_digest(got, sh[::-1]) != entry_digest(entry, sh) or len(set(sh)) < 2


def test_a_changed_key_order_or_character_changes_the_digest():
    s = Sample("a", [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "index": 0}]}],
               [Media("image", "x.png", "/x.png", 4, 5, "PNG", 10, 7)], Locator("f.jsonl", 1, 0), num_tokens=12)
    entry, _ = sample_entry(s)
    sha = ["0" * 64]
    obj = json.loads(entry)
    assert sample_digest(obj, sha) == entry_digest(entry, sha)
    assert sample_digest({**obj, "messages": [{"content": obj["messages"][0]["content"], "role": "user"}]},
                         sha) != entry_digest(entry, sha)
    assert sample_digest(json.loads(entry.replace(b'"hi"', b'"hI"')), sha) != entry_digest(entry, sha)
    assert shift_part("img1.png", 3) == "img4.png" and shift_part("vid0.mp4", 0) == "vid0.mp4"


def _dumps(obj) -> bytes:
    """The reference form of compact_json: the standard library's encoder."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3) | st.dictionaries(st.integers(0, 3), inner, max_size=2),
    max_leaves=20)


def test_compact_json_escapes_every_character_as_the_standard_library():
    """orjson writes compact_json's strings: every code point but the surrogates, in one string and alone."""
    every = "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))
    assert compact_json({"t": every, every[:300]: [every[::-1]]}) == _dumps({"t": every, every[:300]: [every[::-1]]})
    assert all(compact_json(every[i]) == _dumps(every[i]) for i in range(0, len(every), 97))


@settings(deadline=None, max_examples=400)
@given(_ANY_JSON)
def test_compact_json_is_the_standard_librarys_bytes(value):
    """Floats (written 1.5e-07 by json, 1.5e-7 by orjson), integers beyond 64 bits, lone surrogates,
    tuples and integer keys: the same bytes as json.dumps, whichever encoder wrote them."""
    assert compact_json(value) == _dumps(value)
    assert compact_json([value, [[[value]]]]) == _dumps([value, [[[value]]]])


@settings(deadline=None, max_examples=150)
@given(_samples(), _ANY_JSON, st.sampled_from([1e-07, 2.5, float("inf"), 10**20, 2**64, 7]), st.booleans())
def test_sample_entries_with_tools_and_tool_calls_are_the_standard_librarys_bytes(sample, value, number, in_tools):
    """Tool schemas and tool calls may hold any JSON (floats included): their entry's bytes are json.dumps's,
    whichever of them holds the float."""
    s, special = sample
    s.tools = [{"type": "function", "function": {"name": "f", "parameters": value if in_tools else {},
                                                 "scale": number if in_tools else 1}}]
    call = {"a": value, "scale": number} if not in_tools else {}
    s.messages.append({"role": "assistant", "content": [], "reasoning_content": "r",
                       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": call}}]})
    s.messages.append({"role": "tool", "content": [{"type": "text", "text": "ok"}], "tool_call_id": "c", "name": "f"})
    entry, _ = sample_entry(s, special)
    obj = json.loads(entry)
    assert entry == _dumps(obj)
    assert _dumps(obj["tools"]) == _dumps(s.tools)
    assert _dumps(obj["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == _dumps(call)


def _depth(value) -> int:
    """Nesting depth of arrays / objects (a scalar is 0), recursively: the reference for loads_json."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return (1 + max(map(_depth, children), default=0)) if isinstance(value, (dict, list)) else 0


_json = st.recursive(st.none() | st.integers() | st.text(alphabet="ab[]{}\"", max_size=4),
                     lambda inner: st.lists(inner, max_size=2)
                     | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                     max_leaves=90)


@settings(deadline=None, max_examples=200)
@given(_json, st.integers(0, 70), st.booleans(), st.booleans())
def test_loads_json_refuses_exactly_what_nests_deeper_than_the_limit(inner, wrap, as_dict, as_bytes):
    """Whatever the brackets inside strings: accepted iff the depth is at most MAX_JSON_DEPTH."""
    value = inner
    for _ in range(wrap):
        value = {"k": value} if as_dict else [value]
    text = json.dumps(value)
    data = text.encode() if as_bytes else text
    if _depth(value) <= MAX_JSON_DEPTH:
        assert loads_json(data) == value
    else:
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            loads_json(data)
