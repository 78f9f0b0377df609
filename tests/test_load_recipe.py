"""Model load recipes (vlmpack.models.load_recipe): what transformers resolved for a model directory,
recorded once, gives the same tokenizer and the same counts on the next load, without torch; a recipe
that was tampered with is never followed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_models_gemma3 import gemma3_dir  # noqa: F401 - fixture (GemmaTokenizer)
from test_models_smolvlm import smolvlm_dir  # noqa: F401 - fixture (TokenizersBackend)

from vlmpack.fsio import read_sealed_json, sealed_json_bytes
from vlmpack.models import FAMILIES, load_recipe, model_type
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.qwen_image_rule import QwenImageSettings

#: one directory per tokenizer class AutoTokenizer picks in the suite: Qwen2Tokenizer (also InternVL's, LLaVA-OV's,
#: Qwen3-VL's), Qwen3_5Tokenizer, TokenizersBackend (also GLM-4.1V's, Kimi's, LLaVA-NeXT's), GemmaTokenizer
DIRS = ("model_dir", "qwen3_5_dir", "smolvlm_dir", "gemma3_dir")


@pytest.fixture
def fresh_recipes(tmp_path):
    """Recipes under a fresh cache root for the test (the process setting restored after it)."""
    saved = load_recipe._root[0]
    load_recipe.use_cache_root(tmp_path / "cache")
    yield
    load_recipe._root[0] = saved


@pytest.mark.usefixtures("fresh_recipes")
@pytest.mark.parametrize("name", DIRS)
def test_the_recorded_class_gives_the_auto_tokenizer(request, name):
    d = request.getfixturevalue(name)
    first = load_chat_tokenizer(d)  # AutoTokenizer, then the class recorded
    recipe = load_recipe.read(d, "tokenizer")
    assert recipe == {"class": type(first).__name__}
    second = load_chat_tokenizer(d)  # the class built directly
    assert second is not first and load_recipe.same_tokenizer(first, second)
    text = "Hello <|im_start|>user\n日本語 and tabs\t\t<image> 123456789"
    assert second(text)["input_ids"] == first(text)["input_ids"]
    messages = [{"role": "user", "content": "What is shown?"}, {"role": "assistant", "content": "A cat."}]
    assert second.apply_chat_template(messages, tokenize=False) == first.apply_chat_template(messages, tokenize=False)


@pytest.mark.usefixtures("fresh_recipes")
@pytest.mark.parametrize("name", ("model_dir", "qwen3_vl_dir", "qwen3_5_dir"))
def test_a_qwen_family_from_its_recipe_counts_like_its_processor(request, real_data, name):
    d = request.getfixturevalue(name)
    cls = FAMILIES[model_type(d)]
    built = cls(d)  # no recipe: the processor is built and its settings recorded
    assert "image_processor" in built.__dict__
    again = cls(d)
    assert "image_processor" not in again.__dict__  # counting does not build it
    assert again.image_settings == built.image_settings == QwenImageSettings.of(built.image_processor)
    proc = built.image_processor
    from PIL import Image

    sizes = {Image.open(p).size for p in sorted((real_data / "images").rglob("*.png"))[:400]}
    sizes |= {(1, 1), (28, 28), (10000, 50), (50, 10000), (4000, 3000), (201, 1), (200, 1)}
    for w, h in sorted(sizes):
        try:
            want = proc.get_number_of_image_patches(h, w) // proc.merge_size ** 2
        except ValueError:
            with pytest.raises(Exception, match="aspect ratio"):
                again.image_tokens(w, h)
            continue
        assert again.image_tokens(w, h) == built.image_tokens(w, h) == want, (w, h)
    assert again.placeholder()[0].tolist() == built.placeholder()[0].tolist()


@given(h=st.integers(1, 20000), w=st.integers(1, 20000), patch=st.sampled_from([14, 16]),
       merge=st.sampled_from([1, 2, 3]), lo=st.integers(1, 200_000), span=st.integers(0, 20_000_000))
def test_the_restated_rule_is_the_processors(h, w, patch, merge, lo, span):
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    proc = Qwen2VLImageProcessorPil(min_pixels=lo, max_pixels=lo + span, patch_size=patch, merge_size=merge)
    rule = QwenImageSettings.of(proc)
    assert rule == QwenImageSettings(lo, lo + span, patch, merge)
    try:
        want = proc.get_number_of_image_patches(h, w)
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            rule.patches(h, w)
        assert str(got.value) == str(e)
        return
    assert rule.patches(h, w) == want


@pytest.mark.usefixtures("fresh_recipes")
def test_a_tampered_recipe_is_not_followed(model_dir):
    load_chat_tokenizer(model_dir)  # records
    path = load_recipe.recipe_path(model_dir)
    want = load_chat_tokenizer(model_dir)
    for planted in ("subprocess", "Qwen2VLImageProcessorPil", "../evil"):
        path.write_bytes(sealed_json_bytes({"format": 1, "tokenizer": {"class": planted}}))
        assert load_recipe.tokenizer_class(planted) is None
        tok = load_chat_tokenizer(model_dir)  # AutoTokenizer: the planted name is never imported
        assert load_recipe.same_tokenizer(tok, want)
    # an edited recipe (the checksum no longer matches) counts as missing, and is recorded afresh
    obj = json.loads(path.read_text())
    obj["tokenizer"] = {"class": "TokenizersBackend"}
    path.write_text(json.dumps(obj))
    assert load_recipe.read(model_dir, "tokenizer") is None
    assert load_recipe.same_tokenizer(load_chat_tokenizer(model_dir), want)
    assert read_sealed_json(path)["tokenizer"] == {"class": "Qwen2Tokenizer"}
    # image settings that are not four positive ints are not used: the processor is asked
    cls = FAMILIES[model_type(model_dir)]
    for bad in ({"min_pixels": -1, "max_pixels": 10, "patch_size": 14, "merge_size": 2},
                {"min_pixels": 1.5, "max_pixels": 10, "patch_size": 14, "merge_size": 2}, "x"):
        path.write_bytes(sealed_json_bytes({"format": 1, "image:qwen2_vl": bad}))
        fam = cls(model_dir)
        assert fam.image_settings == QwenImageSettings.of(fam.image_processor)
        assert fam.image_tokens(640, 480) == 391


def test_no_recipe_without_a_cache_and_a_load_where_none_can_be_written(tmp_path, model_dir):
    saved = load_recipe._root[0]
    try:
        load_recipe.use_cache_root(None)  # --cache-dir off
        assert load_recipe.recipe_path(model_dir) is None and load_recipe.read(model_dir, "tokenizer") is None
        assert type(load_chat_tokenizer(model_dir)).__name__ == "Qwen2Tokenizer"
        blocked = tmp_path / "a-file"  # a cache root that cannot hold a folder: recording fails quietly
        blocked.write_text("x")
        load_recipe.use_cache_root(blocked)
        assert type(load_chat_tokenizer(model_dir)).__name__ == "Qwen2Tokenizer"
        assert load_recipe.read(model_dir, "tokenizer") is None and blocked.read_text() == "x"
    finally:
        load_recipe._root[0] = saved


def test_a_second_process_loads_without_torch_or_transformers(tmp_path, model_dir, real_data):
    """Two fresh processes load the demo model and count 200 demo conversations (and one short one): the
    first asks transformers and records (recipe, light tokenizer); the second follows the recipe without
    importing torch or transformers (:mod:`vlmpack.models.light_tokenizer`), builds no image processor,
    and gives the same image tokens and ids. (One pair of processes for both modules' claims.)"""
    from test_light_tokenizer import _demo_conversations

    code = ("import sys, json; from vlmpack.models import load_model; from vlmpack.pack.validate import "
            "text_bound_of; f = load_model(sys.argv[1]); f.fast_bpe; text_bound_of(sys.argv[1]); "
            "convs = [json.loads(x)['messages'] for x in open(sys.argv[2]).read().splitlines()]; "
            "print(json.dumps({'torch': 'torch' in sys.modules, 'transformers': 'transformers' in sys.modules, "
            "'built': 'image_processor' in f.__dict__, 'light': type(f.tokenizer).__name__, "
            "'tokens': f.image_tokens(640, 480), 'ids': f.token_ids(convs, ['reject'] * len(convs))}))")
    convs = tmp_path / "convs.jsonl"
    hi = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    convs.write_text("\n".join(json.dumps({"messages": m}) for m in [hi, *_demo_conversations(real_data, 200)]))
    env = {**os.environ, "VLMPACK_CACHE": str(tmp_path / "cache")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code, str(model_dir), str(convs)], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1]) for _ in range(2)]
    # the first load asks transformers (and records)
    assert runs[0]["torch"] and runs[0]["transformers"] and runs[0]["built"] and runs[0]["light"] == "Qwen2Tokenizer"
    # the second follows the recipe and the light tokenizer
    assert not runs[1]["torch"] and not runs[1]["transformers"] and not runs[1]["built"]
    assert runs[1]["light"] == "LightTokenizer"
    assert runs[0]["tokens"] == runs[1]["tokens"] == 391
    assert runs[0]["ids"] == runs[1]["ids"] and len(runs[1]["ids"]) > 150
    assert len(list((Path(env["VLMPACK_CACHE"]) / "load").glob("*.json"))) == 1
