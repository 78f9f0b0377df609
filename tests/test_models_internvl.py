"""InternVL (HF format): exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data/internvl_dir.py`` 's InternVL3-1B-hf directory (real
Qwen BPE tokenizer files with InternVL's added tokens, the published chat template, config and
processor configs; no weights).

1. Every sample of the real demo set is packed by ``vlmpack pack --model <internvl>``; for each
   image sample, transformers' ``InternVLProcessor.__call__`` (its chat template,
   ``GotOcr2ImageProcessorPil`` tiling on the pixels decoded by ``load_image``, its
   ``<img><IMG_CONTEXT>*n</img>`` expansion) gives the reference ``input_ids``; the recorded
   ``num_tokens``, the recorded per-image tokens, ``family.encode`` and the collator's ids
   (``PackCollator`` over the real shards) must all equal it, and the processor's tiles must be
   the tokens / ``image_seq_length``. Every sample of every pack (text-only ones too) must
   re-encode in the collator to its recorded length. The test stops at the first difference.
2. A tiny random ``InternVLForConditionalGeneration`` (InternViT tower + Qwen2 decoder with the real
   vocabulary, built below from ``InternVLConfig``) gives the same logits on a packed row as on
   each sample run alone through the model's own path, with ``sdpa`` and ``eager`` block masks and
   the mask-free position-ids path; a plain causal mask (negative control) differs. Logits are
   compared through the model's own ``lm_head`` (``conftest.logit_diff``) on the last hidden states: a
   Cauchy-Schwarz bound where it is already below 1e-4, else the exact maximum in 256-token chunks (a float32
   ``[T, 152000]`` logits row is 2-4 GB).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import last_hidden, logit_diff
from demo_data.packs import demo_packs, first_image_packs
from image_memo import assert_sample_encodes, pack_reference, shape_only_pixels, shared_preprocess
from PIL import Image

from vlmpack.config import load_config
from vlmpack.models import load_model
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
    """transformers' ``InternVLProcessor`` built from the directory without torchvision: the
    constructor's class check of the (torchvision) video processor is skipped and no video
    processor is given; ``image_seq_length`` from ``processor_config.json`` as
    ``from_pretrained`` passes it. No video passes through it here."""
    from transformers import AutoTokenizer
    from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.processing_internvl import InternVLProcessor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = GotOcr2ImageProcessorPil.from_pretrained(str(model_dir))
    seq = json.loads((model_dir / "processor_config.json").read_text())["image_seq_length"]
    cls = type("InternVLProcessorNoVideo", (InternVLProcessor,), {"check_argument_for_proper_class": lambda *a: None})
    return cls(image_processor=ip, tokenizer=tok, video_processor=None, image_seq_length=seq,
               chat_template=tok.chat_template)


def tiny_internvl(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``InternVLForConditionalGeneration``: vision hidden 32, 2 layers, 2 heads, the
    directory's tile size and patch (448 / 14) and ``downsample_ratio`` (so a tile still gives
    ``image_seq_length`` features); text: Qwen2 with hidden 64, 2 layers, 4 heads / 2 KV heads and
    the tokenizer's full vocabulary; float32, eval mode. Token ids from ``model_dir``'s config."""
    from transformers import AutoTokenizer, InternVLConfig, InternVLForConditionalGeneration

    torch.manual_seed(seed)
    cfg = json.loads((model_dir / "config.json").read_text())
    vc = cfg["vision_config"]
    text = dict(model_type="qwen2", vocab_size=len(AutoTokenizer.from_pretrained(str(model_dir))), hidden_size=64,
                intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=32768, tie_word_embeddings=True)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=vc["image_size"], patch_size=vc["patch_size"], attention_bias=vc["attention_bias"],
                  use_qk_norm=vc["use_qk_norm"], norm_type=vc["norm_type"], use_mean_pooling=vc["use_mean_pooling"])
    config = InternVLConfig(text_config=text, vision_config=vision, image_token_id=cfg["image_token_id"],
                            downsample_ratio=cfg["downsample_ratio"], vision_feature_layer=-1,
                            vision_feature_select_strategy="default", tie_word_embeddings=True)
    for c in (config, config.text_config, config.vision_config):
        c._attn_implementation = attn_implementation
    return InternVLForConditionalGeneration(config).float().eval()


def test_family_is_registered(internvl_dir):
    fam = load_model(str(internvl_dir))
    assert fam.name == "internvl" and not fam.mrope
    assert (fam.image_seq_length, fam.tile_size) == (256, (448, 448))
    assert (fam.start_image_token_id, fam.end_image_token_id, fam.image_token_id) == (151665, 151666, 151667)
    assert fam.images_kwargs["crop_to_patches"] is True  # InternVLProcessor's default beats the file's false
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert fam.render(msgs) == "<|im_start|>user\n<IMG_CONTEXT>\nhi<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
    ids = fam.encode(msgs, [512])
    assert fam.tokenizer.decode(ids[fam.label_mask(ids)]) == "ok<|im_end|>"  # ChatML labels
    # the processor's regex takes literal <video> / <IMG_CONTEXT> text as media: refused in user text
    for t in ("<video>", "<IMG_CONTEXT>", "<img>"):
        assert fam.find_special_token([{"role": "user", "content": [{"type": "text", "text": f"a {t}"}]}]) == (0, t)


def test_header_rule_equals_processor_tiling(internvl_dir):
    """Tiles from the header (no pixels) == tiles of the processor's own call, over sizes that hit
    every grid of 1..12 tiles and the tie-break of equal aspect ratios."""
    fam = load_model(str(internvl_dir))
    proc = _processor(internvl_dir)
    sizes = [(w, h) for w in (1, 14, 300, 317, 448, 449, 640, 897, 1344, 3000) for h in (1, 200, 318, 448, 1000, 5000)]
    imgs = [Image.new("RGB", s) for s in sizes]
    with shape_only_pixels():  # tile counts depend on sizes only: pixel arithmetic as shape-true stand-ins
        out = proc.image_processor(images=imgs, crop_to_patches=True, return_tensors="np")
    want = [n * 256 for n in out["num_patches"]]
    assert [fam.image_tokens(w, h) for w, h in sizes] == want
    assert len(set(out["num_patches"])) >= 8  # many different grids covered


def _runs(ids: np.ndarray, start: int, end: int, ctx: int) -> list[int]:
    """<IMG_CONTEXT> count inside each <img> ... </img> of reference ids (their own structure)."""
    s, e = np.flatnonzero(ids == start), np.flatnonzero(ids == end)
    assert len(s) == len(e) and (s < e).all()
    return [int(np.count_nonzero(ids[a + 1:b] == ctx)) for a, b in zip(s, e)]


def test_every_image_sample_equals_internvl_processor(tmp_path_factory, real_data, internvl_dir):
    from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil

    out = tmp_path_factory.mktemp("ivlcount") / "packs"
    # text and image samples in packs of their own: the image packs go through the collator and the
    # processor, the text samples are compared with the tokenizer's own chat template, batched, below
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data),
                         model=str(internvl_dir), output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False,
                         group_by_kind=True))
    proc = _processor(internvl_dir)
    fam = load_model(str(internvl_dir))
    collator = PackCollator(internvl_dir)
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()
    image_lines = {i + 1 for i, x in enumerate(lines) if (r := json.loads(x)).get("images") or r.get("image")}
    rejected = {r["line"]: r for x in (out / "rejects.jsonl").read_text().splitlines()
                if (r := json.loads(x))["line"] in image_lines}
    compared = n_media = n_samples = n_image_packs = 0
    text_samples = []
    with shared_preprocess(GotOcr2ImageProcessorPil) as memo:
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            if not any(s["media"] for s in meta["samples"]):
                text_samples += meta["samples"]
                continue
            batch = collator(raw)  # re-encodes with the processor's pixels; raises on any count mismatch
            cu = batch["cu_seqlens"].tolist()
            lengths = np.diff(cu).tolist()
            assert lengths == [s["num_tokens"] for s in meta["samples"]], raw["__key__"]
            n_samples += len(lengths)
            at = [(s, a, z) for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]) if s["media"]]
            # the reference: the processor on the pack's image samples as one batch (the same images, in
            # the same order, as the collator's image-processor call: one pixel computation, see image_memo)
            images, _, wants = pack_reference(proc, raw, [s for s, _, _ in at])
            n_image_packs += 1
            tiles = iter(memo.last["num_patches"])  # per image, in order (the processor does not return it)
            for j, (s, a, z) in enumerate(at):
                want = wants[j]
                tokens = _runs(want, fam.start_image_token_id, fam.end_image_token_id, fam.image_token_id)
                where = f"sample {s['id']!r}"
                assert [next(tiles) * 256 for _ in s["media"]] == tokens, where  # tiles x image_seq_length
                assert_sample_encodes(fam, s, tokens, want, batch["input_ids"][0, a:z].numpy())
                compared += 1
                n_media += len(images[j])
            assert next(tiles, None) is None, raw["__key__"]
    print(f"compared {compared} image samples ({n_media} images) with InternVLProcessor; collator lengths of "
          f"{n_samples} samples; {len(rejected)} image samples rejected: "
          f"{sorted({r['reason'] for r in rejected.values()})}")
    # the collator and the processor saw the same pixels and options for every pack (one computation each)
    assert memo.hits == memo.misses == n_image_packs
    assert memo.shared_images == n_media  # the reference's images: the collator's decode (one each)
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert compared + len(rejected) == len(image_lines) == 2937
    assert compared >= 2900 and not {r["reason"] for r in rejected.values()} & {"overlong", "template_error"}
    # every text sample: its count is the tokenizer's on its own chat template (what the processor does)
    assert len(text_samples) >= 2800 and n_samples + len(text_samples) + len((out / "rejects.jsonl").read_text(
        ).splitlines()) == len(lines)
    rendered = [fam.tokenizer.apply_chat_template(s["messages"], tokenize=False) for s in text_samples]
    assert [len(x) for x in fam.tokenizer(rendered)["input_ids"]] == [s["num_tokens"] for s in text_samples]


# ------------------------------------------------------------------------------------ packed == alone
SEQ_LEN = 1024


@pytest.fixture(scope="module")
def image_packs(real_data, internvl_dir):
    out = demo_packs(real_data, internvl_dir, seq_len=SEQ_LEN, n_lines=300)
    return first_image_packs(out)


@pytest.fixture(scope="module")
def ivl_models(internvl_dir):
    return {impl: tiny_internvl(internvl_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def ivl_alone():
    return {}


def _alone(cache, model, batch, fam):
    """Last hidden states of every sample of ``batch`` run alone: its ids and its own tiles (found from its
    ``<img>`` ... ``</img>`` runs, not from the collator's grids), no positions, no mask."""
    key = tuple(batch["sample_ids"])
    if key in cache:
        return cache[key]
    cu = batch["cu_seqlens"].tolist()
    ids = batch["input_ids"][0]
    out, ti = [], 0
    for a, z in zip(cu[:-1], cu[1:]):
        s_ids = ids[a:z]
        tiles = sum(_runs(s_ids.numpy(), fam.start_image_token_id, fam.end_image_token_id,
                          fam.image_token_id)) // fam.image_seq_length
        kw = {"pixel_values": batch["pixel_values"][ti:ti + tiles]} if tiles else {}
        ti += tiles
        out.append(last_hidden(model, input_ids=s_ids[None], **kw))
    assert ti == len(batch["pixel_values"])
    cache[key] = out
    return out


CASES = [("sdpa", True), ("eager", True), ("sdpa", False)]  # (attn, dense mask); False: position ids only


@pytest.mark.parametrize("attn,dense", CASES, ids=[f"{c[0]}-{'mask' if c[1] else 'posids'}" for c in CASES])
def test_packed_equals_alone(image_packs, ivl_models, ivl_alone, internvl_dir, attn, dense):
    fam = load_model(str(internvl_dir))
    collator = PackCollator(internvl_dir, attn_implementation=attn, dense_mask=dense)
    for pack in image_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 2 and batch["image_input_keys"] == ("pixel_values",)
        assert batch["position_ids"].shape == batch["input_ids"].shape  # 1-D positions
        model = ivl_models[attn]
        h = last_hidden(model, **model_inputs(batch, attn))
        alone = _alone(ivl_alone, ivl_models["sdpa"], batch, fam)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            diff = logit_diff(model, h[a:z], alone[s], atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(image_packs, ivl_models, ivl_alone, internvl_dir):
    """Per-sample positions but a plain causal mask: the first sample stays exact, the second
    attends to the first and differs, so the comparison above can fail."""
    model = ivl_models["sdpa"]
    batch = PackCollator(internvl_dir, attn_implementation="sdpa")(image_packs[0])
    alone = _alone(ivl_alone, model, batch, load_model(str(internvl_dir)))
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1]) > 1e-3


def test_verify_passes_on_a_internvl_output(real_data, internvl_dir):
    """`vlmpack verify` recounts every sample of a real internvl output from its shard bytes."""
    from vlmpack.verify import verify_output

    out = demo_packs(real_data, internvl_dir, seq_len=SEQ_LEN, n_lines=300)
    res = verify_output(out, workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200
