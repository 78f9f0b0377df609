"""One-off record of the published Kimi-VL image processor's pixels (not run by the tests).

Run once, by hand, as ``tools/kimi_vl_published_check.py`` is (its docstring: ``PUB`` holds the
reconstructed ``image_processing_kimi_vl.py`` and a PIL-exact stand-in of the four
``torchvision.transforms.functional`` calls it makes; ``TF451`` a ``pip install --target`` folder of
transformers 4.51.3), or, as was done for the fixture, with ``PUB`` holding only
``image_processing_kimi_vl.py`` and a Python whose site-packages has a **real** torchvision (a scratch
venv with torch 2.14.1 + torchvision 0.29.1; the stand-in gave the same bytes on every image):

    PYTHONPATH=PUB:TF451 python tools/kimi_vl_pixels_check.py MODEL_DIR DEMO_ROOT OUT.json

For a few demo images chosen by rule from ``DEMO_ROOT/real_sft.jsonl`` (:func:`pick`: the largest
image, the largest of each PIL mode, images whose sides are not multiples of 28, one whose sides
are) and a few seeded noise images (:data:`NOISE`), decoded by transformers 4.51.3's ``load_image``
(EXIF orientation applied, RGB), it runs ``KimiVLImageProcessor.preprocess`` (the directory's
``preprocessor_config.json``) once per image and records: the decoded size and the sha256 of the
decoded uint8 array (what the processor was given), ``image_grid_hws``, the shape, sum and sha256 of
``pixel_values`` (float32, C order: equal hashes mean equal values, bit for bit), and for the
smallest noise image the whole array. Output: ``tests/fixtures/kimi_vl_published_pixels.json``,
compared with ``vlmpack.models.kimi_vl.kimi_vl_pixels`` by ``tests/test_models_kimi_vl.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

#: Seeded noise images ``(width, height, seed)``: ``np.random.default_rng(seed).integers(0, 256,
#: (height, width, 3), dtype=np.uint8)``; a side under a patch, odd sides, over ``in_token_limit``.
NOISE = [(13, 13, 1), (27, 29, 2), (900, 918, 3), (1500, 401, 4)]
#: The noise image whose whole ``pixel_values`` is recorded.
FULL = "noise_13x13"


def noise_image(width: int, height: int, seed: int):
    """A seeded RGB noise image (PIL) of ``width`` x ``height`` (the test builds the same)."""
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def pick(root: Path) -> list[str]:
    """Demo image file names chosen by rule (sorted names, so the choice is reproducible): the one
    with the most pixels, the largest of each stored PIL mode, the first two whose width or height is
    not a multiple of 28 with under 4096 patches, the first with both sides multiples of 28."""
    from PIL import Image

    names = sorted({n for line in (root / "real_sft.jsonl").read_text().splitlines()
                    for im in [json.loads(line).get("images") or json.loads(line).get("image")]
                    for n in ([im] if isinstance(im, str) else im or [])})
    info = {}
    for n in names:
        with Image.open(root / n) as im:
            info[n] = (im.mode, im.size)
    chosen = [max(names, key=lambda n: info[n][1][0] * info[n][1][1])]
    for mode in sorted({m for m, _ in info.values()}):
        chosen.append(max((n for n in names if info[n][0] == mode), key=lambda n: info[n][1][0] * info[n][1][1]))
    small = [n for n in names if (info[n][1][0] // 14) * (info[n][1][1] // 14) <= 4096]
    chosen += [n for n in small if info[n][1][0] % 28 or info[n][1][1] % 28][:2]
    chosen += [n for n in names if info[n][1][0] % 28 == 0 and info[n][1][1] % 28 == 0][:1]
    return list(dict.fromkeys(chosen))


def record(image_processor, img) -> dict:
    """What ``image_processor`` gives one RGB PIL image (module docstring)."""
    arr = np.asarray(img, dtype=np.uint8)
    out = image_processor.preprocess([img], return_tensors="pt")
    px = out["pixel_values"].numpy()
    assert px.dtype == np.float32
    return {"size": list(img.size), "input_sha256": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest(),
            "image_grid_hws": out["image_grid_hws"].tolist(), "shape": list(px.shape),
            "sum": float(px.sum(dtype=np.float64)),
            "sha256": hashlib.sha256(np.ascontiguousarray(px).tobytes()).hexdigest()}


def main(model_dir: str, demo_root: str, dest: str) -> None:
    import torch
    import torchvision
    import transformers
    from image_processing_kimi_vl import KimiVLImageProcessor
    from transformers.image_utils import load_image

    pre = json.loads((Path(model_dir) / "preprocessor_config.json").read_text())
    ip = KimiVLImageProcessor(**{k: pre[k] for k in ("patch_size", "pad_input", "image_mean", "image_std",
                                                     "in_token_limit", "merge_kernel_size")})
    root = Path(demo_root)
    res = {}
    for name in pick(root):
        res[name] = record(ip, load_image(str(root / name)))
    for w, h, seed in NOISE:
        key = f"noise_{w}x{h}"
        res[key] = record(ip, noise_image(w, h, seed))
        if key == FULL:
            res[key]["pixel_values"] = ip.preprocess([noise_image(w, h, seed)])["pixel_values"].numpy().tolist()
    Path(dest).write_text(json.dumps({
        "what": "Kimi-VL's published KimiVLImageProcessor (reconstructed from public copies, pad_input path) under "
                f"transformers {transformers.__version__}, by tools/kimi_vl_pixels_check.py (see its docstring): per "
                "image, the decoded input's sha256, image_grid_hws and pixel_values' shape, sum and sha256 (float32)",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "torchvision": f"{torchvision.__version__} from {Path(torchvision.__file__).parent}",
        "preprocessor_config": pre, "noise": NOISE, "images": res}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
