"""Shape-true stand-ins of the ``torchvision.transforms.v2.functional`` calls transformers' Kimi
processor makes (see ../../../README.md); tensors are ``[..., C, H, W]``."""

import os
from enum import Enum

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["InterpolationMode", "grayscale_to_rgb", "normalize", "pad", "pil_to_tensor", "resize", "to_dtype"]

#: torchvision's interpolation modes (transformers maps PIL's resampling filters onto them)
InterpolationMode = Enum("InterpolationMode", {"NEAREST": "nearest", "NEAREST_EXACT": "nearest-exact",
                                               "BILINEAR": "bilinear", "BICUBIC": "bicubic", "BOX": "box",
                                               "HAMMING": "hamming", "LANCZOS": "lanczos"})


def pil_to_tensor(img):
    a = np.asarray(img)
    if a.ndim == 2:
        a = a[:, :, None]
    return torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous()


def grayscale_to_rgb(x):
    return x.expand(*x.shape[:-3], 3, *x.shape[-2:]) if x.shape[-3] == 1 else x


def to_dtype(x, dtype, scale=False):
    if scale and not x.is_floating_point() and dtype.is_floating_point:
        return x.to(dtype) / 255.0
    return x.to(dtype)


def _pixels() -> bool:
    return os.environ.get("KIMI_STANDIN_PIXELS") == "1"


def resize(x, size, interpolation=None, antialias=True):
    """``x`` resized to ``size`` (h, w): interpolated with ``KIMI_STANDIN_PIXELS=1``, else a tensor of
    that shape on PyTorch's ``meta`` device (shape and dtype, no data: every later step of the
    processor keeps shapes at no cost)."""
    shape = (*x.shape[:-2], int(size[0]), int(size[1]))
    if not _pixels():
        return torch.empty(shape, dtype=x.dtype, device="meta")
    mode = {InterpolationMode.BICUBIC: "bicubic", InterpolationMode.BILINEAR: "bilinear"}.get(interpolation, "nearest")
    y = x.float().reshape(-1, *x.shape[-3:])
    if mode == "nearest":
        y = F.interpolate(y, size=list(size), mode=mode)
    else:
        y = F.interpolate(y, size=list(size), mode=mode, antialias=antialias, align_corners=False)
    y = y.reshape(shape)
    return y.round().clamp(0, 255).to(x.dtype) if x.dtype == torch.uint8 else y.to(x.dtype)


def pad(x, padding, fill=0, padding_mode="constant"):
    """``padding`` = (left, top, right, bottom) px of ``fill`` (constant padding, what transformers asks)."""
    assert padding_mode == "constant", padding_mode
    left, top, right, bottom = padding if len(padding) == 4 else (padding[0], padding[1], padding[0], padding[1])
    return F.pad(x, (left, right, top, bottom), value=fill)


def normalize(x, mean, std, inplace=False):
    """``(x - mean) / std`` per channel; ``x`` itself without pixels (shape-true)."""
    if not _pixels():
        return x
    m = torch.as_tensor(mean, dtype=x.dtype).view(-1, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype).view(-1, 1, 1)
    return (x - m) / s
