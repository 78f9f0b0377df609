"""The parts of ``test_models_kimi_k25.py`` that run transformers' own Kimi-K2.5 classes, in a child process.

transformers' ``Kimi_K25ImageProcessor`` (so ``Kimi_K25Processor``, and vlmpack's collator for
Kimi) is torchvision-only, and torchvision cannot be installed here. The test runs this module as
``python tests/kimi_k25_child.py <mode> ...`` with ``PYTHONPATH`` starting with
``tests/kimi_standin`` (a shape-true torchvision stand-in, see its README.md), so only this child
imports the stand-in. Outputs are data (NumPy ``.npz`` without pickle, JSON), asserted by the test.

Modes (``both``: ``sweep`` then ``tiny`` in one process, their arguments one after the other):

- ``sweep PACKS MODEL_DIR DEST.npz N_COLLATE FIXTURE``: for every pack of the output ``PACKS``,
  ``Kimi_K25Processor`` (the directory's tokenizer and chat template, ``Kimi_K25ImageProcessor``
  on the images decoded by transformers' ``load_image``) on the pack's image samples as one batch
  (``image_memo.pack_reference``): each sample's reference ``input_ids`` and each image's tokens
  (``image_grid_thw.prod() // merge_size**2``); for the first ``N_COLLATE`` packs also vlmpack's
  ``PackCollator`` (its ``input_ids`` per image sample); and the processor's grid for each image size
  of ``FIXTURE`` (the recorded real-torchvision run). Pixels: none (the stand-in's ``meta`` tensors:
  sizes decide ids).
- ``tiny PACKS MODEL_DIR DEST.json``: a tiny random ``Kimi_K25ForConditionalGeneration`` (text:
  DeepSeek-V3 with MLA, 2 layers, the directory's vocabulary; vision: 2 layers at the real patch 14
  and 2 x 2 merge) on two real multi-sample image packs: max |logits| difference of every sample
  between the packed row (the collator's ``input_ids``, ``position_ids``, block mask and pixels) and
  the sample run alone through transformers' own path (``Kimi_K25Processor``'s ``input_ids``,
  ``pixel_values``, ``image_grid_thw``; no positions, no mask), for ``sdpa`` and ``eager`` block
  masks and the mask-free position-ids path (as an upper bound: max ||h_packed - h_alone|| x max ||W[v]||
  of the bias-free ``lm_head``), and the negative control (a plain causal mask; exact max |logits|
  difference of the first two samples).
  Pixels: the stand-in's interpolation (``KIMI_STANDIN_PIXELS=1``), the same for both sides.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # image_memo


def kimi_processor(model_dir: str):
    """transformers' ``Kimi_K25Processor`` from the directory's tokenizer, chat template and
    ``preprocessor_config.json`` (``Kimi_K25ImageProcessor``; the video processor with its
    defaults, never called here)."""
    from transformers import AutoTokenizer
    from transformers.models.kimi_k25.image_processing_kimi_k25 import Kimi_K25ImageProcessor
    from transformers.models.kimi_k25.processing_kimi_k25 import Kimi_K25Processor
    from transformers.models.kimi_k25.video_processing_kimi_k25 import Kimi_K25VideoProcessor

    tok = AutoTokenizer.from_pretrained(model_dir)
    return Kimi_K25Processor(image_processor=Kimi_K25ImageProcessor.from_pretrained(model_dir), tokenizer=tok,
                             video_processor=Kimi_K25VideoProcessor(), chat_template=tok.chat_template)


def fixture_grids(proc, fixture: str) -> np.ndarray:
    """int64 ``[k, 3]``: ``image_grid_thw`` of the processor on a black RGB array of each ``WxH``
    size of the recorded real-torchvision run (``tests/fixtures/kimi_k25_torchvision_grids.json``)."""
    grids = []
    for size in json.loads(Path(fixture).read_text())["grids"]:
        w, h = map(int, size.split("x"))
        image = np.zeros((h, w, 3), dtype=np.uint8)  # what a decoded black RGB image gives (no pages touched)
        out = proc.image_processor(image, input_data_format="channels_last")
        grids.append(np.asarray(out["image_grid_thw"])[0])
    return np.array(grids, dtype=np.int64)


def sweep(packs: str, model_dir: str, dest: str, n_collate: int, fixture: str) -> None:
    from image_memo import pack_reference

    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator

    proc = kimi_processor(model_dir)
    collator = PackCollator(model_dir)
    merge = proc.image_processor.merge_size
    keys, sids, ref_ids, ref_len, tokens, n_images, col_ids, col_len = [], [], [], [], [], [], [], []
    n_packs = 0
    for raw in read_packs(packs):
        meta = json.loads(raw["json"])
        samples = [s for s in meta["samples"] if s["media"]]
        if not samples:
            continue
        images, ref, wants = pack_reference(proc, raw, samples)
        per_image = (np.asarray(ref["image_grid_thw"]).prod(-1) // merge**2).tolist()
        assert len(per_image) == sum(len(x) for x in images), raw["__key__"]
        if n_packs < n_collate:
            batch = collator(raw)
            cu = batch["cu_seqlens"].tolist()
            slices = {s["id"]: batch["input_ids"][0, a:z].numpy() for s, a, z in zip(meta["samples"], cu[:-1], cu[1:])}
        else:
            slices = {}
        at = 0
        for s, want, ims in zip(samples, wants, images):
            keys.append(raw["__key__"])
            sids.append(s["id"])
            ref_ids.append(np.asarray(want, dtype=np.int64))
            ref_len.append(len(want))
            tokens.extend(per_image[at:at + len(ims)])
            n_images.append(len(ims))
            at += len(ims)
            got = slices.get(s["id"])
            col_ids.append(np.zeros(0, np.int64) if got is None else got.astype(np.int64))
            col_len.append(-1 if got is None else len(got))
        n_packs += 1
    np.savez(dest, keys=np.array(keys), ids=np.array(sids), ref_ids=np.concatenate(ref_ids),
             ref_len=np.array(ref_len), tokens=np.array(tokens, dtype=np.int64), n_images=np.array(n_images),
             col_ids=np.concatenate(col_ids), col_len=np.array(col_len), n_packs=np.array(n_packs),
             fixture_grids=fixture_grids(proc, fixture),
             image_kwargs=np.array(sorted(type(proc.image_processor).valid_kwargs.__annotations__)))


def tiny_kimi(model_dir: str, attn_implementation: str, seed: int = 0):
    """A random ``Kimi_K25ForConditionalGeneration`` from the directory's config with tiny towers:
    text DeepSeek-V3 (hidden 64, 2 layers, the first dense and the second MoE of 4 experts, MLA with
    kv_lora_rank 16) with the directory's ``vocab_size`` and token ids; vision (hidden 32, 2 layers,
    2 heads) at the directory's ``patch_size``, ``merge_kernel_size`` and position-embedding grid;
    float32, eval mode."""
    import torch
    from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

    real = json.loads((Path(model_dir) / "config.json").read_text())
    rv = real["vision_config"]
    torch.manual_seed(seed)
    text = dict(model_type="deepseek_v3", vocab_size=real["text_config"]["vocab_size"], hidden_size=64,
                intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2, first_k_dense_replace=1,
                n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
                num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=32768,
                pad_token_id=real["text_config"]["pad_token_id"])
    vision = dict(num_attention_heads=2, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                  **{k: rv[k] for k in ("patch_size", "merge_kernel_size", "pos_emb_height", "pos_emb_width",
                                        "pos_emb_time")})
    ids = {k: real[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    cfg = Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=32, **ids)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return Kimi_K25ForConditionalGeneration(cfg).float().eval()


def tiny(packs: str, model_dir: str, dest: str) -> None:
    import io

    import torch
    from PIL import Image
    from transformers.image_utils import load_image

    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator, model_inputs
    from vlmpack.train.testing import plain_causal_inputs

    chosen = []
    for p in read_packs(packs):
        samples = json.loads(p["json"])["samples"]
        if len(samples) >= 2 and sum(len(s["media"]) for s in samples) >= 2:
            chosen.append(p)
        if len(chosen) == 2:
            break
    assert len(chosen) == 2, "the demo subset must give two multi-sample image packs"
    proc = kimi_processor(model_dir)
    models = {impl: tiny_kimi(model_dir, impl) for impl in ("sdpa", "eager")}

    def hidden(model, **kw):
        """Last hidden states ``[T, H]`` of ``model.model`` (the forward before ``lm_head``)."""
        kw.pop("labels", None)
        with torch.no_grad():
            return model.model(**kw).last_hidden_state[0]

    def logit_diff(model, h, ref) -> float:
        """Max |logits(h) - logits(ref)| of the bias-free ``lm_head``, as max |(h - ref) @ W.T|
        (linearity: one product, no rounding of two large logits), 256 tokens at a time."""
        w = model.lm_head.weight
        assert model.lm_head.bias is None
        with torch.no_grad():
            d = h - ref
            return max(float((d[i:i + 256] @ w.T).abs().max()) for i in range(0, len(d), 256))

    def logit_bound(model, h, ref) -> float:
        """An upper bound of :func:`logit_diff` at a fraction of its cost (Cauchy-Schwarz):
        max over tokens of ||h - ref|| times max over the vocabulary of ||W[v]||."""
        assert model.lm_head.bias is None
        with torch.no_grad():
            return float((h - ref).norm(dim=-1).max() * model.lm_head.weight.norm(dim=-1).max())

    alone = {}  # pack key -> [(input_ids, hidden states)] through transformers' own path (sdpa model)
    for p in chosen:
        out = []
        for s in json.loads(p["json"])["samples"]:
            msgs = [{"role": m["role"], "content": [{"type": "image"} if c["type"] == "image" else c
                                                    for c in m["content"]]} for m in s["messages"]]
            text = proc.apply_chat_template(msgs, tokenize=False)
            images = [load_image(Image.open(io.BytesIO(p[m["part"]]))) for m in s["media"]]
            ref = proc(text=[text], images=images or None, return_tensors="pt")
            kw = {"input_ids": ref["input_ids"], "use_cache": False}
            if images:
                kw.update(pixel_values=ref["pixel_values"], image_grid_thw=ref["image_grid_thw"])
            out.append((ref["input_ids"][0], hidden(models["sdpa"], **kw)))
        alone[p["__key__"]] = out

    result: dict = {"cases": {}, "samples": 0, "images": 0}
    cases = (("sdpa-mask", "sdpa", True), ("eager-mask", "eager", True), ("sdpa-posids", "sdpa", False))
    for name, attn, dense in cases:
        collator = PackCollator(model_dir, attn_implementation=attn, dense_mask=dense)
        worst, same_ids = 0.0, True
        for p in chosen:
            batch = collator(p)
            got = hidden(models[attn], **model_inputs(batch, attn))
            cu = batch["cu_seqlens"].tolist()
            for (ids, ref), a, z in zip(alone[p["__key__"]], cu[:-1], cu[1:]):
                same_ids &= bool(torch.equal(batch["input_ids"][0, a:z], ids))
                worst = max(worst, logit_bound(models[attn], got[a:z], ref))
            if name == "sdpa-mask":
                result["samples"] += len(cu) - 1
                result["images"] += int(len(batch["image_grid_thw"]))
        result["cases"][name] = {"max_diff": worst, "same_ids": same_ids}
    batch = PackCollator(model_dir, attn_implementation="sdpa")(chosen[0])
    got = hidden(models["sdpa"], **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    (_, first), (_, second) = alone[chosen[0]["__key__"]][:2]
    result["negative"] = {"first": logit_diff(models["sdpa"], got[:cu[1]], first),
                          "second": logit_diff(models["sdpa"], got[cu[1]:cu[2]], second)}
    Path(dest).write_text(json.dumps(result))


if __name__ == "__main__":
    import os

    mode, *args = sys.argv[1:]
    if mode not in ("sweep", "tiny", "both"):
        raise SystemExit(f"unknown mode {mode!r}")
    if mode in ("sweep", "both"):
        os.environ["KIMI_STANDIN_PIXELS"] = "0"  # read by the stand-in at each call
        sweep(args[0], args[1], args[2], int(args[3]), args[4])
        args = args[5:]
    if mode in ("tiny", "both"):
        os.environ["KIMI_STANDIN_PIXELS"] = "1"
        tiny(*args)
