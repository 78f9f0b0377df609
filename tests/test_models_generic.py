"""The generic family (vlmpack.models.generic): any processor that builds and answers
``_get_num_multimodal_tokens``, counted from sizes, trained through the processor itself.

- On the Qwen2.5-VL directory, forced generic: every demo sample's count and label mask equal the
  dedicated Qwen2-VL family's (itself exact against the processor: test_counting.py).
- On a LLaVA-NeXT stand-in (``model_type`` ``llava_next``, no dedicated family): the whole demo set
  packed, every image pack re-encoded by the collator, which calls ``LlavaNextProcessor`` on each
  sample's decoded images and raises on any length other than the recorded one.
- Processors that cannot be counted this way are refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import last_hidden, logit_diff
from hypothesis import given
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.errors import ConfigError
from vlmpack.models import MediaSize, load_model
from vlmpack.models.chatml import assistant_label_mask
from vlmpack.models.generic import GenericFamily
from vlmpack.models.generic_rules import cat_padded
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs, shard_paths
from vlmpack.verify import recount_shard


@pytest.fixture(scope="module")
def llava_next_dir(tmp_path_factory) -> Path:
    from conftest import CACHE, cache_lock
    from demo_data.generic_dirs import build_llava_next_model_dir

    with cache_lock():
        return build_llava_next_model_dir(CACHE / "llava_next")


def _media(s: dict) -> list[MediaSize]:
    return [MediaSize(m["kind"], m["width"], m["height"]) for m in s["media"]]


def test_forced_generic_equals_the_dedicated_qwen_family_on_every_sample(tmp_path_factory, real_data, model_dir):
    out = tmp_path_factory.mktemp("gq") / "packs"
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data), model=str(model_dir),
                         output=str(out), seq_len=16384, workers=2, progress=False))
    dedicated = load_model(str(model_dir))
    generic = GenericFamily(model_dir)
    assert (generic.processor_class, generic.offset, generic.multi_image, generic.repeats) == \
        ("Qwen2_5_VLProcessor", -1, True, True)
    assert generic.image_token_id == dedicated.image_token_id
    samples = [s for raw in read_packs(out) for s in json.loads(raw["json"])["samples"]]
    assert len(samples) >= 5700 and sum(bool(s["media"]) for s in samples) >= 2900
    ids = generic.token_ids([s["messages"] for s in samples], [s.get("special_tokens") for s in samples])
    for s, x in zip(samples, ids):
        x = np.asarray(x, dtype=np.int32)
        media = _media(s)
        tokens = [generic.media_tokens(m, sample_images=len(media)) for m in media]
        assert tokens == [m["num_tokens"] for m in s["media"]], s["id"]
        assert generic.check_ids(x, len(media), 0) is None, s["id"]
        assert generic.num_tokens(x, tokens) == s["num_tokens"], s["id"]
        full = dedicated.expand(x, tokens)
        assert np.array_equal(generic.expand(x, tokens), full), s["id"]
        assert np.array_equal(generic.label_mask(full), dedicated.label_mask(full)), s["id"]


def test_llava_next_packs_and_its_processor_gives_every_recorded_length(tmp_path_factory, real_data, llava_next_dir):
    from image_memo import shape_only_pixels

    from vlmpack.train.collate import PackCollator

    fam = load_model(str(llava_next_dir))
    assert isinstance(fam, GenericFamily) and fam.processor_class == "LlavaNextProcessor"
    assert (fam.offset, fam.multi_image, fam.repeats) == (-1, True, True)
    # the count depends on the size (anyres grid): not one constant
    assert len({fam.image_tokens(w, h) for w, h in [(12, 12), (640, 480), (480, 640), (3000, 300), (336, 1008)]}) == 5
    out = tmp_path_factory.mktemp("gln") / "packs"
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data),
                         model=str(llava_next_dir), output=str(out), seq_len=32768, workers=2, progress=False,
                         group_by_kind=True))
    report = json.loads((out / "report.json").read_text())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert not {r["reason"] for r in rejects} & {"overlong", "template_error", "media_unsupported"}
    collator = PackCollator(llava_next_dir)
    im_start, im_end = (fam.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>"))
    assistant, newline = fam.tokenizer.convert_tokens_to_ids("assistant"), fam.tokenizer.encode("\n")[0]
    n_image_samples = n_images = 0
    # the processor's own call on every image sample's decoded pixels (pixel arithmetic as shape-true
    # stand-ins: lengths depend on sizes only, see image_memo.shape_only_pixels)
    with shape_only_pixels():
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            if not any(s["media"] for s in meta["samples"]):
                continue
            batch = collator(raw)  # LlavaNextProcessor per sample; raises on any length but the recorded one
            cu = batch["cu_seqlens"].tolist()
            assert np.diff(cu).tolist() == [s["num_tokens"] for s in meta["samples"]], raw["__key__"]
            assert batch["position_ids"][0, cu[:-1]].tolist() == [0] * (len(cu) - 1)
            ids = batch["input_ids"][0].numpy()
            for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]):
                assert np.count_nonzero(ids[a:z] == fam.image_token_id) == sum(m["num_tokens"] for m in s["media"])
                # the header-only expansion (--pretokenize, inspect, verify) == the processor's ids
                assert np.array_equal(fam.encode(s["messages"], [m["num_tokens"] for m in s["media"]]), ids[a:z])
                want = assistant_label_mask(ids[a:z], im_start_id=im_start, assistant_id=assistant, im_end_id=im_end,
                                            newline_id=newline)
                want[0] = False  # the collator never labels a sample's first token
                assert np.array_equal(batch["labels"][0, a:z].numpy() != -100, want), s["id"]
                n_image_samples += bool(s["media"])
                n_images += len(s["media"])
            assert batch["pixel_values"].shape[0] == sum(len(s["media"]) for s in meta["samples"])
    image_lines = sum(1 for x in (real_data / "real_sft.jsonl").read_text().splitlines()
                      if (r := json.loads(x)).get("images") or r.get("image"))
    rejected_images = sum(1 for r in rejects if r.get("line") and r["reason"].startswith("media"))
    assert n_image_samples + rejected_images == image_lines == 2937 and n_image_samples >= 2900
    assert report["samples_packed"] >= 5700, report.get("samples_packed")
    assert report["model"] == {"model_type": "llava_next", "family": "generic", "name": "LlavaNextProcessor"}
    # vlmpack verify's recount (from the shard bytes: headers, template, tokenizer) agrees
    assert [p for shard in shard_paths(out) for p in recount_shard(str(shard), str(llava_next_dir))] == []
    print(f"LlavaNextProcessor on {n_image_samples} image samples ({n_images} images): every length as counted")


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=4))
def test_cat_padded_zero_pads_each_tensor_to_the_largest_then_concatenates(shapes):
    """The collator's join of the processor's per-sample tensors (LLaVA-NeXT: patch counts differ), and
    the sweep's stand-in of it (``image_memo``: zeros in, one zero view out) against it."""
    from image_memo import _cat_padded_standin

    tensors = [torch.arange(1, 1 + a * b * c, dtype=torch.float32).reshape(a, b, c) for a, b, c in shapes]
    h, w = (max(s[d] for s in shapes) for d in (1, 2))
    want = torch.cat([torch.nn.functional.pad(t, (0, w - t.shape[2], 0, h - t.shape[1])) for t in tensors])
    assert torch.equal(cat_padded(tensors), want)
    zeros = [torch.from_numpy(np.broadcast_to(np.float32(0), s)) for s in shapes]
    got = _cat_padded_standin(cat_padded)(zeros)
    assert got.shape == want.shape and got.dtype == want.dtype and not got.any()


def test_processors_that_cannot_be_counted_are_refused_in_one_line(tmp_path, model_dir):
    def standin(name: str, model_type: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
            (d / f).write_bytes((model_dir / f).read_bytes())
        (d / "config.json").write_text(json.dumps({"model_type": model_type}))
        return d

    for name, model_type, says in [("bert", "bert", "has no processor for model_type 'bert'"),
                                   ("pixtral", "pixtral", "cannot be")]:
        with pytest.raises(ConfigError) as e:
            load_model(str(standin(name, model_type)))
        msg = str(e.value)
        assert "\n" not in msg and f"model_type {model_type!r} has no dedicated family" in msg and says in msg, msg

    # Gemma 3's processor builds and answers _get_num_multimodal_tokens, but writes "\n\n" around its image
    # tokens, which merges with the text around them: no per-image constant, refused by the calibration (the
    # reason gemma3 has a dedicated family, models/gemma3.py, which load_model picks; the generic one is asked here)
    from transformers import AutoTokenizer

    d = tmp_path / "gemma3"
    tok = AutoTokenizer.from_pretrained(str(model_dir), extra_special_tokens={
        "image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"})
    tok.save_pretrained(str(d))
    (d / "config.json").write_text(json.dumps({"model_type": "gemma3"}))
    (d / "processor_config.json").write_text(json.dumps({
        "processor_class": "Gemma3Processor", "image_seq_length": 256,
        "image_processor": {"image_processor_type": "Gemma3ImageProcessor", "size": {"height": 896, "width": 896},
                            "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 2}}))
    (d / "chat_template.jinja").write_text(
        "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\\n' }}{%- for p in m['content'] -%}"
        "{%- if p['type'] == 'image' -%}{{ '<start_of_image>' }}{%- else -%}{{ p['text'] }}{%- endif -%}"
        "{%- endfor -%}{{ '<|im_end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
    with pytest.raises(ConfigError) as e:
        GenericFamily(str(d))
    msg = str(e.value)
    assert "\n" not in msg and "Gemma3Processor's image tokens cannot be counted exactly from sizes" in msg, msg
    assert "can merge with the text around it" in msg, msg


# ------------------------------------------------------------------------------------ packed == alone
ATOL = 1e-4


def tiny_llava_next(model_dir: Path, image_token_id: int, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``LlavaNextForConditionalGeneration`` with tiny towers: CLIP vision (hidden 32, 2
    layers, 2 heads) at the stand-in's 336 px / patch 14 (576 features per crop + CLS), Qwen2 text
    (hidden 64, 2 layers, 4 / 2 KV heads) with the Qwen vocabulary; the stand-in's pinpoints and
    feature strategy, its ``<image>`` id; float32, eval mode."""
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    real = json.loads((model_dir / "config.json").read_text())
    torch.manual_seed(seed)
    text = dict(model_type="qwen2", vocab_size=real["text_config"]["vocab_size"], hidden_size=64,
                intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=32768, tie_word_embeddings=True)
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=336, patch_size=14, projection_dim=32)
    cfg = LlavaNextConfig(text_config=text, vision_config=vision, image_token_index=image_token_id,
                          image_grid_pinpoints=real["image_grid_pinpoints"], vision_feature_layer=-2,
                          vision_feature_select_strategy="default", tie_word_embeddings=True)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return LlavaNextForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def next_packs(real_data, llava_next_dir):
    """Two real multi-sample image packs of the stand-in: one with a multi-image sample, one with >= 3 samples."""
    from demo_data.packs import demo_packs, multi_sample_image_packs

    return multi_sample_image_packs(demo_packs(real_data, llava_next_dir, seq_len=6144, n_lines=300))


def _alone(fam, model, pack) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of each sample of ``pack`` alone: the processor's own call on the
    sample's text and images (decoded by transformers' ``load_image``), no positions, no mask."""
    import io

    from PIL import Image
    from transformers.image_utils import load_image

    out = []
    for s in json.loads(pack["json"])["samples"]:
        text = fam.render(s["messages"])
        images = [load_image(Image.open(io.BytesIO(pack[m["part"]]))) for m in s["media"]]
        ref = fam.processor(text=[text], images=[images], return_tensors="pt", **fam.text_kwargs(text))
        out.append((ref["input_ids"][0], last_hidden(model, input_ids=ref["input_ids"],
                                                     pixel_values=ref["pixel_values"], image_sizes=ref["image_sizes"])))
    return out


@pytest.mark.parametrize("dense", [True, False], ids=["mask", "posids"])
def test_llava_next_packed_equals_alone_and_a_plain_causal_mask_differs(next_packs, llava_next_dir, dense):
    from vlmpack.train import PackCollator, model_inputs
    from vlmpack.train.testing import plain_causal_inputs

    fam = load_model(str(llava_next_dir))
    model = tiny_llava_next(llava_next_dir, fam.image_token_id)
    collator = PackCollator(llava_next_dir, attn_implementation="sdpa", dense_mask=dense)
    for pack in next_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 2 and batch["pixel_values"].dim() == 5 and len(batch["image_sizes"]) >= 2
        h = last_hidden(model, **model_inputs(batch, "sdpa"))
        alone = _alone(fam, model, pack)
        cu = batch["cu_seqlens"].tolist()
        for s, (a, z) in enumerate(zip(cu[:-1], cu[1:])):
            ids, ref = alone[s]
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            diff = logit_diff(model, h[a:z], ref, atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"
    if dense:  # negative control: per-sample positions, plain causal mask: the second sample sees the first
        batch = collator(next_packs[0])
        h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
        alone = _alone(fam, model, next_packs[0])
        cu = batch["cu_seqlens"].tolist()
        assert logit_diff(model, h[:cu[1]], alone[0][1], atol=ATOL) < ATOL
        assert logit_diff(model, h[cu[1]:cu[2]], alone[1][1]) > 1e-3
