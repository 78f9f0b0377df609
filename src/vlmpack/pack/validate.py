"""VALIDATE stage: media checks of a parsed :class:`~vlmpack.records.Sample`.

Division of labour (documented contract for the pipeline):

- **parse time** (:func:`vlmpack.readers.parse_record`, pure, no file system): UTF-8, JSON, object,
  schema, types, roles, turn order, assistant turn, empty turns, placeholders == media count,
  media references (remote -> ``media_unsupported``, outside the media root -> ``media_outside_root``).
- **validate time** (:func:`validate_sample`, file system): with ``media_root`` given, every media
  path with its symlinks followed stays inside the media root (``media_outside_root``, unless
  ``allow_absolute_media``); every media file exists and is a regular file (``media_missing``), is
  an image of an accepted format that decodes at the asked check level (``media_undecodable``; the
  default ``verify`` accepts exactly what the training loader decodes), its size is one the
  model's processor accepts (``media_unsupported``, the family's
  :meth:`~vlmpack.models.base.ModelFamily.media_problem`); fills ``Media.width``, ``height``,
  ``format``, ``nbytes``.
  A media item larger than ``--max-media-bytes`` is ``media_too_large`` (its size alone decides).
- **before tokenizing** (:func:`skip_overlong_texts`): a sample whose text alone needs more than
  ``--seq-len`` tokens under any tokenization is ``overlong`` (:mod:`vlmpack.models.text_bound`).
- **pipeline**: duplicate ids (global), token counts, overlong.
"""

from __future__ import annotations

import functools
import logging

from vlmpack.errors import MediaError
from vlmpack.media.check_table import CheckTable
from vlmpack.media.probe import CHECKS, probe_media
from vlmpack.models import load_model
from vlmpack.models.qwen2_vl import MAX_ASPECT_RATIO
from vlmpack.models.text_bound import TextBound, min_text_tokens, sample_texts, text_bound
from vlmpack.records import MAX_MEDIA_BYTES, Rejection, Sample

logger = logging.getLogger(__name__)


def validate_sample(
    sample: Sample,
    *,
    check: str = "verify",
    family=None,
    max_aspect_ratio: float | None = None,
    min_side: int = 1,
    media_root: str | None = None,
    allow_absolute_media: bool = False,
    max_media_bytes: int | None = MAX_MEDIA_BYTES,
    table: CheckTable | None = None,
) -> Sample | Rejection:
    """Check the media of ``sample`` and fill their header fields in place; return the sample or a
    :class:`Rejection` (the first failing media item decides). Never raises for bad data.

    ``check``: ``"header"`` | ``"verify"`` (default) | ``"decode"``, see :func:`vlmpack.media.probe_media`
    (``verify`` and ``decode`` both accept exactly the images PIL's ``load()`` decodes, ``verify``
    at a fraction of the cost; ``header`` misses damage after the header). ``media_root`` /
    ``allow_absolute_media``: the realpath rule of :func:`~vlmpack.media.probe_media` (``None``,
    the default, skips it). ``family``: the :class:`~vlmpack.models.base.ModelFamily` whose
    processor decides which sizes it takes (:meth:`media_problem`; e.g. Qwen-VL's aspect ratio
    <= 200); without one, images need ``max(w, h) / min(w, h) <= max_aspect_ratio`` (default
    200, the rule of transformers' Qwen2-VL ``smart_resize``, the default model family); an explicit
    ``max_aspect_ratio`` replaces the family's rule. Images need ``min(w, h) >= min_side`` (pass
    the processor's minimum, e.g. 28 for processors that reject images smaller than one merged patch;
    the default 1 accepts every image, as transformers 5's Qwen2-VL resizes small images up).
    Videos: their container header (size, frames, duration, fps; :mod:`vlmpack.media.video`); the
    family's count rule decides what it takes. ``max_media_bytes`` (``--max-media-bytes``): a
    larger item is rejected (``media_too_large``) by its size alone, its bytes never read
    (default :data:`vlmpack.records.MAX_MEDIA_BYTES`; ``None``: no cap). ``table``: the media check
    table (:mod:`vlmpack.media.check_table`) whose accepted contents are not checked again.
    ``ValueError`` for an unknown ``check``.
    """
    if check not in CHECKS:
        raise ValueError(f"unknown media check {check!r}; use one of {', '.join(CHECKS)}")
    own_id = sample.id if sample.has_own_id else None
    for i, item in enumerate(sample.media):
        try:
            info = probe_media(item.path, item.kind, check, media_root=media_root,
                               allow_absolute_media=allow_absolute_media, max_bytes=max_media_bytes, table=table)
        except MediaError as e:
            return Rejection(sample.locator, e.reason, f"media {i} ({item.ref}): {e.detail}", own_id)
        except Exception as e:  # noqa: BLE001 - one bad record must never stop a run
            logger.debug("unexpected error probing %s", item.path, exc_info=True)
            return Rejection(
                sample.locator,
                "media_undecodable",
                f"media {i} ({item.ref}): unexpected {type(e).__name__}: {' '.join(str(e).split())}",
                own_id,
            )
        if item.kind == "image":
            short, long = sorted((info.width, info.height))
            if family is not None and max_aspect_ratio is None:
                problem = family.media_problem(item.kind, info.width, info.height)
            else:
                limit = MAX_ASPECT_RATIO if max_aspect_ratio is None else max_aspect_ratio
                problem = (f"aspect ratio {long / short:.1f} of {info.width}x{info.height} exceeds {limit:g}"
                           if long > limit * short else None)
            if problem:
                return Rejection(sample.locator, "media_unsupported", f"media {i} ({item.ref}): {problem}", own_id)
            if short < min_side:
                return Rejection(
                    sample.locator,
                    "media_unsupported",
                    f"media {i} ({item.ref}): {info.width}x{info.height} is smaller than "
                    f"{min_side} px on a side",
                    own_id,
                )
        item.width, item.height, item.format, item.nbytes = info.width, info.height, info.format, info.nbytes
        item.duration_s, item.fps, item.frames = info.duration_s, info.fps, info.frames  # videos; None for images
    return sample


@functools.lru_cache(maxsize=4)
def text_bound_of(model_dir: str) -> TextBound | None:
    """The :class:`~vlmpack.models.text_bound.TextBound` of ``model_dir``'s tokenizer (once per process)."""
    return text_bound(load_model(model_dir).tokenizer)


def skip_overlong_texts(bound: TextBound | None, samples: list[Sample], token_limit: int
                        ) -> tuple[list[Sample], list[Rejection], int, int]:
    """Reject ``overlong``, before tokenizing, each sample whose texts alone need more than
    ``token_limit`` tokens under any tokenization (:func:`vlmpack.models.text_bound.min_text_tokens`;
    ``bound`` ``None``: no sample is). Returns ``(kept, rejected, largest bound kept, smallest bound
    rejected or 0)``, bounds in tokens. Never raises."""
    if bound is None:
        return samples, [], 0, 0
    kept, rejected, kept_max, skipped_min = [], [], 0, 0
    for s in samples:
        nbytes, lb = min_text_tokens(sample_texts(s.messages), bound)
        if lb <= token_limit:
            kept.append(s)
            kept_max = max(kept_max, lb)
            continue
        skipped_min = lb if not skipped_min else min(skipped_min, lb)
        rejected.append(Rejection(s.locator, "overlong", f"at least {lb:,} tokens > --seq-len, rejected before "
                                  f"tokenizing: {nbytes:,} bytes of text, a token covers at most "
                                  f"{bound.max_token_bytes} bytes", s.id))
    return kept, rejected, kept_max, skipped_min
