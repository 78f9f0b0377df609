"""Helpers for the training-side tests and benchmarks: tiny random models of each family, negative controls.

- :func:`tiny_qwen2` / :func:`tiny_qwen2_5_vl` / :func:`tiny_qwen3_vl`: randomly initialised float32 models built from
  configs (no weights downloaded), sized to run in seconds on a CPU, with the real Qwen vocab
  and special token ids of ``model_dir`` so that real packs can be fed to them.

Real packs for them come from ``demo_data.packs.demo_packs`` (``tools/``, outside the wheel) and
are read with :func:`vlmpack.packfmt.read_packs`.
"""

from __future__ import annotations

import json
from pathlib import Path


def _token_ids(model_dir: str | Path) -> dict:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {k: cfg[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
            if k in cfg}


def _vocab_size(model_dir: str | Path) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(model_dir)))


def tiny_qwen2(model_dir: str | Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``Qwen2ForCausalLM`` (hidden 64, 2 layers, 4 heads / 2 KV heads), float32, eval mode."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=_vocab_size(model_dir), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=32768, tie_word_embeddings=True)
    cfg._attn_implementation = attn_implementation
    return Qwen2ForCausalLM(cfg).float().eval()


def tiny_qwen2_5_vl(model_dir: str | Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``Qwen2_5_VLForConditionalGeneration`` (text: hidden 64, 2 layers, head_dim 16,
    mrope_section [2, 3, 3]; vision: depth 2, hidden 32, patch 14, merge 2), float32, eval mode."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(vocab_size=_vocab_size(model_dir), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
                  in_channels=3, tokens_per_second=2)
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                           **_token_ids(model_dir))
    cfg._attn_implementation = attn_implementation
    cfg.text_config._attn_implementation = attn_implementation
    cfg.vision_config._attn_implementation = attn_implementation
    return Qwen2_5_VLForConditionalGeneration(cfg).float().eval()


def tiny_qwen3_vl(model_dir: str | Path, *, attn_implementation: str = "sdpa", seed: int = 0, moe: bool = False):
    """A random ``Qwen3VLForConditionalGeneration`` (``moe=True``: ``Qwen3VLMoeForConditionalGeneration``,
    4 experts, 2 per token). Text: hidden 64, 2 layers, head_dim 16, interleaved mRoPE with
    mrope_section [2, 3, 3]; vision: depth 2, hidden 32, patch 16, merge 2, deepstack after
    block 0; float32, eval mode. Token ids from ``model_dir``'s config."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(vocab_size=_vocab_size(model_dir), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 3, 3],
                                 "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, num_position_embeddings=144,
                  deepstack_visual_indexes=[0])
    if moe:
        from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
        cfg_cls, model_cls = Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration
    else:
        cfg_cls, model_cls = Qwen3VLConfig, Qwen3VLForConditionalGeneration
    cfg = cfg_cls(text_config=text, vision_config=vision, tie_word_embeddings=True, **_token_ids(model_dir))
    cfg._attn_implementation = attn_implementation
    cfg.text_config._attn_implementation = attn_implementation
    cfg.vision_config._attn_implementation = attn_implementation
    return model_cls(cfg).float().eval()


def tiny_qwen3_5(model_dir: str | Path, *, attn_implementation: str = "sdpa", seed: int = 0,
                 layer_types: tuple[str, ...] = ("full_attention", "full_attention")):
    """A random ``Qwen3_5ForConditionalGeneration``: text hidden 64, one layer per ``layer_types``
    entry (``"full_attention"`` or ``"linear_attention"``: Gated DeltaNet, 2 key / 4 value heads of
    16), head_dim 16, interleaved mRoPE [2, 3, 3]; vision depth 2, hidden 32, patch 16, merge 2;
    float32, eval mode. Token ids from ``model_dir``'s config."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(vocab_size=_vocab_size(model_dir), hidden_size=64, intermediate_size=128,
                num_hidden_layers=len(layer_types), layer_types=list(layer_types), num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_num_key_heads=2, linear_num_value_heads=4, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 3, 3],
                                 "mrope_interleaved": True, "partial_rotary_factor": 1.0})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, num_position_embeddings=144)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True, **_token_ids(model_dir))
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return Qwen3_5ForConditionalGeneration(cfg).float().eval()


def plain_causal_inputs(batch: dict, attn_implementation: str = "sdpa") -> dict:
    """The negative control of the packed == alone tests: :func:`vlmpack.train.model_inputs` of
    ``batch`` (same per-sample positions and media) with a plain causal bool mask
    ``[1, 1, T, T]`` over the whole row instead of the block-causal one, so every sample after the
    first attends to the samples before it."""
    import torch

    from vlmpack.train.collate import model_inputs

    t = batch["input_ids"].shape[1]
    kw = model_inputs(batch, attn_implementation)
    kw["attention_mask"] = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    return kw


