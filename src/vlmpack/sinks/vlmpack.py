"""The ``vlmpack`` output layout: the ``vlmpack.pack/1`` format (docs/format.md, :mod:`vlmpack.packfmt`).

One tar sample per pack: ``<key>.json`` (the pack object, compact UTF-8 JSON), the original media
bytes as ``<key>.img<i>.<ext>`` / ``<key>.vid<i>.<ext>`` and, pretokenized, ``<key>.input_ids.npy``
(int32 ``[T]``). Energon loads it as :class:`vlmpack.energon.sample.VlmpackPack` through the
``dataset.yaml`` / ``sample_loader.py`` of :mod:`vlmpack.energon.meta`.
"""

from __future__ import annotations

import io
import json

import numpy as np

from vlmpack.energon.meta import DATASET_YAML, SAMPLE_LOADER_SOURCE
from vlmpack.models import load_model
from vlmpack.packfmt import build_pack, parse_pack
from vlmpack.sinks.base import MediaReader


def _sample_input_ids(family, rec: dict, sample: dict, parts: dict[str, bytes]) -> np.ndarray:
    """One sample's ids: the family's ``encode``; with videos, ``expand_videos`` with each video's
    layout (Qwen3-VL: the timestamp text) from the header of the bytes being written."""
    tokens = [m["num_tokens"] for m in rec["media"]]
    if not any(m["kind"] == "video" for m in rec["media"]):
        return family.encode(rec["messages"], tokens, rec.get("special_tokens"))
    from vlmpack.media.probe import probe_bytes
    from vlmpack.models import MediaSize

    layouts = []
    for m in sample["media"]:
        if m["kind"] == "video":
            info = probe_bytes(parts[m["part"]], "video", name=m["part"])
            layouts.append(family.video_layout(MediaSize("video", info.width, info.height, info.duration_s,
                                                         info.fps, info.frames)))
    ids = family.token_ids([rec["messages"]], [rec.get("special_tokens")])[0]
    return family.expand_videos(np.asarray(ids, dtype=np.int64), tokens, layouts, rec.get("special_tokens"),
                                kinds=[m["kind"] for m in rec["media"]])


def pack_input_ids(model_dir: str, records: list[dict], obj: dict, key: str,
                   parts: dict[str, bytes] | None = None) -> bytes:
    """The ``input_ids.npy`` part of a pack: int32 ``[T]``, the samples' ids concatenated in order,
    each equal to the family's ``encode`` (what the collator would tokenize; a sample with videos:
    ``expand_videos`` with the layouts read from the video ``parts`` being written, part name ->
    bytes). Raises ``RuntimeError`` when T differs from the counted ``num_tokens``."""
    family = load_model(model_dir)
    ids = np.concatenate([_sample_input_ids(family, r, s, parts or {}) for r, s in zip(records, obj["samples"])])
    if len(ids) != obj["num_tokens"]:
        raise RuntimeError(f"pack {key}: encoded {len(ids)} tokens but counted {obj['num_tokens']}")
    buf = io.BytesIO()
    np.save(buf, ids.astype("<i4"), allow_pickle=False)
    return buf.getvalue()


class VlmpackSink:
    """The ``vlmpack.pack/1`` layout (a :class:`vlmpack.sinks.base.Sink`)."""

    name = "vlmpack"

    @staticmethod
    def pack_members(key: str, records: list[dict], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None) -> tuple[list[tuple[str, bytes]], int]:
        """:func:`vlmpack.packfmt.build_pack` -> ``<key>.json`` + the media parts (+ ``input_ids.npy``
        with ``model_dir``: :func:`pack_input_ids`)."""
        obj, media = build_pack(records, seq_len)
        entries = [(f"{key}.json", json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())]
        parts = {}
        for part_name, src, nbytes, mtime in media:
            parts[part_name] = read_media(src, nbytes, mtime)
            entries.append((f"{key}.{part_name}", parts[part_name]))
        if model_dir is not None:
            entries.append((f"{key}.input_ids.npy", pack_input_ids(model_dir, records, obj, key, parts)))
        return entries, obj["num_tokens"]

    @staticmethod
    def read_pack(parts: dict[str, bytes | None]) -> dict:
        """The pack object: ``<key>.json`` read by :func:`vlmpack.packfmt.parse_pack` (``KeyError``
        without it, ``ValueError`` for bytes that are no pack object of ``vlmpack.pack/1``, each
        field of its type, ``TypeError`` when it was not read)."""
        return parse_pack(parts["json"])

    @staticmethod
    def dataset_files() -> dict[str, bytes]:
        """``dataset.yaml`` (sample type :class:`vlmpack.energon.sample.VlmpackPack`) and its
        ``sample_loader.py`` (:mod:`vlmpack.energon.meta`)."""
        return {"dataset.yaml": DATASET_YAML.encode(), "sample_loader.py": SAMPLE_LOADER_SOURCE.encode()}
