"""The video half of pack encoding (:mod:`vlmpack.train.encode`): a pack's videos through the
family's :meth:`~vlmpack.models.base.ModelFamily.process_videos`, each sample's ids expanded with
its images and videos in order of appearance
(:meth:`~vlmpack.models.base.ModelFamily.expand_videos`), and the checks of video-pad tokens
against video features and recorded counts (:class:`vlmpack.errors.PackMismatchError`)."""

from __future__ import annotations

import numpy as np

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.models.base import ProcessedVideos

__all__ = ["check_videos", "expand_with_videos", "process_pack_videos"]


def process_pack_videos(f, videos: list) -> ProcessedVideos:
    """The family's :meth:`~vlmpack.models.base.ModelFamily.process_videos` of a pack's videos
    (an empty :class:`ProcessedVideos` without any; :class:`ConfigError` for a family without it)."""
    if not videos:
        z = np.zeros(0, dtype=np.int64)
        return ProcessedVideos(None, np.zeros((0, 3), dtype=np.int64), z, z, {}, [])
    if not hasattr(f, "process_videos"):
        raise ConfigError(f"{f.model_dir}: the {f.name} family cannot train on videos")
    return f.process_videos(videos)


def expand_with_videos(f, ids0: np.ndarray, it, image_tokens: np.ndarray, videos: ProcessedVideos,
                       vi: int) -> np.ndarray:
    """One sample's ids with images and videos expanded (media tokens in order of appearance)."""
    kinds = it.kinds or ["image"] * len(it.images)
    img, vid = iter(image_tokens.tolist()), iter(videos.tokens[vi:vi + len(it.videos)].tolist())
    tokens = [next(vid) if k == "video" else next(img) for k in kinds]
    return f.expand_videos(ids0, tokens, videos.layouts[vi:vi + len(it.videos)], it.special_tokens, kinds=kinds)


def check_videos(f, key: str, it, ids: np.ndarray, videos: ProcessedVideos, vi: int,
                 check_recorded: bool) -> None:
    """PackMismatchError when the sample's video-pad tokens differ from its videos' features, or a
    video's tokens from the recorded ones."""
    vid_id = getattr(f, "video_token_id", None)
    n_pad = int(np.count_nonzero(ids == vid_id)) if vid_id is not None else 0
    n_feat = int(videos.features[vi:vi + len(it.videos)].sum())
    if n_pad != n_feat:
        raise PackMismatchError(f"pack {key!r} sample {it.id!r}: {n_pad} video tokens for {n_feat} video features")
    if check_recorded and it.recorded_videos:
        for (part, rec), got in zip(it.recorded_videos, videos.tokens[vi:vi + len(it.videos)].tolist()):
            if rec is not None and rec != got:
                raise PackMismatchError(
                    f"pack {key!r} sample {it.id!r}: video {part} gives {got} tokens but the pack records {rec}; "
                    "the video processor config differs from the packing one")
