"""Per-sample multimodal RoPE (mRoPE) positions of packs for mRoPE families (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL: ``ModelFamily.mrope``).

A packed row must get, for every sample, exactly the 3D positions the model would compute for
that sample alone (restarting at 0), concatenated (USERS.md theme C; NeMo Automodel#2172,
axolotl#3817). Two implementations, equal by test:

- ``"transformers"`` (default): the model class's own ``get_rope_index`` (the family's
  :meth:`~vlmpack.models.base.ModelFamily.rope_model_class`, e.g. transformers
  ``Qwen2_5_VLModel.get_rope_index``), called once per sample
  with that sample's ids, ``mm_token_type_ids`` and image grids. The method only reads
  ``self.config.vision_config`` and ``self.get_vision_position_ids``, so it is called on a
  light stand-in holding the model's config; no weights are built.
- ``"numpy"``: a vectorised re-implementation of the same rule for the whole pack at once
  (text tokens advance the position by 1; an image of grid ``(t, h, w)`` takes positions
  ``start + (t_i, h_i, w_i)`` on the merged ``h/m x w/m`` grid and advances the position by
  ``max(h, w) / m``). :class:`MRopeIndexer` checks it against ``"transformers"`` when built
  and refuses to run if they disagree (e.g. after a transformers change).

Layouts: ``[3, 1, T]`` (temporal, height, width) or ``[4, 1, T]`` with a first text row that
restarts at 0 per sample, the form transformers' Qwen-VL text models use to detect packed
sequences from ``position_ids`` (``Qwen2_5_VLTextModel.forward``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from vlmpack.errors import ConfigError

RopeImpl = Literal["transformers", "numpy"]


class MRopeIndexer:
    """Computes packed mRoPE positions for one model family.

    Args:
      family: a :class:`vlmpack.models.base.ModelFamily` with ``mrope`` (or the path of its model
        directory); its ``rope_model_class()`` gives ``get_rope_index``, its ``config.json``
        ``vision_config.spatial_merge_size``.
      image_token_id: id of the image pad token (default: the family's ``image_token_id``).
      impl: ``"transformers"`` or ``"numpy"`` (see module docstring).

    Raises :class:`ConfigError` for a family without mRoPE, or when ``impl="numpy"`` disagrees
    with the installed transformers' ``get_rope_index`` on the built-in self-check.
    """

    def __init__(self, family, image_token_id: int | None = None, *, impl: RopeImpl = "transformers"):
        from transformers import AutoConfig

        if isinstance(family, (str, Path)):
            from vlmpack.models import load_model

            family = load_model(str(family))
        if not getattr(family, "mrope", False):
            raise ConfigError(f"{family.model_dir}: the {family.name} family has no mRoPE positions")
        cls = family.rope_model_class()
        self.model_type = getattr(family, "model_type", family.name)
        self.config = AutoConfig.from_pretrained(str(family.model_dir))
        self.merge = int(self.config.vision_config.spatial_merge_size)
        self.image_token_id = int(family.image_token_id if image_token_id is None else image_token_id)
        vid = getattr(family, "video_token_id", None)
        self.video_token_id = None if vid is None else int(vid)
        if impl not in ("transformers", "numpy"):
            raise ConfigError(f"rope_impl must be 'transformers' or 'numpy', got {impl!r}")
        self.impl = impl
        shim_cls = type("_RopeIndexShim", (), {"get_rope_index": cls.get_rope_index,
                                               "get_vision_position_ids": cls.get_vision_position_ids})
        self._shim = shim_cls()
        self._shim.config = self.config
        if impl == "numpy":
            self._self_check()

    # ------------------------------------------------------------------ one sample, transformers
    def sample_positions_transformers(self, ids: np.ndarray, grids: np.ndarray, video_grids=None,
                                      second_per_grid_ts=None) -> np.ndarray:
        """int64 ``[3, n]`` positions of one sample from the model class's ``get_rope_index``.

        ids: int ``[n]``; grids: int ``[k, 3]`` (t, h, w in patches) of the sample's images, in order;
        video_grids: int ``[kv, 3]`` of its videos (or None); second_per_grid_ts: float32 ``[kv]``
        seconds per temporal patch (Qwen2.5-VL's ``second_per_grid_ts``, None for the others).
        ``mm_token_type_ids`` as the processors build them: 1 on image pads, 2 on video pads.
        """
        t_ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))[None]
        mm = (t_ids == self.image_token_id).to(torch.int32)
        kw = {}
        if video_grids is not None and len(video_grids):
            mm[t_ids == self.video_token_id] = 2
            kw["video_grid_thw"] = torch.as_tensor(np.asarray(video_grids, dtype=np.int64)).reshape(-1, 3)
            if second_per_grid_ts is not None:
                kw["second_per_grid_ts"] = torch.as_tensor(second_per_grid_ts)
        grid_t = torch.as_tensor(np.asarray(grids, dtype=np.int64)).reshape(-1, 3) if len(grids) else None
        pos, _ = self._shim.get_rope_index(t_ids, mm_token_type_ids=mm, image_grid_thw=grid_t, **kw)
        return pos[:, 0].numpy()

    # ------------------------------------------------------------------ whole pack
    def pack_positions(self, ids: np.ndarray, lengths: Sequence[int], grids: Sequence[np.ndarray],
                       video_grids: Sequence[np.ndarray] | None = None,
                       video_seconds: Sequence | None = None) -> np.ndarray:
        """int64 ``[3, T]`` per-sample mRoPE positions of a packed row, concatenated.

        ids: int ``[T]`` = concatenated sample ids; lengths: tokens per sample (sum T); grids: per
        sample an int ``[k_s, 3]`` array of its images' grids; video_grids / video_seconds: the
        same for its videos and their ``second_per_grid_ts`` (None: no videos / none taken). A
        pack with videos always takes the ``"transformers"`` path (the numpy rule is images-only).
        Raises ``ValueError`` when a sample's image-pad runs do not match its grids (the caller
        reports it as a pack error).
        """
        has_video = video_grids is not None and any(len(g) for g in video_grids)
        if self.impl == "transformers" or has_video:
            out, start = [], 0
            vg = video_grids if has_video else [None] * len(lengths)
            vs = video_seconds if has_video and video_seconds is not None else [None] * len(lengths)
            for n, g, v, sec in zip(lengths, grids, vg, vs):
                out.append(self.sample_positions_transformers(ids[start:start + n], g, v, sec))
                start += n
            return np.concatenate(out, axis=1) if out else np.zeros((3, 0), dtype=np.int64)
        return mrope_positions_numpy(ids, lengths, grids, self.image_token_id, self.merge)

    def _self_check(self) -> None:
        rng = np.random.default_rng(0)
        m2 = self.merge * self.merge
        grids = [np.array([[1, 4, 6], [1, 2, 2]]), np.zeros((0, 3), dtype=np.int64), np.array([[1, 8, 2]])]
        ids_parts, lengths = [], []
        for g in grids:
            parts = [rng.integers(10, 1000, size=3)]
            for t, h, w in g:
                parts += [np.full(t * h * w // m2, self.image_token_id), rng.integers(10, 1000, size=2)]
            s = np.concatenate(parts)
            ids_parts.append(s)
            lengths.append(len(s))
        ids = np.concatenate(ids_parts)
        fast = mrope_positions_numpy(ids, lengths, grids, self.image_token_id, self.merge)
        ref = np.concatenate([self.sample_positions_transformers(s, g) for s, g in zip(ids_parts, grids)], axis=1)
        if not np.array_equal(fast, ref):
            raise ConfigError("rope_impl='numpy' disagrees with this transformers' get_rope_index; "
                              "use rope_impl='transformers'")


def mrope_positions_numpy(ids: np.ndarray, lengths: Sequence[int], grids: Sequence[np.ndarray],
                          image_token_id: int, merge: int) -> np.ndarray:
    """Vectorised per-sample mRoPE positions (int64 ``[3, T]``) for image-only Qwen-VL packs.

    Same rule as transformers' ``get_rope_index`` for images (``time_interval`` 1); see the module
    docstring. Raises ``ValueError`` when image-pad runs and grids disagree.
    """
    ids = np.asarray(ids)
    t_total = len(ids)
    lens = np.asarray(lengths, dtype=np.int64)
    seg_start = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if len(lens) else lens
    is_img = ids == image_token_id
    prev = np.concatenate(([False], is_img[:-1]))
    starts_mask = is_img & ~prev
    starts_mask[seg_start[is_img[seg_start]]] = True  # a run never continues across samples
    run_starts = np.flatnonzero(starts_mask)
    nxt = np.concatenate((is_img[1:], [False]))
    end_mask = is_img & ~nxt
    seg_last = seg_start + lens - 1
    end_mask[seg_last[is_img[seg_last]]] = True
    run_ends = np.flatnonzero(end_mask) + 1
    g = np.concatenate([np.asarray(x, dtype=np.int64).reshape(-1, 3) for x in grids]) if len(grids) else \
        np.zeros((0, 3), dtype=np.int64)
    if len(run_starts) != len(g):
        raise ValueError(f"{len(run_starts)} image-pad runs for {len(g)} image grids")
    # each sample's runs must pair with that sample's grids
    run_sample = np.searchsorted(seg_start, run_starts, side="right") - 1
    grid_sample = np.repeat(np.arange(len(grids)), [np.asarray(x).reshape(-1, 3).shape[0] for x in grids])
    if not np.array_equal(run_sample, grid_sample):
        raise ValueError("image-pad runs and image grids are not in the same samples")
    llm_h, llm_w = g[:, 1] // merge, g[:, 2] // merge
    run_len = run_ends - run_starts
    if not np.array_equal(run_len, g[:, 0] * llm_h * llm_w):
        bad = int(np.flatnonzero(run_len != g[:, 0] * llm_h * llm_w)[0])
        raise ValueError(f"image {bad}: {int(run_len[bad])} image-pad tokens for grid {g[bad].tolist()}")
    d = np.where(is_img, 0, 1).astype(np.int64)
    d[run_ends - 1] = np.maximum(g[:, 1], g[:, 2]) // merge
    excl = np.cumsum(d) - d
    base = excl - np.repeat(excl[seg_start], lens)
    pos = np.broadcast_to(base, (3, t_total)).copy()
    if len(run_starts):
        img_idx = np.flatnonzero(is_img)
        run_of = np.repeat(np.arange(len(run_starts)), run_len)
        j = img_idx - run_starts[run_of]
        hw = (llm_h * llm_w)[run_of]
        w_ = llm_w[run_of]
        pos[0, img_idx] += j // hw
        pos[1, img_idx] += (j % hw) // w_
        pos[2, img_idx] += j % w_
    return pos


