"""The light tokenizer (vlmpack.models.light_tokenizer): once transformers has built a Qwen-VL
directory's tokenizer, the next load reads back the pipeline transformers built and counts without
importing transformers, with the same ids, templates and counts; anything it does not answer is
transformers' tokenizer's answer; a tampered pipeline or recipe is never followed.

Real tokenizers of the suite (Qwen2.5-VL, Qwen3-VL, Qwen3.5) and the demo conversations.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from vlmpack.fsio import read_sealed_json, sealed_json_bytes
from vlmpack.models import FAMILIES, light_tokenizer, load_recipe, model_type
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.light_tokenizer import LightTokenizer, _surface
from vlmpack.models.tiktoken_bpe import fast_encoder

QWEN_DIRS = ("model_dir", "qwen3_vl_dir", "qwen3_5_dir")


@pytest.fixture
def fresh_recipes(tmp_path):
    saved = load_recipe._root[0]
    load_recipe.use_cache_root(tmp_path / "cache")
    yield tmp_path / "cache"
    load_recipe._root[0] = saved


def _demo_conversations(real_data: Path, n: int = 600) -> list[list[dict]]:
    from vlmpack.layouts import to_canonical

    out = []
    for line in (real_data / "real_sft.jsonl").read_text().splitlines()[:n]:
        rec = json.loads(line)
        try:
            out.append(to_canonical(rec)[0])
        except Exception:  # noqa: BLE001, S112 - a record the layouts refuse is not a conversation to count
            continue
    return out


@pytest.mark.usefixtures("fresh_recipes")
@pytest.mark.parametrize("name", QWEN_DIRS)
def test_the_light_tokenizer_answers_as_transformers_and_counts_alike(request, real_data, name):
    d = request.getfixturevalue(name)
    cls = FAMILIES[model_type(d)]
    real = cls(d)  # transformers' tokenizer; the light one recorded
    assert not isinstance(real.tokenizer, LightTokenizer) and light_tokenizer.recorded(d)["ok"] is True
    light = cls(d)
    assert isinstance(light.tokenizer, LightTokenizer) and light.tokenizer.render_checked
    assert _surface(light.tokenizer) == _surface(real.tokenizer)
    assert (fast_encoder(d, light.tokenizer) is None) == (fast_encoder(d, real.tokenizer) is None)
    convs = _demo_conversations(real_data)
    assert len(convs) > 400
    for mode in ("reject", "split"):
        assert light.token_ids(convs, [mode] * len(convs)) == real.token_ids(convs, [mode] * len(convs))
    assert light.render(convs[0]) == real.tokenizer.apply_chat_template(
        light.template_messages(convs[0]), tokenize=False, add_generation_prompt=False)
    assert light.tokenizer._real is None  # all of it answered without transformers' tokenizer


@pytest.mark.usefixtures("fresh_recipes")
def test_what_it_does_not_answer_is_transformers_answer(model_dir):
    load_chat_tokenizer(model_dir, light=True)  # recorded by now (the suite's recipes)
    real, light = load_chat_tokenizer(model_dir), load_chat_tokenizer(model_dir, light=True)
    assert isinstance(light, LightTokenizer) and light._real is None and not isinstance(real, LightTokenizer)
    again = pickle.loads(pickle.dumps(light))  # e.g. a spawned data loader worker's copy of a task encoder
    assert _surface(again) == _surface(light) and again._real is None
    assert len(light) == len(real) and light._real is None  # answered here (part of the checked surface)
    assert light.vocab_size == real.vocab_size  # not answered here: transformers' tokenizer, loaded now
    assert light._real is not None and type(light._real) is type(real)
    text = "hello <|im_start|> world"
    assert light(text, return_attention_mask=True)["attention_mask"] == real(text)["attention_mask"]
    assert light.decode([9707, 1879], skip_special_tokens=True) == real.decode([9707, 1879], skip_special_tokens=True)
    with pytest.raises(AttributeError):
        light._no_such_private_attribute  # noqa: B018 - private names are never delegated


@pytest.mark.usefixtures("fresh_recipes")
def test_a_tampered_pipeline_or_recipe_is_not_followed(model_dir):
    want = load_chat_tokenizer(model_dir, light=True)
    path = load_recipe.recipe_path(model_dir)
    pipeline = path.with_suffix(".pipeline")
    assert isinstance(load_chat_tokenizer(model_dir, light=True), LightTokenizer)
    good = pipeline.read_bytes()
    # a pipeline with one token's id changed: its sha256 is not the recipe's
    pipeline.write_bytes(good.replace(b'"hello":', b'"hellp":', 1))
    tok = load_chat_tokenizer(model_dir, light=True)
    assert not isinstance(tok, LightTokenizer) and tok("hello")["input_ids"] == want("hello")["input_ids"]
    assert pipeline.read_bytes() == good  # kept again from transformers' tokenizer
    assert isinstance(load_chat_tokenizer(model_dir, light=True), LightTokenizer)
    # facts edited in the recipe (the seal no longer matches): not read, recorded afresh
    obj = json.loads(path.read_text())
    obj["light"]["facts"]["attrs"]["pad_token_id"] = 0
    path.write_text(json.dumps(obj))
    assert light_tokenizer.recorded(model_dir) is None
    assert not isinstance(load_chat_tokenizer(model_dir, light=True), LightTokenizer)
    assert read_sealed_json(path)["light"]["facts"]["attrs"]["pad_token_id"] == want.pad_token_id
    # facts of the wrong shape, sealed: not used
    obj = read_sealed_json(path)
    obj["light"]["facts"]["attrs"] = {"pad_token_id": 0}
    path.write_bytes(sealed_json_bytes(obj))
    assert light_tokenizer.load(model_dir, lambda: want) is None
    # recorded by other code (another vlmpack): asked again
    obj["light"] = {**read_sealed_json(path)["light"], "code_sha256": "0" * 64}
    path.write_bytes(sealed_json_bytes(obj))
    assert light_tokenizer.recorded(model_dir) is None


@pytest.mark.usefixtures("fresh_recipes")
def test_a_tokenizer_it_cannot_stand_for_is_recorded_so(model_dir):
    tok = load_chat_tokenizer(model_dir)
    tok.split_special_tokens = True  # a tokenizer that splits its special tokens: not answered here
    assert light_tokenizer.record(model_dir, tok) is False
    assert light_tokenizer.recorded(model_dir) == {"ok": False}
    assert light_tokenizer.load(model_dir, lambda: tok) is None


def test_no_recipes_no_light_tokenizer(model_dir):
    saved = load_recipe._root[0]
    try:
        load_recipe.use_cache_root(None)
        assert not isinstance(load_chat_tokenizer(model_dir, light=True), LightTokenizer)
    finally:
        load_recipe._root[0] = saved


# A second process counts without importing transformers (or torch), with the same ids on 200 demo
# conversations: test_load_recipe.py::test_a_second_process_loads_without_torch_or_transformers (one pair of
# fresh processes for both modules' claims).
