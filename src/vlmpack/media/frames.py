"""Decoding the sampled frames of a video with PyAV, as transformers' ``read_video_pyav`` does.

:func:`video_source` turns what a pack hands the collator (raw bytes, a path, a binary file
object, or Megatron-Energon's ``AVDecoder``, whose ``stream`` holds the bytes) into something
``av.open`` reads; :func:`decode_frames` decodes the first video stream from its start and keeps
the frames at the given indices (index = position in decode order), converted with
``frame.to_ndarray(format="rgb24")``, which is transformers' ``video_utils.read_video_pyav``
(frames in decode order, ``i in indices`` kept, stop after the last index, ``rgb24``).

Errors: :class:`vlmpack.errors.MediaDecodeError` (one line, starting with ``where``) when the
video does not open, decodes to fewer frames than the indices need, or its frames change size.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlmpack.errors import ConfigError, MediaDecodeError

__all__ = ["decode_frames", "video_source"]


def video_source(obj: Any, *, where: str = ""):
    """``obj`` as an ``av.open`` source: ``bytes``/``bytearray``/``memoryview`` -> ``BytesIO``; a
    path (``str``/``os.PathLike``) as it is; a readable binary file object rewound to 0; an
    object with a ``stream`` attribute (Energon's ``AVDecoder``) -> its stream rewound. Raises
    :class:`ConfigError` for another type (e.g. a decoded tensor)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(obj))
    if isinstance(obj, (str, os.PathLike)):
        return os.fspath(obj)
    stream = getattr(obj, "stream", None)
    if stream is not None and hasattr(stream, "read"):
        obj = stream
    if hasattr(obj, "read") and hasattr(obj, "seek"):
        obj.seek(0)
        return obj
    raise ConfigError(f"{where}: a video of type {type(obj).__name__} cannot be used; pass raw bytes, a path or "
                      "a binary file object (vlmpack's TaskEncoder leaves media undecoded)")


def decode_frames(obj: Any, indices: Sequence[int], *, where: str = "") -> np.ndarray:
    """uint8 ``[len(indices), H, W, 3]`` RGB frames of the first video stream of ``obj`` (see
    :func:`video_source`) at ``indices`` (non-decreasing ints, positions in decode order; a
    repeated index repeats its frame). Raises :class:`MediaDecodeError` when the video does not
    open or decode, has fewer frames than ``max(indices) + 1``, or its kept frames differ in size."""
    import av

    idx = np.asarray(indices, dtype=np.int64)
    if not len(idx):
        raise MediaDecodeError(f"{where}: no frames to decode")
    if np.any(np.diff(idx) < 0) or idx[0] < 0:
        raise ValueError(f"frame indices must be non-decreasing and >= 0, got {idx[:8].tolist()}...")
    wanted = set(idx.tolist())
    last = int(idx[-1])
    kept: dict[int, np.ndarray] = {}
    try:
        with av.open(video_source(obj, where=where), metadata_errors="ignore") as container:
            container.seek(0)
            for i, frame in enumerate(container.decode(video=0)):
                if i > last:
                    break
                if i in wanted:
                    kept[i] = frame.to_ndarray(format="rgb24")
    except (av.FFmpegError, OSError, EOFError, ValueError, IndexError) as e:
        detail = " ".join(str(e).split()) or type(e).__name__
        raise MediaDecodeError(f"{where}: video does not decode ({type(e).__name__}: {detail}); the shard or file "
                               "is corrupt or changed after packing: re-pack it") from None
    if last not in kept:
        raise MediaDecodeError(f"{where}: video decodes to {len(kept) and max(kept) + 1} frames but frame {last} "
                               "is needed (its header said more); re-pack it: vlmpack pack's media check (not "
                               "--media-check header) rejects such a video")
    sizes = {a.shape for a in kept.values()}
    if len(sizes) != 1:
        raise MediaDecodeError(f"{where}: the sampled frames have several sizes {sorted(sizes)}; such a video "
                               "cannot be stacked (the processor refuses it too)")
    return np.stack([kept[i] for i in idx.tolist()])
