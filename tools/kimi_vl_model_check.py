"""One-off check that transformers' ``Kimi_K25ForConditionalGeneration`` computes what Kimi-VL's published
model computes on Kimi-VL inputs (not run by the tests; writes ``tests/fixtures/kimi_vl_model_check.json``).

Kimi-VL's ``KimiVLForConditionalGeneration`` (MoonViT + ``KimiVLMultiModalProjector`` + DeepSeek-V3) is
remote code for transformers 4.51; transformers 5.24 has no ``kimi_vl`` class. Three steps, by hand:

1. ``python tools/kimi_vl_model_check.py inputs MODEL_DIR DEMO_ROOT WORK`` (this project's venv): a few
   single-image and two-image samples (:data:`SAMPLES`) encoded by ``vlmpack.models.kimi_vl.KimiVLFamily``
   (``encode`` + ``process_images``: ids, ``pixel_values``, ``image_grid_hws``) -> ``WORK/inputs.npz``.
2. ``PYTHONPATH=PUB:TF451 python tools/kimi_vl_model_check.py published MODEL_DIR WORK`` where ``PUB`` holds
   ``modeling_kimi_vl_pub.py`` (the published model's vision tower, projector and forward, transcribed in a
   scratch folder from public copies, see ``tools/demo_data/model_files/kimi_vl/SOURCES.md``) and DeepSeek-V3's
   remote ``modeling_deepseek.py``, ``TF451`` transformers 4.51.3: a tiny published model (:func:`tiny_dims`,
   random weights from a seeded generator) runs each sample alone (the published forward: no mask, no
   positions); writes its weights in Kimi's checkpoint names (``WORK/weights.safetensors``; Kimi-VL's projector
   ``multi_modal_projector.{pre_norm,linear_1,linear_2}`` under Kimi-K2.5's checkpoint names
   ``mm_projector.{pre_norm,proj.0,proj.2}``, everything else as published) and its logits.
3. ``python tools/kimi_vl_model_check.py compare MODEL_DIR WORK OUT.json`` (this project's venv):
   ``Kimi_K25ForConditionalGeneration.from_pretrained(WORK, config=k25_config(...))`` (transformers' own
   conversion of Kimi checkpoints: q / k rope permutation, fused experts), asserts no missing or unexpected
   weight, runs the same samples (``image_grid_thw`` = ``(1, h, w)``) with ``sdpa`` and ``eager`` and records
   the largest logit difference per sample and implementation, plus the published model's own eager
   vision attention on the two-image sample (it adds its bool block mask to the scores, so images attend
   to each other: recorded, not copied).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

#: ``(label, image sources)``: demo image file names or ``noise_WxH`` (seeded noise as in
#: ``tools/kimi_vl_pixels_check.py``); 896 x 896 gives a 64 x 64 grid, MoonViT's position table as it is.
SAMPLES = [("demo_small", ["images/derived/lfw_subset/000.png"]), ("noise_27x29", ["noise_27x29"]),
           ("noise_900x918", ["noise_900x918"]), ("noise_896x896", ["noise_896x896"]),
           ("two_images", ["noise_27x29", "images/skimage_data/skimage/data/cell.png"])]
SEED = 0


def tiny_dims() -> dict:
    """The tiny sizes both models are built with (text DeepSeek-V3 with MLA, the first layer dense and
    the second MoE of 4 experts; vision 2 layers, hidden 32, 2 heads; real patch 14, 64 x 64 position
    table and 2 x 2 merge from ``config.json``)."""
    return {"text": dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                         first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                         n_group=1, topk_group=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
                         kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                         max_position_embeddings=4096, topk_method="noaux_tc", scoring_func="sigmoid",
                         norm_topk_prob=True, routed_scaling_factor=2.5, hidden_act="silu", rms_norm_eps=1e-6,
                         rope_theta=10000.0, rope_scaling=None, attention_bias=False, tie_word_embeddings=False),
            "vision": dict(num_attention_heads=2, num_hidden_layers=2, hidden_size=32, intermediate_size=64)}


def k25_config(kimi_vl_config: dict, attn_implementation: str):
    """A ``Kimi_K25Config`` for Kimi-VL's ``config.json`` (dict) with :func:`tiny_dims`: the vision tower's
    patch size, position table (``init_pos_emb_height`` / ``_width``) and merge kernel, the text
    vocabulary and token ids, ``image_token_id`` = ``media_placeholder_token_id``,
    ``projection_hidden_size`` = the vision width, ``projection_layer_norm_eps`` 1e-5 (Kimi-VL's
    projector), vision MLP activation ``gelu_pytorch_tanh`` (MoonViT's ``PytorchGELUTanh``)."""
    from transformers import Kimi_K25Config

    dims = tiny_dims()
    rv, rt = kimi_vl_config["vision_config"], kimi_vl_config["text_config"]
    text = dict(model_type="deepseek_v3", vocab_size=rt["vocab_size"], pad_token_id=rt["pad_token_id"],
                bos_token_id=rt["bos_token_id"], eos_token_id=rt["eos_token_id"],
                **{k: v for k, v in dims["text"].items() if k not in ("topk_method", "scoring_func")})
    vision = dict(patch_size=rv["patch_size"], pos_emb_height=rv["init_pos_emb_height"],
                  pos_emb_width=rv["init_pos_emb_width"], merge_kernel_size=rv["merge_kernel_size"],
                  hidden_act="gelu_pytorch_tanh", **dims["vision"])
    cfg = Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=dims["vision"]["hidden_size"],
                         projection_layer_norm_eps=1e-5, image_token_id=kimi_vl_config["media_placeholder_token_id"],
                         pad_token_id=kimi_vl_config.get("pad_token_id"))
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return cfg


def _image(root: Path, src: str):
    from kimi_vl_pixels_check import noise_image

    from vlmpack.media.kinds.image import open_image

    if src.startswith("noise_"):
        w, h = map(int, src[6:].split("x"))
        return noise_image(w, h, {"27x29": 2, "900x918": 3}.get(src[6:], 7))
    return open_image(str(root / src))


def inputs(model_dir: str, demo_root: str, work: str) -> None:
    from vlmpack.models import load_model

    fam = load_model(model_dir)
    out = {}
    for label, srcs in SAMPLES:
        proc = fam.process_images([_image(Path(demo_root), s) for s in srcs])
        content = [{"type": "image", "index": i} for i in range(len(srcs))] + [{"type": "text", "text": "Describe."}]
        msgs = [{"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": "A picture."}]}]
        out[f"{label}/ids"] = fam.encode(msgs, proc.tokens.tolist())
        out[f"{label}/pixel_values"] = proc.pixel_values.numpy()
        out[f"{label}/image_grid_hws"] = proc.model_kwargs["image_grid_hws"].numpy()
    Path(work).mkdir(parents=True, exist_ok=True)
    np.savez(Path(work) / "inputs.npz", **out)


def _randomize(model, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight") or "norm0" in name or "norm1" in name or "layernorm" in name:
                p.copy_(1 + 0.1 * noise if name.endswith("weight") else 0.1 * noise)
            elif "pos_emb" in name:
                p.copy_(noise)
            else:
                p.copy_(0.05 * noise)


def published(model_dir: str, work: str) -> None:
    import torch
    import transformers
    from configuration_deepseek import DeepseekV3Config
    from modeling_kimi_vl_pub import KimiVLForConditionalGeneration
    from safetensors.torch import save_file

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    dims, rv, rt = tiny_dims(), cfg["vision_config"], cfg["text_config"]
    vc = dict(rv, **dims["vision"])
    data = dict(np.load(Path(work) / "inputs.npz"))
    res = {"transformers": transformers.__version__}
    for impl in ("sdpa", "eager"):
        text = DeepseekV3Config(vocab_size=rt["vocab_size"], pad_token_id=rt["pad_token_id"],
                                bos_token_id=rt["bos_token_id"], eos_token_id=rt["eos_token_id"], **dims["text"])
        model = KimiVLForConditionalGeneration(vc, text, cfg["media_placeholder_token_id"], impl).float().eval()
        _randomize(model, SEED)
        logits = {}
        with torch.no_grad():
            for label, _ in SAMPLES:
                logits[label] = model(torch.from_numpy(data[f"{label}/ids"])[None],
                                      torch.from_numpy(data[f"{label}/pixel_values"]),
                                      torch.from_numpy(data[f"{label}/image_grid_hws"]))[0].numpy()
        np.savez(Path(work) / f"published_{impl}.npz", **logits)
        if impl == "sdpa":
            rename = {"multi_modal_projector.linear_1": "mm_projector.proj.0",
                      "multi_modal_projector.linear_2": "mm_projector.proj.2",
                      "multi_modal_projector.pre_norm": "mm_projector.pre_norm"}
            sd = {}
            for k, v in model.state_dict().items():
                for a, b in rename.items():
                    k = k.replace(a, b)
                sd[k] = v.contiguous()
            save_file(sd, str(Path(work) / "weights.safetensors"), metadata={"format": "pt"})
            res["weights"] = sorted(sd)
    (Path(work) / "published.json").write_text(json.dumps(res))


def compare(model_dir: str, work: str, dest: str) -> None:
    import shutil

    import torch
    import transformers
    from transformers import Kimi_K25ForConditionalGeneration

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    data = dict(np.load(Path(work) / "inputs.npz"))
    pub = json.loads((Path(work) / "published.json").read_text())
    load_dir = Path(work) / "k25"
    load_dir.mkdir(exist_ok=True)
    shutil.copy(Path(work) / "weights.safetensors", load_dir / "model.safetensors")
    result = {"what": __doc__.split("\n\n")[0], "published_transformers": pub["transformers"],
              "transformers": transformers.__version__, "torch": torch.__version__, "tiny_dims": tiny_dims(),
              "samples": {}, "cases": {}}
    for impl in ("sdpa", "eager"):
        k25 = k25_config(cfg, impl)
        k25.save_pretrained(load_dir)
        model, info = Kimi_K25ForConditionalGeneration.from_pretrained(load_dir, config=k25, output_loading_info=True,
                                                                       dtype=torch.float32)
        model.eval()
        bad = {k: sorted(v) for k, v in info.items() if v}
        assert not bad, bad
        ref = dict(np.load(Path(work) / "published_sdpa.npz"))
        ref_eager = dict(np.load(Path(work) / "published_eager.npz"))
        case = {}
        with torch.no_grad():
            for label, _ in SAMPLES:
                hws = torch.from_numpy(data[f"{label}/image_grid_hws"])
                thw = torch.cat([torch.ones(len(hws), 1, dtype=hws.dtype), hws], 1)
                got = model(input_ids=torch.from_numpy(data[f"{label}/ids"])[None],
                            pixel_values=torch.from_numpy(data[f"{label}/pixel_values"]),
                            image_grid_thw=thw).logits[0].numpy()
                case[label] = {"max_diff": float(np.abs(got - ref[label]).max()),
                               "max_diff_vs_published_eager": float(np.abs(got - ref_eager[label]).max()),
                               "last_token_logits": got[-1, :4].tolist()}
                result["samples"][label] = {"tokens": int(len(data[f"{label}/ids"])),
                                            "image_grid_hws": hws.tolist(),
                                            "max_abs_logit": float(np.abs(ref[label]).max())}
        result["cases"][impl] = case
    Path(dest).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["cases"], indent=1))


if __name__ == "__main__":
    {"inputs": inputs, "published": published, "compare": compare}[sys.argv[1]](*sys.argv[2:])
