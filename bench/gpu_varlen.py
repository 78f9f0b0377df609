"""The collator's FlashAttention-2 varlen path on a GPU: a packed row == its samples one by one.

Two steps, because the GPU machine has PyTorch and transformers but not vlmpack's other needs:

    python bench/gpu_varlen.py prepare DIR   # here (CPU): real packs of the demo set -> collated batches
    python bench/gpu_varlen.py run DIR       # on a GPU: prints the table (on a CPU: a dry run, SDPA per sequence)

``prepare`` packs the first 300 demo records (``demo_data.packs.demo_packs``, seq_len 2048), collates
text packs (tiny random ``Qwen2ForCausalLM``) and image packs (tiny random
``Qwen2_5_VLForConditionalGeneration``), each with the plain collator and with ``cp_size=2`` (THD:
every sample's span padded to a multiple of 4), and saves the batches (tensors and ints only, read back
with ``torch.load(weights_only=True)``) and the tiny models' configs (JSON; same seed, so the same
weights on both machines' CPUs).

``run`` registers PyTorch's FlashAttention-2 varlen kernel (``torch.nn.attention.varlen.varlen_attn``,
else ``aten._flash_attention_forward``) as a transformers attention implementation that takes the
``cu_seq_lens_q/k`` and ``max_length_q/k`` that :func:`vlmpack.train.model_inputs` passes for
``flash_attention_*``, and compares in bf16 on the GPU, per sample, the packed row's logits with those of
the sample alone (the same kernel over one sequence, its own positions and images); the negative
control runs the packed row as one sequence (``cu_seq_lens = [0, T]``): later samples then differ.
It also times one packed forward against the samples' forwards one by one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

ATTN = "vlmpack_fa2_varlen"


def prepare(out: Path, model_dir: Path, real_data: Path, per_kind: int = 2) -> None:
    """Collate ``per_kind`` multi-sample text and image packs, plain and with ``cp_size=2``, into ``out``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from demo_data.packs import demo_packs

    from vlmpack.packfmt import read_packs
    from vlmpack.train import PackCollator
    from vlmpack.train.testing import tiny_qwen2, tiny_qwen2_5_vl

    picked: dict[str, list] = {"text": [], "image": []}
    for p in read_packs(demo_packs(real_data, model_dir, seq_len=2048, n_lines=300)):
        meta = json.loads(p["json"])
        kind = "image" if any(s["media"] for s in meta["samples"]) else "text"
        if len(meta["samples"]) >= 3 and len(picked[kind]) < per_kind:
            picked[kind].append(p)
    batches = []
    for kind, packs in picked.items():
        for cp in (1, 2):
            c = PackCollator(model_dir, mrope=kind == "image", rope_impl="numpy", cp_size=cp,
                             attn_implementation="flash_attention_2")
            for p in packs:
                b = c(p)
                keep = {k: v for k, v in b.items() if isinstance(v, (torch.Tensor, int))}
                if "pixel_values" in keep:  # bf16 on the GPU anyway; halves what travels
                    keep["pixel_values"] = keep["pixel_values"].to(torch.bfloat16)
                batches.append({"kind": kind, "cp_size": cp, **keep})
    out.mkdir(parents=True, exist_ok=True)
    torch.save(batches, out / "batches.pt")
    configs = {"text": tiny_qwen2(model_dir).config.to_dict(), "image": tiny_qwen2_5_vl(model_dir).config.to_dict()}
    (out / "configs.json").write_text(json.dumps(configs))
    print(f"wrote {len(batches)} batches to {out}")


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, longest: int,
            scale: float | None) -> torch.Tensor:
    """FlashAttention-2 varlen, causal: q ``[T, H, D]``, k/v ``[T, Hkv, D]`` -> ``[T, H, D]``."""
    if k.shape[1] != q.shape[1]:  # GQA: repeat the KV heads
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    if q.device.type == "cpu":  # a dry run of the script: causal SDPA per sequence instead of the kernel
        cuts = cu.tolist()
        parts = [torch.nn.functional.scaled_dot_product_attention(
            *(x[a:z].transpose(0, 1) for x in (q, k, v)), is_causal=True, scale=scale).transpose(0, 1)
            for a, z in zip(cuts[:-1], cuts[1:])]
        return torch.cat(parts)
    try:
        from torch.nn.attention.varlen import varlen_attn

        return varlen_attn(q, k, v, cu, cu, longest, longest, scale=scale, window_size=(-1, 0))
    except ImportError:
        return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, longest, longest, 0.0, True, False,
                                                       scale=scale)[0]


def _attention(_module, query, key, value, _attention_mask, scaling=None, **kwargs):
    """A transformers attention function over the varlen kernel: ``query`` ``[1, H, T, D]``; the
    sequences are ``kwargs["cu_seq_lens_q"]`` (what ``model_inputs`` passes for flash_attention_*)."""
    cu = kwargs["cu_seq_lens_q"].to(query.device, torch.int32)
    longest = int(kwargs["max_length_q"])
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))
    out = _varlen(q, k, v, cu, longest, scaling)
    return out[None], None


def _models(configs: dict, device: str):
    from transformers import (
        AttentionInterface,
        AttentionMaskInterface,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2Config,
        Qwen2ForCausalLM,
    )
    from transformers.masking_utils import flash_attention_mask

    AttentionInterface.register(ATTN, _attention)
    AttentionMaskInterface.register(ATTN, flash_attention_mask)
    torch.manual_seed(0)
    text = Qwen2Config.from_dict(configs["text"])
    text._attn_implementation = ATTN
    torch.manual_seed(0)
    image = Qwen2_5_VLConfig.from_dict(configs["image"])
    for c in (image, image.text_config):
        c._attn_implementation = ATTN
    image.vision_config._attn_implementation = "sdpa"  # the vision tower splits its windows itself
    torch.manual_seed(0)
    t = Qwen2ForCausalLM(text)
    torch.manual_seed(0)
    i = Qwen2_5_VLForConditionalGeneration(image)
    return {k: m.to(device, torch.bfloat16).eval() for k, m in (("text", t), ("image", i))}


def _inputs(b: dict, device: str) -> dict:
    kw = {k: b[k].to(device) for k in ("input_ids", "position_ids") if k in b}
    if "pixel_values" in b:
        kw["pixel_values"] = b["pixel_values"].to(device, torch.bfloat16)
        kw["image_grid_thw"] = b["image_grid_thw"].to(device)
    cu = b["cu_seqlens_padded"].to(device, torch.int32)
    return kw | {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": b["max_seqlen_padded"],
                 "max_length_k": b["max_seqlen_padded"], "use_cache": False}


def _alone(b: dict, s: int, device: str) -> dict:
    """Sample ``s`` of batch ``b`` alone: its ids, its own positions (they restart per sample), its images."""
    start = int(b["cu_seqlens_padded"][s])
    n = int(b["cu_seqlens"][s + 1] - b["cu_seqlens"][s])
    kw = {"input_ids": b["input_ids"][:, start:start + n].to(device),
          "position_ids": b["position_ids"][..., start:start + n].to(device)}
    if "pixel_values" in b and int(b["images_per_sample"][s]):
        first = int(b["images_per_sample"][:s].sum())
        grids = b["image_grid_thw"][first:first + int(b["images_per_sample"][s])]
        rows = b["image_grid_thw"].prod(-1)
        p0 = int(rows[:first].sum())
        kw["pixel_values"] = b["pixel_values"][p0:p0 + int(grids.prod(-1).sum())].to(device, torch.bfloat16)
        kw["image_grid_thw"] = grids.to(device)
    cu = torch.tensor([0, n], dtype=torch.int32, device=device)
    return kw | {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": n, "max_length_k": n, "use_cache": False}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, reps: int = 5) -> float:
    fn()
    _sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - t0) / reps * 1e3


def run(src: Path) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batches = torch.load(src / "batches.pt", weights_only=True)
    models = _models(json.loads((src / "configs.json").read_text()), device)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'CPU dry run'}, bf16")
    print("| kind | cp_size | samples | T | max abs diff packed vs alone | control: one sequence, max diff "
          "of later samples | packed ms | one-by-one ms |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for b in batches:
        model = models[b["kind"]]
        n = len(b["cu_seqlens"]) - 1
        with torch.no_grad():
            packed = model(**_inputs(b, device)).logits[0].float()
            alone = [model(**_alone(b, s, device)).logits[0].float() for s in range(n)]
            control_kw = _inputs(b, device)
            t = b["input_ids"].shape[1]
            control_kw["cu_seq_lens_q"] = control_kw["cu_seq_lens_k"] = torch.tensor([0, t], dtype=torch.int32,
                                                                                      device=device)
            control_kw["max_length_q"] = control_kw["max_length_k"] = t
            control = model(**control_kw).logits[0].float()
            diff = ctl = 0.0
            for s in range(n):
                a = int(b["cu_seqlens_padded"][s])
                m = int(b["cu_seqlens"][s + 1] - b["cu_seqlens"][s])
                diff = max(diff, (packed[a:a + m] - alone[s]).abs().max().item())
                if s:
                    ctl = max(ctl, (control[a:a + m] - alone[s]).abs().max().item())
            t_packed = _timed(lambda: model(**_inputs(b, device)))
            t_alone = _timed(lambda: [model(**_alone(b, s, device)) for s in range(n)])
        worst = max(worst, diff)
        print(f"| {b['kind']} | {b['cp_size']} | {n} | {t} | {diff:.3g} | {ctl:.3g} | {t_packed:.1f} | "
              f"{t_alone:.1f} |")
    print(f"worst packed-vs-alone difference: {worst:.3g}")


if __name__ == "__main__":
    step, where = sys.argv[1], Path(sys.argv[2])
    if step == "prepare":
        # the test suite's cached model directory and demo data (tests/conftest.py)
        cache = Path(os.environ.get("VLMPACK_TEST_CACHE", Path.home() / ".cache" / "vlmpack" / "test"))
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
        from demo_data import build_demo_data, build_qwen2_5_vl_model_dir

        prepare(where, build_qwen2_5_vl_model_dir(cache / "qwen2_5_vl"), build_demo_data(cache / "real_data"))
    else:
        run(where)
