"""Qwen3.5 (``qwen3_5``): registered on Qwen3-VL's rules, packed == alone where it can hold on CPU,
and a refusal where it cannot.

The model directory is ``tools/demo_data`` 's Qwen3.5 directory (``config.json`` from transformers'
``Qwen3_5Config``; tokenizer, template and processor configs are Qwen3-VL's, standing in for
Qwen3.5's own: ``tools/demo_data/model_files/qwen3_5/SOURCES.md``). Every image sample's count
equals ``Qwen3VLProcessor`` on that directory: ``test_models_qwen3_vl.py::
test_every_image_sample_equals_qwen3_vl_processor[qwen3_5_dir]``.

1. A tiny random ``Qwen3_5ForConditionalGeneration`` with full-attention layers gives the same
   logits on a packed row (the collator's per-sample mRoPE from ``Qwen3_5Model.get_rope_index``,
   block masks for ``sdpa`` / ``eager``, the mask-free ``[4, 1, T]`` position-ids path) as on each
   sample alone through the model's own path (``mm_token_type_ids``, transformers' mRoPE), within
   1e-4 (compared through the model's own ``lm_head``, ``conftest.logit_diff``, on the last hidden
   states); a plain causal mask differs (negative control).
2. With a Gated DeltaNet layer, transformers' torch fallback (no flash-linear-attention here, no
   GPU) carries state from one sample into the next: the first sample of a pack stays exact, the
   next ones differ. That is why ``PackCollator`` refuses such a model unless it runs
   ``flash_attention_*`` with flash-linear-attention (whose varlen kernel gets ``cu_seq_lens_q``),
   and the test shows the refusal.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import last_hidden, logit_diff
from demo_data.packs import demo_packs

from vlmpack.errors import ConfigError
from vlmpack.models import load_model
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs, tiny_qwen3_5

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
SEQ_LEN = 1024


def test_family_is_registered(qwen3_5_dir, qwen3_vl_dir):
    fam = load_model(str(qwen3_5_dir))
    assert fam.name == "qwen3_5" and fam.mrope and fam.model_type == "qwen3_5"
    assert (fam.patch_size, fam.merge_size) == (16, 2)
    assert fam.rope_model_class().__name__ == "Qwen3_5Model"
    layers = fam.linear_attention_layers()  # Qwen3_5Config defaults: 3 Gated DeltaNet layers of every 4
    assert len(layers) == 24 and 3 not in layers and 0 in layers
    # the same counting rule as Qwen3-VL on the same tokenizer and template
    q3 = load_model(str(qwen3_vl_dir))
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]}]
    for w, h in [(28, 28), (640, 480), (5000, 30), (4096, 4096)]:
        assert fam.image_tokens(w, h) == q3.image_tokens(w, h)
        ids = fam.token_ids([msgs], [None])[0]
        assert fam.num_tokens(ids, [fam.image_tokens(w, h)]) == q3.num_tokens(ids, [q3.image_tokens(w, h)])


def test_collator_refuses_linear_attention_without_varlen_kernel(qwen3_5_dir):
    for attn in ("sdpa", "eager", "flash_attention_2"):  # no flash-linear-attention installed here
        with pytest.raises(ConfigError) as e:
            PackCollator(qwen3_5_dir, attn_implementation=attn)
        msg = str(e.value)
        assert "\n" not in msg and "24 linear-attention layers" in msg and "flash-linear-attention" in msg
    PackCollator(qwen3_5_dir, attn_implementation="sdpa", allow_linear_attention_leak=True)


@pytest.fixture(scope="module")
def image_packs(real_data, qwen3_5_dir):
    out = demo_packs(real_data, qwen3_5_dir, seq_len=SEQ_LEN, n_lines=300)
    packs = [p for p in read_packs(out) if len((m := json.loads(p["json"]))["samples"]) >= 3
             and sum(len(s["media"]) for s in m["samples"]) >= 2]
    assert packs, "the demo subset must give multi-sample image packs"
    return packs[:1]


def test_verify_passes_on_a_qwen3_5_output(image_packs, real_data, qwen3_5_dir):
    """``vlmpack verify`` recounts a ``qwen3_5`` output from its bytes (the first 300 demo records;
    every image sample's count is compared with the processor in test_models_qwen3_vl.py's sweep)."""
    from vlmpack.verify import verify_output

    out = demo_packs(real_data, qwen3_5_dir, seq_len=SEQ_LEN, n_lines=300)
    res = verify_output(out, workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200, res


def _alone(model, batch) -> list[torch.Tensor]:
    """Last hidden states of every sample of ``batch`` run alone through the model's own path."""
    cu = batch["cu_seqlens"].tolist()
    grids = batch["image_grid_thw"]
    patches = grids.prod(-1).tolist()
    img_tok = model.config.image_token_id
    out, gi, pi = [], 0, 0
    for a, z in zip(cu[:-1], cu[1:]):
        ids = batch["input_ids"][0, a:z][None]
        is_img = (ids == img_tok).int()
        k = int((torch.diff(is_img[0], prepend=torch.zeros(1, dtype=torch.int)) == 1).sum())
        kw = {"mm_token_type_ids": is_img}
        if k:
            n = sum(patches[gi:gi + k])
            kw.update(pixel_values=batch["pixel_values"][pi:pi + n], image_grid_thw=grids[gi:gi + k])
            gi, pi = gi + k, pi + n
        out.append(last_hidden(model, input_ids=ids, **kw))
    assert gi == len(grids)
    return out


def _diffs(model, h, alone, batch, atol: float | None = None) -> list[float]:
    """Max |logits difference| per sample of the packed row's hidden states ``h`` and each sample's
    alone (``atol``: as :func:`conftest.logit_diff`'s, for a check that each is below it)."""
    cu = batch["cu_seqlens"].tolist()
    return [logit_diff(model, h[a:z], ref, atol=atol) for a, z, ref in zip(cu[:-1], cu[1:], alone)]


CASES = [("sdpa", True, 3), ("eager", True, 3), ("sdpa", False, 4)]


@pytest.mark.parametrize("attn,dense,layout", CASES, ids=["sdpa-mask", "eager-mask", "sdpa-posids"])
def test_packed_equals_alone_full_attention(image_packs, qwen3_5_dir, attn, dense, layout):
    model = tiny_qwen3_5(qwen3_5_dir, attn_implementation=attn)
    # the tiny model has no Gated DeltaNet layer; the directory's config (24 of them) is what the guard reads
    collator = PackCollator(qwen3_5_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense,
                            allow_linear_attention_leak=True)
    for pack in image_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 3 and len(batch["image_grid_thw"]) >= 2
        alone = _alone(model, batch)
        diffs = _diffs(model, last_hidden(model, **model_inputs(batch, attn)), alone, batch, ATOL)
        assert max(diffs) < ATOL, diffs
        # negative control: a plain causal mask over the row lets later samples see earlier ones
        if dense and attn == "sdpa":
            leaky = _diffs(model, last_hidden(model, **plain_causal_inputs(batch, attn)), alone, batch)
            assert leaky[0] < ATOL and min(leaky[1:]) > 1e-3, leaky


def test_gated_deltanet_torch_fallback_leaks_across_samples(image_packs, qwen3_5_dir):
    """What the refusal above prevents: with one Gated DeltaNet layer and transformers' torch
    fallback, every sample after the first trains unlike itself alone, with the exact block mask."""
    model = tiny_qwen3_5(qwen3_5_dir, layer_types=("linear_attention", "full_attention"))
    collator = PackCollator(qwen3_5_dir, attn_implementation="sdpa", dense_mask=True,
                            allow_linear_attention_leak=True)
    batch = collator(image_packs[0])
    diffs = _diffs(model, last_hidden(model, **model_inputs(batch, "sdpa")), _alone(model, batch), batch)
    assert diffs[0] < ATOL and min(diffs[1:]) > 1e-3, diffs
