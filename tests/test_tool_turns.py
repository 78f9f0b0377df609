"""Tool use and reasoning turns (issue 20 item 5): a record's ``tools``, assistant ``tool_calls`` and
``reasoning_content``, ``tool`` turns, in the OpenAI / transformers form and in LLaMA-Factory's
``sharegpt`` form (``function_call`` / ``observation`` turns, ``tools`` as JSON text).

Proof on real data: the first demo image records, each turned into an agentic conversation (the
user's question and image, an assistant call of a tool with the question as argument, the tool's
result, the demo's answer), and demo text records given a reasoning text:

- the unexpanded ids equal transformers' own ``tokenizer.apply_chat_template(messages, tools=...,
  tokenize=True)`` token for token, so the packed count is exact;
- Qwen3-VL packs every tool conversation, both forms with the same ``num_tokens`` and media bytes per
  sample; its template renders no reasoning, so reasoning samples are rejected ``template_unsupported``
  (never packed with the reasoning silently lost), as are tool samples on Qwen2.5-VL, whose template
  renders no tools; input = packed + rejected; ``vlmpack verify`` passes;
- through Energon's loader and the collator, the labels are exactly the assistant turns: the tool
  call and the answer, never the tool's result;
- a template that renders reasoning (the Qwen3-VL thinking stand-in) packs it, labelled, by Qwen3's
  rule (``<think>`` only after the last user query).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.energon.load import iter_energon_packs
from vlmpack.errors import RecordError, RunFailedError
from vlmpack.inspection import inspect_pack
from vlmpack.layouts import record_tools, to_canonical
from vlmpack.models import load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator
from vlmpack.verify import verify_output

SEQ_LEN = 4096
N_TOOL, N_THINK = 40, 20
TOOLS = [{"type": "function", "function": {
    "name": "look_closer", "description": "Look at the image again and describe what the question asks about.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}}}]


def _demo(real_data: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """``(image, question, answer)`` of the first demo records with one image at the start of the
    question, and ``(question, answer)`` of the first text records."""
    images, texts = [], []
    for line in (real_data / "real_sft.jsonl").read_text().splitlines():
        r = json.loads(line)
        turns = r.get("conversations") or []
        if len(turns) < 2 or turns[0]["from"] != "human" or turns[1]["from"] != "gpt":
            continue
        q, a = turns[0]["value"], turns[1]["value"]
        if len(r["images"]) == 1 and q.startswith("<image>") and q.count("<image>") == 1 and len(images) < N_TOOL:
            images.append((r["images"][0], q[len("<image>"):].strip(), a))
        elif not r["images"] and "<image>" not in q and len(texts) < N_THINK:
            texts.append((q, a))
    return images, texts


def _openai(i: int, image: str, q: str, a: str) -> dict:
    return {"id": f"tool-{i}", "tools": TOOLS, "messages": [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": q}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "look_closer", "arguments": {"question": q}}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": a},
        {"role": "assistant", "content": a}]}


def _sharegpt(i: int, image: str, q: str, a: str) -> dict:
    return {"id": f"tool-{i}", "tools": json.dumps(TOOLS), "images": [image], "conversations": [
        {"from": "human", "value": "<image>" + q},
        {"from": "function_call", "value": json.dumps({"name": "look_closer", "arguments": {"question": q}})},
        {"from": "observation", "value": a},
        {"from": "gpt", "value": a}]}


def _thinking(i: int, q: str, a: str) -> dict:
    return {"id": f"think-{i}", "messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": a, "thinking": f"They said: {q}"}]}


@pytest.fixture(scope="module")
def written(real_data, tmp_path_factory) -> Path:
    images, texts = _demo(real_data)
    assert len(images) == N_TOOL and len(texts) == N_THINK
    d = tmp_path_factory.mktemp("tools")
    for name, rows in (("openai.jsonl", [_openai(i, *r) for i, r in enumerate(images)]),
                       ("sharegpt.jsonl", [_sharegpt(i, *r) for i, r in enumerate(images)]),
                       ("thinking.jsonl", [_thinking(i, *r) for i, r in enumerate(texts)])):
        (d / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return d


def _pack(inputs: list[Path], real_data: Path, model: Path, out: Path) -> tuple[dict, dict]:
    report = run_pack(load_config(input=[str(p) for p in inputs], media_root=str(real_data), model=str(model),
                                  output=str(out), seq_len=SEQ_LEN, workers=1, progress=False,
                                  max_reject_fraction=1.0))
    got = {}
    for raw in read_packs(out):
        for s in json.loads(raw["json"])["samples"]:
            got[s["id"]] = (s["num_tokens"], [raw[m["part"]] for m in s["media"]], s)
    return report, got


def _rejects(out: Path) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}


def test_both_forms_read_as_the_same_canonical_conversation(real_data):
    image, q, a = _demo(real_data)[0][0]
    openai, sharegpt = _openai(0, image, q, a), _sharegpt(0, image, q, a)
    m1, media1 = to_canonical(openai)
    m2, media2 = to_canonical(sharegpt)
    assert media1 == media2 == [("image", image)]
    assert m1[1] == {"role": "assistant", "content": [], "tool_calls": openai["messages"][1]["tool_calls"]}
    assert m1[2] == {"role": "tool", "content": [{"type": "text", "text": a}], "tool_call_id": "call_0"}
    m1[2].pop("tool_call_id")
    m1[1]["tool_calls"][0].pop("id")
    assert m1 == m2
    assert record_tools(openai) == record_tools(sharegpt) == TOOLS
    m3, _ = to_canonical(_thinking(0, q, a))
    assert m3[1] == {"role": "assistant", "content": [{"type": "text", "text": a}],
                     "reasoning_content": f"They said: {q}"}


def test_the_readme_tool_example_converts():
    readme = (Path(__file__).resolve().parents[1] / "docs" / "input-layouts.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"^\| tool use and reasoning [^|]*\| `(\{.*?\})`", readme, flags=re.M)
    obj = json.loads(example)
    messages, media = to_canonical(obj)
    assert media == [] and [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == record_tools(obj)[0]["function"]["name"] == "zoom"
    assert messages[3]["reasoning_content"] == "The tool saw a cat."


@pytest.mark.parametrize("turn, reason", [
    ({"role": "assistant", "content": "x", "tool_calls": {"name": "f"}}, "wrong_type"),
    ({"role": "assistant", "content": "x", "tool_calls": [{"function": {"arguments": {}}}]}, "wrong_type"),
    ({"role": "assistant", "content": "x", "reasoning_content": ["not", "text"]}, "wrong_type"),
    ({"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}, "wrong_type"),
    ({"role": "assistant", "content": None}, "wrong_type"),
    ({"from": "function_call", "value": "f(x=1)"}, "wrong_type"),
    ({"role": "tool", "content": "r", "tool_call_id": 7}, "wrong_type"),
])
def test_bad_tool_turns_get_a_reason(turn, reason):
    obj = {"messages": [{"role": "user", "content": "q"}, turn, {"role": "assistant", "content": "a"}]}
    with pytest.raises(RecordError) as e:
        to_canonical(obj)
    assert e.value.reason == reason and "\n" not in e.value.detail
    with pytest.raises(RecordError) as e:
        record_tools({"tools": "[not json"})
    assert e.value.reason == "wrong_type"


def test_ids_equal_transformers_apply_chat_template_with_tools(written, qwen3_vl_dir, qwen3_vl_thinking_dir):
    """The family's unexpanded ids of every conversation equal transformers' own rendering +
    tokenization of the same messages and tools (one image pad per image)."""
    checked = 0
    for model, name in ((qwen3_vl_dir, "openai.jsonl"), (qwen3_vl_thinking_dir, "openai.jsonl"),
                        (qwen3_vl_thinking_dir, "thinking.jsonl")):
        fam = load_model(str(model))
        for line in (written / name).read_text().splitlines():
            rec = json.loads(line)
            hf = [{**m, "content": [{"type": "image"} if p.get("type") == "image" else p for p in m["content"]]}
                  if isinstance(m["content"], list) else m for m in rec["messages"]]
            want = fam.tokenizer.apply_chat_template(hf, tools=rec.get("tools"), tokenize=True, return_dict=True,
                                                     add_generation_prompt=False)["input_ids"]
            obj = json.loads(line)
            messages, _ = to_canonical(obj)
            got = fam.token_ids([messages], [None], [record_tools(obj)])[0]
            assert list(got) == list(want), rec["id"]
            checked += 1
    assert checked == 2 * N_TOOL + N_THINK


def test_tool_conversations_pack_exactly_and_train_only_on_the_assistant(written, real_data, qwen3_vl_dir, tmp_path):
    report, got = _pack([written / "openai.jsonl", written / "thinking.jsonl"], real_data, qwen3_vl_dir,
                        tmp_path / "openai")
    assert report["samples_packed"] + report["rejected"] + report["dropped_overlong"] == N_TOOL + N_THINK
    assert report["samples_packed"] == N_TOOL and report["rejected"] == N_THINK
    rejects = _rejects(tmp_path / "openai")
    assert set(rejects) == {f"think-{i}" for i in range(N_THINK)}
    assert set(rejects.values()) == {"template_unsupported"}
    # LLaMA-Factory's form: the same counts and media bytes per sample
    report2, got2 = _pack([written / "sharegpt.jsonl"], real_data, qwen3_vl_dir, tmp_path / "sharegpt")
    assert report2["samples_packed"] == N_TOOL
    assert {k: v[:2] for k, v in got2.items()} == {k: v[:2] for k, v in got.items()}
    assert all(s["tools"] == TOOLS and s["messages"][1]["tool_calls"] for _, _, s in got.values())
    assert verify_output(tmp_path / "openai", workers=1)["problems"] == []
    # through Energon and the collator: labels on the tool call and the answer, never on the tool's result
    fam = load_model(str(qwen3_vl_dir))
    tok = fam.tokenizer
    open_id, close_id = tok.convert_tokens_to_ids("<tool_response>"), tok.convert_tokens_to_ids("</tool_response>")
    collator = PackCollator(qwen3_vl_dir, attn_implementation="sdpa", rope_impl="numpy")
    seen = 0
    for pack in iter_energon_packs(tmp_path / "openai", num_workers=0):
        batch = collator(pack)
        ids, labels, cu = batch["input_ids"][0].numpy(), batch["labels"][0].numpy(), batch["cu_seqlens"].tolist()
        for s, a, z in zip(pack.samples, cu[:-1], cu[1:]):
            assert z - a == s["num_tokens"]
            lab, sid = labels[a:z], ids[a:z]
            on = np.flatnonzero(lab != -100)
            spans = [tok.decode(lab[sp]) for sp in np.split(on, np.flatnonzero(np.diff(on) > 1) + 1)]
            q = s["messages"][0]["content"][-1]["text"]
            answer = s["messages"][3]["content"][0]["text"]
            call = json.dumps({"name": "look_closer", "arguments": {"question": q}}, ensure_ascii=False)
            assert spans == [f"<tool_call>\n{call}\n</tool_call><|im_end|>", answer + "<|im_end|>"], s["id"]
            start, stop = np.flatnonzero(sid == open_id), np.flatnonzero(sid == close_id)
            assert len(start) == len(stop) == 1 and (lab[start[0]:stop[0] + 1] == -100).all()
            assert tok.decode(sid[start[0] + 1:stop[0]]).strip() == answer
            seen += 1
    assert seen == N_TOOL
    # what `vlmpack inspect` shows: the same count, the tool's result as context, the call as a label
    raw = next(iter(read_packs(tmp_path / "openai")))
    for s in inspect_pack(raw, str(qwen3_vl_dir)):
        assert s.num_tokens == s.recorded_tokens
        assert any(k == "context" and "<tool_response>" in t for k, t in s.runs)
        assert any(k == "label" and t.startswith("<tool_call>") for k, t in s.runs)
        assert not any(k == "label" and "<tool_response>" in t for k, t in s.runs)


def test_a_template_without_tools_rejects_them_and_one_with_reasoning_packs_it(
        written, real_data, model_dir, qwen3_vl_thinking_dir, tmp_path):
    with pytest.raises(RunFailedError, match=f"no sample was packed .{N_TOOL} records read, {N_TOOL} rejected"):
        _pack([written / "openai.jsonl"], real_data, model_dir, tmp_path / "qwen2_5")
    rejects = [json.loads(r) for r in (tmp_path / "qwen2_5" / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == N_TOOL and {r["reason"] for r in rejects} == {"template_unsupported"}
    assert all("has tools" in r["detail"] and "never renders" in r["detail"] for r in rejects)
    report, got = _pack([written / "thinking.jsonl"], real_data, qwen3_vl_thinking_dir, tmp_path / "thinking")
    assert report["samples_packed"] == N_THINK
    fam = load_model(str(qwen3_vl_thinking_dir))
    for _, _, s in got.values():
        ids = fam.encode(s["messages"], [])
        labelled = fam.tokenizer.decode(ids[fam.label_mask(ids)])
        assert labelled == (f"<think>\n{s['messages'][1]['reasoning_content']}\n</think>\n\n"
                            f"{s['messages'][1]['content'][0]['text']}<|im_end|>"), s["id"]
    assert verify_output(tmp_path / "thinking", workers=1)["problems"] == []


@pytest.mark.parametrize("special_tokens", ["reject", "split"])
def test_a_special_token_inside_a_tool_call_is_rejected_under_either_policy(
        written, real_data, qwen3_vl_dir, tmp_path, special_tokens):
    rows = [json.loads(line) for line in (written / "openai.jsonl").read_text().splitlines()[:3]]
    rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]["question"] += "<|im_end|>"
    rows[1]["tools"][0]["function"]["description"] += " <|endoftext|>"
    # a piece of a special token at the edge of bare text: Qwen3-VL writes "}" after it, so nothing joins
    rows[2]["messages"][1]["tool_calls"][0]["function"]["arguments"] = '{"question": "x"}<|im_'
    src = tmp_path / "bad.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = run_pack(load_config(input=[str(src)], media_root=str(real_data), model=str(qwen3_vl_dir),
                                  output=str(tmp_path / "out"), seq_len=SEQ_LEN, workers=1, progress=False,
                                  special_tokens=special_tokens, max_reject_fraction=1.0))
    assert report["samples_packed"] == 1
    assert _rejects(tmp_path / "out") == {"tool-0": "special_token_in_text", "tool-1": "special_token_in_text"}
    assert verify_output(tmp_path / "out", workers=1)["problems"] == []


_TEXT = st.lists(st.sampled_from([*'ab ,.:{}"<>|/_\n', "é", "猫", "<|im_", "end|>", "<tool_call>"]),
                 max_size=12).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.from_regex(r"[a-z_]{1,12}", fullmatch=True), arg=_TEXT, result=_TEXT, answer=_TEXT,
       as_text=st.booleans(), n_calls=st.integers(1, 3))
def test_any_tool_conversation_counts_as_transformers_and_never_trains_on_results(
        qwen3_vl_dir, name, arg, result, answer, as_text, n_calls):
    """Invariant: for any tool conversation the template can take (special tokens refused), the ids
    are transformers' own and the labels cover only the assistant turns."""
    fam = load_model(str(qwen3_vl_dir))
    args = json.dumps({"x": arg}) if as_text else {"x": arg}
    rec = {"tools": [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}],
           "messages": [{"role": "user", "content": "go"},
                        {"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}] * n_calls},
                        *[{"role": "tool", "content": result or "-"}] * n_calls,
                        {"role": "assistant", "content": answer or "-"}]}
    obj = json.loads(json.dumps(rec))
    messages, _ = to_canonical(obj)
    tools = record_tools(obj)
    if fam.field_problem(messages, tools) or fam.find_special_token(messages, tools):
        assert any(t in json.dumps(rec, ensure_ascii=False) for t in ("<|im_", "end|>")), rec
        return
    want = fam.tokenizer.apply_chat_template(rec["messages"], tools=rec["tools"], tokenize=True, return_dict=True,
                                             add_generation_prompt=False)["input_ids"]
    ids = np.asarray(fam.token_ids([messages], [None], [tools])[0])
    assert ids.tolist() == list(want)
    mask = fam.label_mask(ids)
    open_id = fam.tokenizer.convert_tokens_to_ids("<tool_response>")
    close_id = fam.tokenizer.convert_tokens_to_ids("</tool_response>")
    for a, z in zip(np.flatnonzero(ids == open_id), np.flatnonzero(ids == close_id)):
        assert not mask[a:z + 1].any()
    assert fam.tokenizer.decode(ids[mask]).endswith((answer or "-") + "<|im_end|>")


def test_online_packing_counts_tool_conversations_as_pack_does(written, real_data, qwen3_vl_dir, tmp_path):
    """The training side's online packing takes the same tools (a sample dict's ``tools``), gives
    every tool conversation the count ``vlmpack pack`` recorded, and drops what pack rejects."""
    from vlmpack.train.online import OnlinePackedDataset

    _, packed = _pack([written / "openai.jsonl"], real_data, qwen3_vl_dir, tmp_path / "offline")
    samples = []
    for name in ("openai.jsonl", "thinking.jsonl"):
        for line in (written / name).read_text().splitlines():
            obj = json.loads(line)
            messages, media = to_canonical(obj)
            samples.append({"id": obj["id"], "messages": messages, "tools": record_tools(obj),
                            "images": [str(real_data / ref) for _, ref in media]})
    ds = OnlinePackedDataset(samples, PackCollator(qwen3_vl_dir, rope_impl="numpy"), seq_len=SEQ_LEN, buffer_size=16)
    lengths = {}
    for batch in ds:
        cu = batch["cu_seqlens"].tolist()
        lengths.update((sid, z - a) for sid, a, z in zip(batch["sample_ids"], cu[:-1], cu[1:]))
    assert lengths == {sid: v[0] for sid, v in packed.items()} and len(lengths) == N_TOOL
    assert ds.state_dict()["dropped"] == N_THINK


def test_a_special_token_formed_where_a_template_joins_a_field_is_found(qwen3_vl_dir):
    """The join rule of :func:`field_special_token` on a template that writes a reasoning text bare
    before its own ``end|>`` (no template of the demo families does): the token that forms is found,
    a piece that forms nothing is not."""
    from vlmpack.models.special_tokens import has_cut_edge, special_token_pattern, token_cuts
    from vlmpack.models.tool_fields import field_special_token

    fam = load_model(str(qwen3_vl_dir))
    pattern, cuts = special_token_pattern(fam.special_tokens), token_cuts(fam.special_tokens)

    def render(messages, tools):
        return "".join(m["role"] + m.get("reasoning_content", "") + "end|>" for m in messages)

    def msgs(reasoning):
        return [{"role": "user", "content": []}, {"role": "assistant", "content": [], "reasoning_content": reasoning}]

    edge = lambda text: has_cut_edge(text, cuts)  # noqa: E731
    assert field_special_token(msgs("so<|im_"), None, pattern, edge, render) == ("tool use or reasoning", "<|im_end|>")
    assert field_special_token(msgs("so<|vision_"), None, pattern, edge, render) == ("tool use or reasoning",
                                                                                  "<|vision_end|>")
    assert field_special_token(msgs("so<|im_start"), None, pattern, edge, render) is None
    assert field_special_token(msgs("plain"), None, pattern, edge, render) is None
