"""Synthetic VLM-SFT length distributions for the packing benchmark (seeded, numpy only).

* ``text``: chat lengths, lognormal with median 350 tokens (sigma 1.0), clipped to [8, 8192].
* ``image``: single-image Qwen2.5-VL samples: image tokens from ``smart_resize`` (factor 28,
  min_pixels 56*56, max_pixels 1280*28*28, the common SFT setting) of realistic photo/screenshot
  sizes, plus 20-600 text tokens.
* ``mixture``: 45 % text, 45 % image, 10 % near-capacity samples (uniform in [0.9 L, L]).

Returns (lengths int64 [n], media_counts int64 [n], media_tokens int64 [n], kinds int8 [n]).
"""

from __future__ import annotations

import numpy as np

FACTOR = 28
MIN_PIXELS = 56 * 56
MAX_PIXELS = 1280 * 28 * 28
_SIZES = np.array(
    [(480, 640), (768, 1024), (720, 1280), (1080, 1920), (600, 800), (512, 512), (336, 336),
     (4032, 3024), (3024, 4032), (1170, 2532), (900, 1600), (448, 448), (375, 500), (1536, 2048)],
    dtype=np.float64,
)


def smart_resize_tokens(h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Qwen2-VL ``smart_resize`` then tokens = (h/28) * (w/28), vectorised; int64."""
    hb = np.maximum(FACTOR, np.round(h / FACTOR) * FACTOR)
    wb = np.maximum(FACTOR, np.round(w / FACTOR) * FACTOR)
    big = hb * wb > MAX_PIXELS
    beta = np.sqrt(h * w / MAX_PIXELS)
    hb = np.where(big, np.maximum(FACTOR, np.floor(h / beta / FACTOR) * FACTOR), hb)
    wb = np.where(big, np.maximum(FACTOR, np.floor(w / beta / FACTOR) * FACTOR), wb)
    small = hb * wb < MIN_PIXELS
    beta = np.sqrt(MIN_PIXELS / (h * w))
    hb = np.where(small, np.ceil(h * beta / FACTOR) * FACTOR, hb)
    wb = np.where(small, np.ceil(w * beta / FACTOR) * FACTOR, wb)
    return ((hb // FACTOR) * (wb // FACTOR)).astype(np.int64)


def _text(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(350), 1.0, n)), 8, 8192).astype(np.int64)


def _image(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    pick = _SIZES[rng.integers(0, len(_SIZES), n)]
    jitter = rng.uniform(0.7, 1.0, (n, 1))  # crops / downscaled uploads
    hw = np.maximum(32, np.round(pick * jitter))
    vt = smart_resize_tokens(hw[:, 0], hw[:, 1])
    text = rng.integers(20, 601, n).astype(np.int64)
    return vt + text, vt


def make(name: str, n: int, capacity: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """One distribution by name ("text", "image", "mixture") at size ``n`` for capacity ``L``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    zeros = np.zeros(n, dtype=np.int64)
    if name == "text":
        return _text(rng, n), zeros, zeros.copy(), np.zeros(n, dtype=np.int8)
    if name == "image":
        lengths, vt = _image(rng, n)
        return lengths, np.ones(n, dtype=np.int64), vt, np.ones(n, dtype=np.int8)
    if name == "mixture":
        which = rng.choice(3, size=n, p=[0.45, 0.45, 0.10])
        lengths = _text(rng, n)
        img_len, vt = _image(rng, n)
        near = rng.integers(int(0.9 * capacity), capacity + 1, n).astype(np.int64)
        is_img = which == 1
        lengths = np.where(is_img, img_len, np.where(which == 2, near, lengths))
        mc = is_img.astype(np.int64)
        mt = np.where(is_img, vt, 0)
        return lengths, mc, mt, which.astype(np.int8).clip(0, 1)
    raise ValueError(f"unknown distribution {name!r}; use text, image or mixture")


NAMES = ("text", "image", "mixture")
