"""Online packing for data that was not packed offline: exact counts, a bounded streaming packer,
and a resumable PyTorch ``IterableDataset``.

- :func:`measure_item`: the exact token count ``vlmpack pack`` records (the family's
  ``token_ids``, ``media_tokens`` of the EXIF-oriented image sizes and ``num_tokens``), without
  running the image processor.
- the packing engine's :class:`vlmpack.packing.StreamingPacker` groups the measured samples
  (bounded buffer of ``buffer_size`` samples, BFD rounds);
- :class:`OnlinePackedDataset`: source samples -> packed batches, with ``state_dict()`` /
  ``load_state_dict()`` that resume with exactly the same batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import IterableDataset

from vlmpack.errors import ConfigError
from vlmpack.models.base import MediaSize
from vlmpack.records import MEDIA_KINDS
from vlmpack.train.encode import PackItem, _item_from_unpacked

log = logging.getLogger(__name__)


def measure_item(family, item: PackItem) -> int:
    """Exact tokens of one sample by the family's rule (``num_tokens`` of its ``token_ids`` and
    ``media_tokens`` in order of appearance), the same calls as
    :func:`vlmpack.pack.count_task.count_samples`: images by the size of the EXIF-oriented image, videos
    by their container header (:func:`vlmpack.models.qwen_video.video_header`; the item keeps a
    re-readable source for the collator). Raises :class:`vlmpack.models.MediaRuleError` for media
    the processor refuses, :class:`vlmpack.errors.MediaDecodeError` for an unreadable video,
    :class:`vlmpack.errors.ConfigError` when the item's media do not match its image/video parts
    (e.g. a video sample given without its video)."""
    from vlmpack.models.qwen_video import video_header

    kinds = item.kinds or [p["type"] for m in item.messages for p in m["content"]
                           if p.get("type") in MEDIA_KINDS]
    if kinds.count("video") != len(item.videos) or kinds.count("image") != len(item.images):
        raise ConfigError(f"sample {item.id!r}: {kinds.count('image')} image and {kinds.count('video')} video parts "
                          f"for {len(item.images)} images and {len(item.videos)} videos given")
    ids = family.token_ids([item.messages], [item.special_tokens], [item.tools])[0]
    n_img = len(item.images)
    images = iter(item.images)
    tokens, vi = [], 0
    for kind in kinds:
        if kind == "video":
            media, item.videos[vi] = video_header(item.videos[vi])
            vi += 1
            tokens.append(family.media_tokens(media))
        else:
            im = next(images)
            tokens.append(family.media_tokens(MediaSize("image", im.width, im.height), sample_images=n_img))
    return family.num_tokens(ids, tokens)



def make_streaming_packer(capacity: int, buffer_size: int):
    """The packing engine's :class:`vlmpack.packing.StreamingPacker` (bounded buffer, exact BFD
    rounds, exact ``state_dict`` resume)."""
    from vlmpack.packing import StreamingPacker

    return StreamingPacker(capacity, buffer_size)


def _buffered(packer) -> list[int]:
    return [int(i) for i in packer.state_dict()["index"]]


def _indices(pack: Any) -> list[int]:
    return [int(i) for i in getattr(pack, "indices", pack)]


class OnlinePackedDataset(IterableDataset):
    """A resumable ``torch.utils.data.IterableDataset`` of packed batches from unpacked samples.

    Args:
      source: a ``Sequence`` of samples, or a callable returning a fresh iterable of them, in a
        fixed order. A sample is a :class:`vlmpack.records.Sample` or ``{"id", "messages",
        "images"}`` (see :mod:`vlmpack.train.encode`).
      collator: a :class:`vlmpack.train.collate.PackCollator` (its model directory decides counts).
      seq_len: pack capacity in tokens; buffer_size: samples held by the streaming packer.
      rank, world_size: keep only samples with ``index % world_size == rank`` (data parallel).
      collate: yield batch dicts (True) or encoded packs (False).

    ``state_dict()`` taken after receiving batch k makes a new dataset (``load_state_dict``) yield
    batch k+1 onwards, identical. Use ``num_workers=0`` (or one dataset per worker with its own
    state); the source is re-read from its start on resume, buffered samples by index.
    """

    def __init__(self, source: Sequence | Callable[[], Iterable], collator, *, seq_len: int,
                 buffer_size: int = 64, rank: int = 0, world_size: int = 1, collate: bool = True):
        self.source, self.collator = source, collator
        self.seq_len, self.buffer_size = int(seq_len), int(buffer_size)
        self.rank, self.world_size, self.collate = rank, world_size, collate
        self._state = self._fresh_state()

    def _fresh_state(self) -> dict:
        return {"next_index": 0, "packer": make_streaming_packer(self.seq_len, self.buffer_size).state_dict(),
                "ready": [], "lengths": {}, "yielded": 0, "dropped": 0}

    def state_dict(self) -> dict:
        """Position after the last yielded batch (plain Python containers, picklable)."""
        import copy
        return copy.deepcopy(self._state)

    def load_state_dict(self, state: dict) -> None:
        import copy
        self._state = copy.deepcopy(state)

    def _iter_source(self) -> Iterator[tuple[int, Any]]:
        src = self.source() if callable(self.source) and not isinstance(self.source, Sequence) else self.source
        return enumerate(src)

    def __iter__(self):
        st = self._state
        packer = make_streaming_packer(self.seq_len, self.buffer_size)
        packer.load_state_dict(st["packer"])
        needed = set(_buffered(packer)) | {i for p in st["ready"] for i in p}
        items: dict[int, PackItem] = {}
        family = self.collator.family

        def emit(pack_indices):
            enc = self.collator.encode([items.pop(i) for i in pack_indices])
            for i in pack_indices:
                st["lengths"].pop(str(i), None)
            return self.collator.collate([enc]) if self.collate else enc

        for idx, raw in self._iter_source():
            if idx % self.world_size != self.rank:
                continue
            if idx < st["next_index"]:
                if idx in needed:
                    items[idx] = _with_count(_item_from_unpacked(raw), st["lengths"].get(str(idx)))
                continue
            while st["ready"]:  # packs that were ready but not yet yielded when the state was taken
                p = st["ready"].pop(0)
                st["yielded"] += 1
                yield emit(p)
            item = _item_from_unpacked(raw)
            st["next_index"] = idx + 1
            hit = family.find_special_token(item.messages, item.tools) if item.special_tokens != "split" else None
            problem = family.field_problem(item.messages, item.tools)
            if hit is not None or problem is not None:
                st["dropped"] = st.get("dropped", 0) + 1
                log.warning("online packing: sample %r dropped: %s", item.id, problem[1] if problem else
                            f"turn {hit[0]} holds the special token {hit[1]!r}")
                continue
            n = measure_item(family, item)
            if n > self.seq_len:
                st["dropped"] = st.get("dropped", 0) + 1
                log.warning("online packing: sample %r has %d tokens > seq_len %d; dropped", item.id, n,
                            self.seq_len)
                continue
            item.recorded_tokens = n
            items[idx] = item
            st["lengths"][str(idx)] = n
            st["ready"] = [_indices(p) for p in packer.push(idx, n)]
            st["packer"] = packer.state_dict()
            while st["ready"]:
                p = st["ready"].pop(0)
                st["yielded"] += 1
                yield emit(p)
        st["ready"] += [_indices(p) for p in packer.flush()]
        st["packer"] = packer.state_dict()
        while st["ready"]:
            p = st["ready"].pop(0)
            st["yielded"] += 1
            yield emit(p)


def _with_count(item: PackItem, n: int | None) -> PackItem:
    item.recorded_tokens = n
    return item

