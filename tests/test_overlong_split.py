"""``--overlong split`` (issue 22 item 4) on real demo conversations and the real Qwen tokenizer."""

from __future__ import annotations

import json

import pytest

from vlmpack.config import load_config
from vlmpack.pack.pipeline import run_pack
from vlmpack.pack.turn_split import SplitStats, rounds, split_at_turns
from vlmpack.packfmt import read_packs
from vlmpack.records import Locator, Sample
from vlmpack.verify import verify_output

L = 384
SYSTEM = "You are a patient assistant who answers in plain words."


def _turn(role, text):
    return {"role": role, "content": [{"type": "text", "text": text}]}


def test_rounds_keep_unanswered_turns_with_the_next_round():
    msgs = [_turn("system", "s"), _turn("user", "a"), _turn("user", "b"), _turn("assistant", "c"),
            _turn("user", "d"), _turn("assistant", "e"), _turn("tool", "f"), _turn("assistant", "g")]
    system, rs, starts = rounds(msgs)
    assert system == msgs[:1] and [len(r) for r in rs] == [3, 4] and starts == [1, 4]


def test_pieces_fit_and_a_turn_too_long_alone_is_dropped():
    """A measure that counts characters (a stand-in tokenizer) shows the greedy cut: rounds in order
    while the piece fits, the system turn in every piece, a round over the limit alone dropped."""
    def measure(samples):
        for s in samples:
            s.num_tokens = sum(len(p["text"]) for m in s.messages for p in m["content"])
        return samples, []

    long = "x" * 50
    msgs = [_turn("system", "sys"), _turn("user", "q1"), _turn("assistant", "a1"), _turn("user", "q2"),
            _turn("assistant", long), _turn("user", "q3"), _turn("assistant", "a3"), _turn("user", "q4"),
            _turn("assistant", "a4")]
    s = Sample("r", msgs, [], Locator("f.jsonl", 1, 0))
    stats = SplitStats()
    pieces, dropped = split_at_turns(s, 20, measure, stats)
    assert [p.id for p in pieces] == ["r#1", "r#2"]
    assert [[m["content"][0]["text"] for m in p.messages] for p in pieces] == [
        ["sys", "q1", "a1"], ["sys", "q3", "a3", "q4", "a4"]]
    assert [r.id for r in dropped] == ["r#turns4-5"] and "55 tokens alone > --seq-len 20" in dropped[0].detail
    assert stats.as_dict() == {"records": 1, "pieces": 2, "turns_dropped": 1, "tokens_kept": 7 + 11,
                               "tokens_dropped": 55, "entries_added": 2}


@pytest.fixture(scope="module")
def split_out(real_data, model_dir, tmp_path_factory):
    """The first 300 demo records and one long chitchat conversation under a system prompt, packed at
    L = 384 with --overlong split."""
    tmp = tmp_path_factory.mktemp("split")
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()[:300]
    (tmp / "in.jsonl").write_text("\n".join(lines) + "\n")
    chat = max((json.loads(x) for x in lines if "chitchat" in x), key=lambda r: len(r["conversations"]))
    role = {"human": "user", "gpt": "assistant"}
    msgs = [{"role": "system", "content": SYSTEM}] + [{"role": role[t["from"]], "content": t["value"]}
                                                        for t in chat["conversations"]]
    (tmp / "sys.jsonl").write_text(json.dumps({"id": "with-system", "messages": msgs}) + "\n")
    cfg = load_config(input=[str(tmp / "in.jsonl"), str(tmp / "sys.jsonl")], media_root=str(real_data),
                      model=str(model_dir), output=str(tmp / "out"), seq_len=L, overlong="split", workers=1,
                      progress=False, cache_dir="off")
    run_pack(cfg)
    return tmp / "out", lines, len(msgs)


def test_split_pieces_are_valid_conversations_that_cover_every_turn(split_out):
    out, lines, sys_turns = split_out
    report = json.loads((out / "report.json").read_text())
    o = report["overlong_split"]
    assert report["identity_holds"] and o["records"] > 10 and o["pieces"] > o["records"]
    assert report["records_read"] + o["entries_added"] == (report["samples_packed"] + report["rejected"]
                                                           + report["dropped_overlong"])
    pieces: dict[str, list[dict]] = {}
    for p in read_packs(out):
        for s in json.loads(p["json"])["samples"]:
            assert s["num_tokens"] <= L
            if "#" in s["id"]:
                pieces.setdefault(s["id"].rsplit("#", 1)[0], []).append(s)
    dropped: dict[str, int] = {}
    for r in (json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()):
        assert r["reason"] == "overlong" and "#turns" in r["id"]
        base, span = r["id"].split("#turns")
        a, b = map(int, span.split("-"))
        dropped[base] = dropped.get(base, 0) + b - a + 1
    turns = {json.loads(x)["id"]: len(json.loads(x)["conversations"]) for x in lines} | {"with-system": sys_turns}
    assert set(pieces) | set(dropped) and set(pieces) | set(dropped) <= set(turns)
    for base in set(pieces) | set(dropped):
        mine = sorted(pieces.get(base, []), key=lambda s: int(s["id"].rsplit("#", 1)[1]))
        assert [s["id"] for s in mine] == [f"{base}#{k}" for k in range(1, len(mine) + 1)]
        system = 1 if base == "with-system" else 0
        kept = 0
        for s in mine:
            roles = [m["role"] for m in s["messages"]]
            assert roles[:system] == ["system"] * system and roles[system] == "user" and roles[-1] == "assistant"
            used = [c["part"] for m in s["messages"] for c in m["content"] if "part" in c]
            assert used == [m["part"] for m in s["media"]]  # its own media only, in order
            kept += len(roles) - system
        assert kept + dropped.get(base, 0) == turns[base] - system, base
    system_pieces = pieces["with-system"]
    assert len(system_pieces) >= 2 and all(s["messages"][0]["content"][0]["text"] == SYSTEM for s in system_pieces)
    assert any(s["media"] for ps in pieces.values() for s in ps), "some split conversation has an image"


def test_split_output_verifies_and_the_option_is_keyed(split_out, real_data, model_dir, tmp_path):
    out, _, _ = split_out
    res = verify_output(out, workers=1)
    assert res["problems"] == [], res["problems"][:3]
    base = dict(input=[str(real_data / "real_sft.jsonl")], model=str(model_dir), output=str(tmp_path / "o"))
    from vlmpack.pack.stages import CountOptions, count_payload

    drop, split = load_config(**base), load_config(**base, overlong="split")
    assert "overlong_split" not in count_payload(drop, drop.fingerprint_payload())["options"]
    assert count_payload(split, split.fingerprint_payload())["options"]["overlong_split"] == 8192
    assert CountOptions.of(split).split_limit == 8192 and CountOptions.of(drop).split_limit == 0
