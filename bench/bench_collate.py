"""Benchmark of the training-side collation: tokens/s of building packed batches on one core.

Stages timed (median of ``--repeats`` runs, one process, ``torch.set_num_threads(1)``):

- ``collate``: encoded samples (ids + labels) -> batch (positions, cu_seqlens, seq_idx, labels
  boundary fix, tensors); what runs per step after encoding.
- ``+mrope numpy`` / ``+mrope hf``: the same plus per-sample mRoPE (vectorised, or transformers'
  ``get_rope_index`` once per sample); packs hold real image samples of the demo set.
- ``full text``: a text pack dict -> batch: chat template render + tokenizer + label scan +
  collate (what the TaskEncoder does per text pack).
- ``pretokenized``: the same text pack with its ``input_ids`` part (``vlmpack pack --pretokenize``)
  -> batch: no render, no tokenizer; label scan + collate.
- ``dense mask``: collate with the ``[1, 1, T, T]`` block mask (sdpa/eager, on request).
Image decoding + the image processor are reported separately (ms per image): they depend on
image sizes, not on packing.

Samples are real: encoded demo samples concatenated to the target length (collate/mRoPE rows)
and real multi-turn text conversations (full text rows). Usage::

    python bench/bench_collate.py --model-dir DIR --real-data DIR [--repeats 5] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch

from vlmpack.layouts import to_canonical
from vlmpack.train import PackCollator
from vlmpack.train.encode import EncodedPack, PackItem, open_image


def _timeit(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def load_samples(real_data: Path, limit: int = 1500) -> tuple[list[PackItem], list[PackItem]]:
    text, image = [], []
    for line in open(real_data / "real_sft.jsonl"):
        obj = json.loads(line)
        msgs, media = to_canonical(obj)
        if media:
            if len(image) < 200:
                image.append(PackItem(obj["id"], msgs, [open_image(real_data / r) for _, r in media]))
        elif len(text) < limit:
            text.append(PackItem(obj["id"], msgs, []))
        if len(text) >= limit and len(image) >= 200:
            break
    return text, image


def encoded_pool(collator: PackCollator, items: list[PackItem]) -> list[EncodedPack]:
    return [collator.encoder.encode([it]) for it in items]


def make_encoded_pack(pool_img: list[EncodedPack], pool_txt: list[EncodedPack], t: int, n: int,
                      rng: np.random.Generator) -> EncodedPack:
    """n samples of exactly t // n tokens (last one takes the rest): whole real encoded samples
    (image ones first) while they fit, filled up with real text tokens."""
    lens = [t // n] * n
    lens[-1] += t - sum(lens)
    filler = np.concatenate([p.input_ids for p in pool_txt])
    ids, labels, grids, per = [], [], [], []
    for L in lens:
        s_ids, s_lab, s_g, k, used = [], [], [], 0, 0
        for _ in range(50):
            c = pool_img[rng.integers(len(pool_img))]
            if used + c.num_tokens > L:
                break
            s_ids.append(c.input_ids)
            s_lab.append(c.labels)
            s_g.append(c.image_grid_thw)
            k += len(c.image_grid_thw)
            used += c.num_tokens
        rest = L - used
        start = int(rng.integers(0, len(filler) - rest - 1))
        s_ids.append(filler[start:start + rest])
        s_lab.append(filler[start:start + rest])
        ids.append(np.concatenate(s_ids))
        labels.append(np.concatenate(s_lab))
        grids += s_g
        per.append(k)
    g = np.concatenate(grids) if grids else np.zeros((0, 3), dtype=np.int64)
    return EncodedPack(key="bench", sample_ids=[str(i) for i in range(n)], lengths=np.array(lens, dtype=np.int64),
                       input_ids=np.concatenate(ids), labels=np.concatenate(labels), image_grid_thw=g,
                       images_per_sample=per, pixel_values=None)


def text_pack(collator: PackCollator, pool: list[PackItem], counts: list[int], t: int, n: int,
              rng: np.random.Generator) -> list[PackItem]:
    """n real multi-turn text conversations of about t / n tokens each (turns of real samples merged)."""
    target = t // n
    out = []
    for i in range(n):
        msgs, total = [], 0
        while total < target * 0.9 or not msgs:
            j = int(rng.integers(len(pool)))
            msgs += [m for m in pool[j].messages if m["role"] != "system"]
            total += counts[j]
        out.append(PackItem(f"s{i}", msgs, []))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True, type=Path)
    ap.add_argument("--real-data", required=True, type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    plain = PackCollator(args.model_dir, mrope=False)
    fast = PackCollator(args.model_dir, rope_impl="numpy")
    hf = PackCollator(args.model_dir, rope_impl="transformers")
    dense = PackCollator(args.model_dir, mrope=False, attn_implementation="sdpa", dense_mask=True)
    text_items, image_items = load_samples(args.real_data)
    pool_txt = encoded_pool(plain, text_items[:300])
    pool_img = encoded_pool(plain, image_items)
    counts = [p.num_tokens - 10 for p in encoded_pool(plain, text_items)]  # minus the system turn
    rows = []
    for t in (8192, 32768):
        for n in (1, 10, 100, 500):
            enc = make_encoded_pack(pool_img, pool_txt, t, n, rng)
            r = {"T": t, "samples": n}
            r["collate"] = t / _timeit(lambda: plain.collate([enc]), args.repeats)
            r["collate_peak_B_per_tok"] = _peak_bytes(lambda: plain.collate([enc])) / t
            r["mrope_numpy"] = t / _timeit(lambda: fast.collate([_with_mrope(fast, enc)]), args.repeats)
            r["mrope_hf"] = t / _timeit(lambda: hf.collate([_with_mrope(hf, enc)]), max(1, args.repeats // 2))
            if t * 1.0 / n >= 40:
                items = text_pack(plain, text_items, counts, t, n, rng)
                tt = int(sum(plain.encoder.encode(items).lengths))
                if tt <= 1.5 * t:  # real conversations cannot be shorter than ~25 tokens
                    r["full_T"] = tt
                    r["full_text"] = tt / _timeit(lambda: fast([*items]), max(1, args.repeats // 2))
                    enc_items = plain.encoder.encode(items)
                    bounds = np.cumsum([0, *enc_items.lengths.tolist()])
                    pre = {"__key__": "bench", "num_tokens": tt, "media": [], "media_parts": [],
                           "input_ids": enc_items.input_ids.astype(np.int32),
                           "samples": [{"id": it.id, "num_tokens": int(b - a), "messages": it.messages, "media": []}
                                       for it, a, b in zip(items, bounds[:-1], bounds[1:])]}
                    r["pretokenized"] = tt / _timeit(lambda: fast(pre), args.repeats)
                    toks = [plain.family.render(it.messages) for it in items]
                    r["tokenizer_only"] = tt / _timeit(lambda: plain.family.tokenize(toks), max(1, args.repeats // 2))
            if t <= 8192:
                r["dense"] = t / _timeit(lambda: dense.collate([enc]), max(1, args.repeats // 2))
                r["dense_mask_MiB"] = t * t / 2**20
            rows.append(r)
            print(json.dumps(r), flush=True)
    imgs = [it.images[0] for it in image_items[:50]]
    per_img = _timeit(lambda: plain.encoder.process_images(imgs), 1) / len(imgs)
    print(json.dumps({"image_processor_ms_per_image": per_img * 1e3,
                      "mean_image_tokens": float(np.mean([p.image_grid_thw.prod(1).sum() / 4 for p in pool_img]))}))
    if args.markdown:
        print(_markdown(rows))


def _with_mrope(c: PackCollator, enc: EncodedPack) -> EncodedPack:
    enc.mrope = c._pack_mrope(enc)
    return enc


def _markdown(rows: list[dict]) -> str:
    def f(v):
        return "—" if v is None else f"{v / 1e6:.2f} M"

    out = ["| T | samples/pack | collate | + mRoPE (numpy) | + mRoPE (transformers) | full text path "
           "(render+tokenize+collate) | pretokenized pack path | tokenizer alone | dense mask (sdpa/eager) | "
           "peak B/token (collate) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['T']} | {r['samples']} | {f(r['collate'])} | {f(r['mrope_numpy'])} | {f(r['mrope_hf'])} | "
                   f"{f(r.get('full_text'))} | {f(r.get('pretokenized'))} | {f(r.get('tokenizer_only'))} | "
                   f"{f(r.get('dense'))} | "
                   f"{r['collate_peak_B_per_tok']:.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
