"""Header-only counting per image sample: the generic family against the dedicated Qwen2-VL path.

    python bench/bench_generic.py [--real-data demo/real_data] [--model demo/model] [--repeat 3]

Every image sample of the demo set (``demo/real_data/real_sft.jsonl``, parsed and its image
headers probed once, outside the timing: ``tools/generic_sweep.py``'s ``image_samples``) is counted
by the count stage's own ``count_samples``: media tokens from the header sizes, the field and
special-token checks, the chat template rendered and tokenized in batches of 256, ``num_tokens``.
Rows: the dedicated ``Qwen2VLFamily`` on the demo Qwen2.5-VL directory, the generic family forced
on that same directory (the same tokenizer and template: the difference is
``_get_num_multimodal_tokens`` against the ``smart_resize`` rule), and the generic family on the
LLaVA-NeXT stand-in (``tools/demo_data/generic_dirs.py``). Median
of ``--repeat`` runs; the ratio is against the dedicated row. The families are built (and the
generic ones calibrated) before timing; their size caches are cleared before every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))


def _count(family, samples) -> int:
    """The count stage's own :func:`vlmpack.pack.count_task.count_samples` (batches of 256); total tokens."""
    from vlmpack.pack.count_task import count_samples

    counted, rejected = count_samples(family, samples)
    assert not rejected, rejected[:1]
    return sum(s.num_tokens for s in counted)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-data", default="demo/real_data", help="the demo builder's real_data folder")
    ap.add_argument("--model", default="demo/model", help="a Qwen2.5-VL model directory (the demo's)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from demo_data.generic_dirs import build_llava_next_model_dir
    from generic_sweep import image_samples

    from vlmpack.models import load_model
    from vlmpack.models.generic import GenericFamily

    samples = [s for s, _ in image_samples(Path(args.real_data), None, decode=False)]
    qwen = Path(args.model)
    llava_next = build_llava_next_model_dir(qwen.parent / "llava_next")
    rows = [("Qwen2VLFamily (dedicated), Qwen2.5-VL dir", load_model(str(qwen))),
            ("GenericFamily, the same Qwen2.5-VL dir", GenericFamily(qwen)),
            ("GenericFamily, LLaVA-NeXT stand-in", load_model(str(llava_next)))]
    print(f"{len(samples)} image samples, {sum(len(s.media) for s in samples)} images; median of {args.repeat}")
    print(f"| {'family':44s} | total s | us / image sample | ratio |")
    print(f"|{'-' * 46}|---------|------------------|-------|")
    base = None
    for name, fam in rows:
        times = []
        for _ in range(args.repeat):
            cache = getattr(fam, "_image_tokens", None)
            if cache is not None and hasattr(cache, "cache_clear"):
                cache.cache_clear()
            t = time.perf_counter()
            _count(fam, samples)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        base = base or med
        print(f"| {name:44s} | {med:7.2f} | {med / len(samples) * 1e6:16.0f} | {med / base:5.2f} |")
    print(json.dumps({"samples": len(samples)}))


if __name__ == "__main__":
    main()
