"""The video half of pack encoding (:mod:`vlmpack.train.encode`): a pack's videos through the
family's :meth:`~vlmpack.models.base.ModelFamily.process_videos`, each sample's ids expanded with
its images and videos in order of appearance
(:meth:`~vlmpack.models.base.ModelFamily.expand_videos`), and the checks of video-pad tokens
against video features and recorded counts (:class:`vlmpack.errors.PackMismatchError`)."""

from __future__ import annotations

import numpy as np

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.models.base import ProcessedImages, ProcessedVideos

__all__ = ["check_videos", "expand_with_videos", "merge_pack_media", "process_pack_videos", "video_features_on_images"]


def process_pack_videos(f, videos: list) -> ProcessedVideos:
    """The family's :meth:`~vlmpack.models.base.ModelFamily.process_videos` of a pack's videos
    (an empty :class:`ProcessedVideos` without any; :class:`ConfigError` for a family without it)."""
    if not videos:
        z = np.zeros(0, dtype=np.int64)
        return ProcessedVideos(None, np.zeros((0, 3), dtype=np.int64), z, z, {}, [])
    if not hasattr(f, "process_videos"):
        raise ConfigError(f"{f.model_dir}: the {f.name} family cannot train on videos")
    return f.process_videos(videos)


def merge_pack_media(f, images: ProcessedImages, videos: ProcessedVideos,
                     kinds: list[str]) -> tuple[ProcessedImages, ProcessedVideos]:
    """The family's ``pack_media`` (a family whose model takes video frames among the image
    inputs, e.g. InternVL's ``pixel_values`` in text order) over a pack's processed images and
    videos; ``kinds``: ``"image"`` / ``"video"`` per media item of the pack, samples in order, each
    in content order. Unchanged for the other families."""
    merge = getattr(f, "pack_media", None)
    if merge is None or videos.pixel_values is None:
        return images, videos
    return merge(images, videos, kinds)


def _shared(f) -> bool:
    """True when the family's video features replace the image token's embeddings (InternVL)."""
    return getattr(f, "video_feature_token_id", None) == f.image_token_id


def video_features_on_images(f, videos: ProcessedVideos, vi: int, kv: int) -> int:
    """The feature vectors of the videos ``vi:vi + kv`` that land on image tokens (InternVL's
    frames on ``<IMG_CONTEXT>``), else 0."""
    return int(videos.features[vi:vi + kv].sum()) if kv and _shared(f) else 0


def expand_with_videos(f, ids0: np.ndarray, it, image_tokens: np.ndarray, videos: ProcessedVideos,
                       vi: int) -> np.ndarray:
    """One sample's ids with images and videos expanded (media tokens in order of appearance)."""
    kinds = it.kinds or ["image"] * len(it.images)
    img, vid = iter(image_tokens.tolist()), iter(videos.tokens[vi:vi + len(it.videos)].tolist())
    tokens = [next(vid) if k == "video" else next(img) for k in kinds]
    return f.expand_videos(ids0, tokens, videos.layouts[vi:vi + len(it.videos)], it.special_tokens, kinds=kinds)


def check_videos(f, key: str, it, ids: np.ndarray, videos: ProcessedVideos, vi: int,
                 check_recorded: bool) -> None:
    """PackMismatchError when the sample's video-pad tokens (the family's ``video_feature_token_id``,
    else ``video_token_id``) differ from its videos' features, or a video's tokens from the
    recorded ones. Features on the image token (InternVL) are checked by the encoder with the
    images' (:func:`video_features_on_images`)."""
    vid_id = getattr(f, "video_feature_token_id", getattr(f, "video_token_id", None))
    n_pad = int(np.count_nonzero(ids == vid_id)) if vid_id is not None else 0
    n_feat = int(videos.features[vi:vi + len(it.videos)].sum())
    if n_pad != n_feat and not _shared(f):  # shared with images: checked with the image tokens
        raise PackMismatchError(f"pack {key!r} sample {it.id!r}: {n_pad} video tokens for {n_feat} video features")
    if check_recorded and it.recorded_videos:
        for (part, rec), got in zip(it.recorded_videos, videos.tokens[vi:vi + len(it.videos)].tolist()):
            if rec is not None and rec != got:
                raise PackMismatchError(
                    f"pack {key!r} sample {it.id!r}: video {part} gives {got} tokens but the pack records {rec}; "
                    "the video processor config differs from the packing one")
