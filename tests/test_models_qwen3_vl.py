"""Qwen3-VL: exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data`` 's Qwen3-VL directory (real Qwen3 tokenizer files,
the published Qwen3-VL chat template, config and processor config; no weights).

1. Every image sample of the real demo set is packed by ``vlmpack pack --model <qwen3_vl>``; for
   each, transformers' ``Qwen3VLProcessor.__call__`` (its chat template, ``Qwen2VLImageProcessorPil``
   on the pixels decoded by ``load_image``, its ``<|image_pad|>`` expansion) gives the reference
   ``input_ids``; the recorded ``num_tokens``, the recorded per-image tokens, ``family.encode``
   and the collator's ids (``PackCollator`` over the real shards) must all equal it. The test
   stops at the first difference.
2. A tiny random ``Qwen3VLForConditionalGeneration`` (and its MoE variant) gives the same logits
   on a packed row as on each sample run alone through the model's own path (``mm_token_type_ids``
   passed, transformers computes mRoPE itself), with ``sdpa`` and ``eager`` block masks and the
   mask-free ``[4, 1, T]`` position-ids path; a plain causal mask (negative control) differs.
   Logits are compared through the model's own ``lm_head`` (``conftest.logit_diff``) on the last hidden
   states: a Cauchy-Schwarz bound where it is already below 1e-4, else the exact maximum in 256-token chunks
   (a float32 ``[T, 152000]`` logits row is 2-4 GB).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import last_hidden, logit_diff
from demo_data.packs import demo_packs, first_image_packs
from image_memo import assert_grid_pack, pack_reference, shared_preprocess

from vlmpack.config import load_config
from vlmpack.models import load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs, tiny_qwen3_vl

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4


# The every-image sweep packs the whole demo set at this L: above its longest sample (29,891 tokens
# with InternVL, 16,179 with Qwen3-VL, 12,846 with LLaVA-OneVision), so no sample is overlong, and small
# enough that one pack's pixel tensors in the collator stay far below a gigabyte.
SWEEP_SEQ_LEN = 32768

def _processor(model_dir: Path):
    """transformers' ``Qwen3VLProcessor`` built from the directory without torchvision: its
    constructor's class check of the (torchvision) video processor is skipped and no video
    processor is given; no video passes through it here."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = Qwen2VLImageProcessorPil.from_pretrained(str(model_dir))
    cls = type("Qwen3VLProcessorNoVideo", (Qwen3VLProcessor,), {"check_argument_for_proper_class": lambda *a: None})
    return cls(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=tok.chat_template)


def test_family_is_registered(qwen3_vl_dir):
    fam = load_model(str(qwen3_vl_dir))
    assert fam.name == "qwen3_vl" and fam.mrope
    assert (fam.patch_size, fam.merge_size) == (16, 2)
    assert fam.rope_model_class().__name__ == "Qwen3VLModel"
    # Qwen3-VL's template adds no default system turn (Qwen2-VL's does)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert fam.render(msgs) == "<|im_start|>user\nhi<|im_end|>\n"


@pytest.mark.parametrize("model_fixture", ["qwen3_vl_dir", "qwen3_5_dir"])
def test_every_image_sample_equals_qwen3_vl_processor(request, tmp_path_factory, real_data, model_fixture):
    """Qwen3-VL, and Qwen3.5 (transformers maps ``qwen3_5`` to the same ``Qwen3VLProcessor``; its
    directory holds stand-in tokenizer and template, see tools/demo_data/model_files/qwen3_5)."""
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    qwen3_vl_dir = request.getfixturevalue(model_fixture)
    out = tmp_path_factory.mktemp("q3count") / "packs"
    # text and image samples in packs of their own: the image packs go through the collator and the
    # processor, the text samples (whose counts a mixed pack's collator call would check) are compared
    # with the tokenizer's own chat template, batched, below
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data),
                         model=str(qwen3_vl_dir), output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False,
                         group_by_kind=True))
    proc = _processor(qwen3_vl_dir)
    fam = load_model(str(qwen3_vl_dir))
    # lengths only: the Gated DeltaNet layers of Qwen3.5 do not matter here (see test_models_qwen3_5.py)
    collator = PackCollator(qwen3_vl_dir, rope_impl="numpy", allow_linear_attention_leak=True)
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()
    image_lines = {i + 1 for i, x in enumerate(lines) if (r := json.loads(x)).get("images") or r.get("image")}
    rejected = {r["line"]: r for x in (out / "rejects.jsonl").read_text().splitlines()
                if (r := json.loads(x))["line"] in image_lines}
    compared = n_media = n_image_packs = 0
    text_samples = []
    with shared_preprocess(Qwen2VLImageProcessorPil) as memo:
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            if not any(s["media"] for s in meta["samples"]):
                text_samples += meta["samples"]
                continue
            batch = collator(raw)  # re-encodes with the processor's pixels; raises on any count mismatch
            cu = batch["cu_seqlens"].tolist()
            at = [(s, a, z) for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]) if s["media"]]
            # the reference: the processor on the pack's image samples as one batch (the same images, in the
            # same order, as the collator's image-processor call: one pixel computation, see image_memo)
            images, ref, wants = pack_reference(proc, raw, [s for s, _, _ in at])
            n_image_packs += 1
            n_media += assert_grid_pack(fam, raw["__key__"], batch, at, images, ref, wants)
            compared += len(at)
    print(f"{fam.name}: compared {compared} image samples ({n_media} images) with Qwen3VLProcessor; "
          f"{len(rejected)} image samples rejected: {sorted({r['reason'] for r in rejected.values()})}")
    # the collator and the processor saw the same pixels and options for every pack (one computation each)
    assert memo.hits == memo.misses == n_image_packs
    assert memo.shared_images == n_media  # the reference's images: the collator's decode (one each)
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert compared + len(rejected) == len(image_lines) == 2937
    assert compared >= 2900 and not {r["reason"] for r in rejected.values()} & {"overlong", "template_error"}
    # every text sample: its count is the tokenizer's on its own chat template (what the processor does)
    assert len(text_samples) >= 2800
    rendered = [fam.tokenizer.apply_chat_template(s["messages"], tokenize=False) for s in text_samples]
    assert [len(x) for x in fam.tokenizer(rendered)["input_ids"]] == [s["num_tokens"] for s in text_samples]
    if model_fixture == "qwen3_vl_dir":  # a qwen3_5 output: tests/test_models_qwen3_5.py (the same family code)
        from vlmpack.packfmt import shard_paths
        from vlmpack.verify import recount_shard

        # the recount of `vlmpack verify` (its check part runs on outputs of every family elsewhere): every
        # sample of the whole Qwen3-VL output counts again from its shard bytes to what it records
        assert [p for shard in shard_paths(out) for p in recount_shard(str(shard), str(qwen3_vl_dir))] == []


# ------------------------------------------------------------------------------------ packed == alone
SEQ_LEN = 1024


@pytest.fixture(scope="module")
def image_packs(real_data, qwen3_vl_dir):
    out = demo_packs(real_data, qwen3_vl_dir, seq_len=SEQ_LEN, n_lines=300)
    return first_image_packs(out)


@pytest.fixture(scope="module")
def q3_models(qwen3_vl_dir):
    return {(moe, impl): tiny_qwen3_vl(qwen3_vl_dir, attn_implementation=impl, moe=moe)
            for moe in (False, True) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def q3_alone():
    return {}


def _alone(cache, model, batch, moe):
    key = (moe, tuple(batch["sample_ids"]))
    if key in cache:
        return cache[key]
    cu = batch["cu_seqlens"].tolist()
    grids = batch["image_grid_thw"]
    patches = grids.prod(-1).tolist()
    img_tok = model.config.image_token_id
    ids = batch["input_ids"][0]
    out, gi, pi = [], 0, 0
    for a, z in zip(cu[:-1], cu[1:]):
        s_ids = ids[a:z][None]
        k = int((torch.diff((s_ids[0] == img_tok).int(), prepend=torch.zeros(1, dtype=torch.int)) == 1).sum())
        kw = {}
        if k:
            n_p = sum(patches[gi:gi + k])
            # Qwen3-VL's own path needs mm_token_type_ids to compute mRoPE (it raises without them)
            kw = dict(pixel_values=batch["pixel_values"][pi:pi + n_p], image_grid_thw=grids[gi:gi + k],
                      mm_token_type_ids=(s_ids == img_tok).int())
            gi, pi = gi + k, pi + n_p
        out.append(last_hidden(model, input_ids=s_ids, **kw))
    assert gi == len(grids)
    cache[key] = out
    return out


CASES = [  # (moe, attn, dense mask, position layout)
    (False, "sdpa", True, 3), (False, "eager", True, 3), (False, "sdpa", False, 4),
    (True, "sdpa", True, 3), (True, "eager", True, 3), (True, "sdpa", False, 4),
]


@pytest.mark.parametrize("moe,attn,dense,layout", CASES,
                         ids=[f"{'moe' if c[0] else 'dense'}-{c[1]}-{'mask' if c[2] else 'posids'}" for c in CASES])
def test_packed_equals_alone(image_packs, q3_models, q3_alone, qwen3_vl_dir, moe, attn, dense, layout):
    collator = PackCollator(qwen3_vl_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense)
    for pack in image_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 2 and len(batch["image_grid_thw"]) >= 2
        model = q3_models[(moe, attn)]
        h = last_hidden(model, **model_inputs(batch, attn))
        alone = _alone(q3_alone, q3_models[(moe, "sdpa")], batch, moe)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            diff = logit_diff(model, h[a:z], alone[s], atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(image_packs, q3_models, q3_alone, qwen3_vl_dir):
    """Per-sample positions but a plain causal mask: the first sample stays exact, the second
    attends to the first and differs, so the comparison above can fail."""
    model = q3_models[(False, "sdpa")]
    batch = PackCollator(qwen3_vl_dir, position_layout=3, attn_implementation="sdpa")(image_packs[0])
    alone = _alone(q3_alone, model, batch, False)
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1]) > 1e-3


def test_numpy_mrope_equals_qwen3_vl_get_rope_index(image_packs, qwen3_vl_dir):
    ref = PackCollator(qwen3_vl_dir, position_layout=3)
    fast = PackCollator(qwen3_vl_dir, position_layout=3, rope_impl="numpy")
    for pack in image_packs:
        assert np.array_equal(ref.encode(pack).mrope, fast.encode(pack).mrope)
