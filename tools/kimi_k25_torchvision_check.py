"""One-off cross-check of Kimi-K2.5's image processor with real torchvision (not run by the tests).

transformers' ``Kimi_K25ImageProcessor`` is torchvision-only and torchvision cannot be installed beside
this project's CPU torch, so the test suite runs transformers' Kimi classes on a shape-true stand-in
of torchvision (``tests/kimi_standin``). This script, run once in a separate environment with real
torch + torchvision (``python -m venv v && v/bin/pip install torch torchvision transformers==5.24.0
pillow``; about 5.7 GB with the CUDA wheels), records what the real processor gives for 50 image sizes:
the edge cases (1 x 1, a side under one patch, the 512-patches-per-side and the 16,384-patch limits,
aspect ratios up to 900) and 40 random sizes (``random.seed(1)``, sides 1-5000). Output: JSON
``{"torch", "tv", "res": {"WxH": [[t, h, w], pixel_values sum]}}``, saved (grids and sums) as
``tests/fixtures/kimi_k25_torchvision_grids.json``, which ``tests/test_models_kimi_k25.py`` compares
with vlmpack's header rule (every grid) and with the stand-in (grids).

Usage: ``v/bin/python tools/kimi_k25_torchvision_check.py OUT.json``. Pixels: ``Image.effect_noise``
(seeded by PIL's own generator, so the sums are for that run's images) below 4 megapixels, a flat
colour above.
"""

from __future__ import annotations

import json
import random
import sys


def sizes() -> list[tuple[int, int]]:
    """The 50 (width, height) of the record, in its order."""
    random.seed(1)
    edge = [(640, 480), (1, 1), (3000, 200), (513, 1025), (4000, 3000), (8000, 100), (100, 9000), (27, 29),
            (7168, 7168), (7169, 10)]
    return edge + [(random.randint(1, 5000), random.randint(1, 5000)) for _ in range(40)]


def main(dest: str) -> None:
    import torch
    import torchvision
    from PIL import Image
    from transformers.models.kimi_k25.image_processing_kimi_k25 import Kimi_K25ImageProcessor

    ip = Kimi_K25ImageProcessor()
    res = {}
    for w, h in sizes():
        im = Image.effect_noise((w, h), 50).convert("RGB") if w * h < 4e6 else Image.new("RGB", (w, h), (10, 200, 30))
        out = ip(im, return_tensors="pt")
        res[f"{w}x{h}"] = [out["image_grid_thw"].tolist()[0], float(out["pixel_values"].double().sum())]
    with open(dest, "w") as f:
        json.dump({"torch": torch.__version__, "tv": torchvision.__version__, "res": res}, f)


if __name__ == "__main__":
    main(sys.argv[1])
