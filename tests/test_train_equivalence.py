"""The proof: a packed batch trains exactly like its samples run one by one.

Tiny randomly initialised float32 models (``vlmpack.train.testing``), real packs written by
``vlmpack pack`` from the real demo data, the real Qwen tokenizer/processor. For every pack the
per-token logits of the packed row equal those of each sample run alone (the unpacked sample
goes through the model's own path: no position ids, transformers computes mRoPE itself), and
the packed loss equals the token-weighted mean of the per-sample losses (atol 1e-4):

- ``Qwen2ForCausalLM`` (text packs) and ``Qwen2_5_VLForConditionalGeneration`` (image packs);
- ``sdpa`` and ``eager`` with the collator's block-diagonal mask;
- ``sdpa`` with no mask at all: the position-ids path (transformers detects packed sequences
  from restarting positions; for Qwen-VL the ``[4, 1, T]`` layout with a text row).
The negative control shows the comparison detects contamination: with a plain causal mask instead
of the block-diagonal one, the second sample's logits differ.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from demo_data.packs import demo_packs

from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs, tiny_qwen2, tiny_qwen2_5_vl

ATOL = 1e-4
SEQ_LEN = 512


@pytest.fixture(scope="module")
def packs(real_data, model_dir):
    out = demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=300)
    text, image = [], []
    for p in read_packs(out):
        meta = json.loads(p["json"])
        n_img = sum(len(s["media"]) for s in meta["samples"])
        if n_img == 0 and len(meta["samples"]) >= 3 and len(text) < 2:
            text.append(p)
        if n_img >= 2 and len(meta["samples"]) >= 2 and len(image) < 2:
            image.append(p)
    assert len(text) == 2 and len(image) == 2, "the demo subset must give multi-sample text and image packs"
    return {"text": text, "image": image}


@pytest.fixture(scope="module")
def models(model_dir):
    return {("text", impl): tiny_qwen2(model_dir, attn_implementation=impl) for impl in ("sdpa", "eager")} | {
        ("image", impl): tiny_qwen2_5_vl(model_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def alone_cache():
    return {}


def _alone(cache, model, batch, kind):
    key = (kind, tuple(batch["sample_ids"]))
    if key not in cache:
        cache[key] = _run_alone(model, batch, kind)
    return cache[key]


def _per_token_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """CE of position i predicting labels[i+1] (HF's shift); 0 where ignored. logits [n, V], labels [n]."""
    ce = F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=-100, reduction="none")
    return torch.cat([ce, ce.new_zeros(1)])


def _run_alone(model, batch, kind: str):
    """Logits, per-token CE and HF loss of every sample of ``batch`` run alone (unpacked)."""
    cu = batch["cu_seqlens"].tolist()
    grids = batch.get("image_grid_thw")
    patches = grids.prod(-1).tolist() if grids is not None else []
    ids = batch["input_ids"][0]
    img_tok = getattr(model.config, "image_token_id", None)
    gi = pi = 0
    out = []
    for a, z in zip(cu[:-1], cu[1:]):
        s_ids = ids[a:z][None]
        kw = {}
        # images of this sample = runs of image-pad tokens in its ids (independent of the collator)
        k = 0 if kind != "image" else int(
            (torch.diff((s_ids[0] == img_tok).int(), prepend=torch.zeros(1, dtype=torch.int)) == 1).sum())
        if k:
            n_p = sum(patches[gi:gi + k])
            kw = dict(pixel_values=batch["pixel_values"][pi:pi + n_p], image_grid_thw=grids[gi:gi + k],
                      mm_token_type_ids=(s_ids == img_tok).int())
            gi, pi = gi + k, pi + n_p
        labels = batch["labels"][0, a:z]
        with torch.no_grad():
            o = model(input_ids=s_ids, labels=labels[None], **kw)
        out.append((o.logits[0], _per_token_ce(o.logits[0], labels), o.loss, int((labels[1:] != -100).sum())))
    assert gi == (len(grids) if grids is not None else 0)
    return out


def _check_equal(packed_logits, batch, alone, *, check_loss_from=None):
    cu = batch["cu_seqlens"].tolist()
    ce_packed = _per_token_ce(packed_logits, batch["labels"][0])
    for s, (a, z) in enumerate(zip(cu[:-1], cu[1:])):
        diff = (packed_logits[a:z] - alone[s][0]).abs().max().item()
        assert diff < ATOL, f"sample {s} ({batch['sample_ids'][s]}): packed logits differ by {diff:.3g}"
        assert torch.allclose(ce_packed[a:z], alone[s][1], atol=ATOL)
    n = sum(x[3] for x in alone)
    expected = sum(x[2].item() * x[3] for x in alone) / n
    assert batch["num_label_tokens"] == n
    if check_loss_from is not None:
        assert abs(check_loss_from.item() - expected) < ATOL, (check_loss_from.item(), expected)
    assert abs(ce_packed.sum().item() / n - expected) < ATOL


CASES = [  # (kind, attn, dense mask, position layout)
    ("text", "sdpa", True, 3), ("text", "eager", True, 3), ("text", "sdpa", False, 3),
    ("image", "sdpa", True, 3), ("image", "eager", True, 3), ("image", "sdpa", False, 4),
]


@pytest.mark.parametrize("kind,attn,dense,layout", CASES, ids=[f"{c[0]}-{c[1]}-{'mask' if c[2] else 'posids'}"
                                                                for c in CASES])
def test_packed_equals_unpacked(packs, models, model_dir, alone_cache, kind, attn, dense, layout):
    model = models[(kind, attn)]
    collator = PackCollator(model_dir, mrope=(kind == "image"), position_layout=layout,
                            attn_implementation=attn, dense_mask=dense)
    alone_model = models[(kind, "sdpa")]
    for i, pack in enumerate(packs[kind]):
        batch = collator(pack)
        assert batch["num_samples"] >= 2
        assert ("attention_mask" in batch) == dense
        with torch.no_grad():
            out = model(**model_inputs(batch, attn))
        alone = _alone(alone_cache, alone_model, batch, kind)
        _check_equal(out.logits[0], batch, alone, check_loss_from=out.loss if i == 0 else None)


@pytest.mark.parametrize("kind", ["text", "image"])
def test_negative_control_detects_contamination(packs, models, model_dir, alone_cache, kind):
    """Same positions (per-sample reset / per-sample mRoPE) but a plain causal mask instead of the
    block-diagonal one: the first sample is still exact (causality) while the second one attends
    to the first and differs, so the comparison above can fail."""
    model = models[(kind, "sdpa")]
    collator = PackCollator(model_dir, mrope=(kind == "image"), position_layout=3, attn_implementation="sdpa")
    batch = collator(packs[kind][0])
    alone = _alone(alone_cache, model, batch, kind)
    kw = plain_causal_inputs(batch, "sdpa")
    with torch.no_grad():
        logits = model(**kw).logits[0]
    cu = batch["cu_seqlens"].tolist()
    assert (logits[:cu[1]] - alone[0][0]).abs().max().item() < ATOL
    assert (logits[cu[1]:cu[2]] - alone[1][0]).abs().max().item() > 1e-3


def test_fast_mrope_equals_transformers_on_real_packs(packs, model_dir):
    ref = PackCollator(model_dir, position_layout=3)
    fast = PackCollator(model_dir, position_layout=3, rope_impl="numpy")
    for pack in packs["image"] + packs["text"]:
        a, b = ref.encode(pack), fast.encode(pack)
        assert np.array_equal(a.mrope, b.mrope)
