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
from vlmpack.packfmt import PackEntry, join_pack, pack_key, parse_pack, shift_part
from vlmpack.records import Sample
from vlmpack.sinks.base import MediaReader


def _sample_input_ids(family, sample: dict, parts: dict[str, bytes]) -> np.ndarray:
    """One sample's ids (``sample``: its entry of the pack object, parts named over the pack): the
    family's ``encode``; with videos, ``expand_videos`` with each video's layout (Qwen3-VL: the
    timestamp text) from the header of the bytes being written."""
    tokens = [m["num_tokens"] for m in sample["media"]]
    special = sample.get("special_tokens")
    if not any(m["kind"] == "video" for m in sample["media"]):
        return family.encode(sample["messages"], tokens, special, sample.get("tools"))
    from vlmpack.media.probe import probe_bytes
    from vlmpack.models import MediaSize

    layouts = []
    for m in sample["media"]:
        if m["kind"] == "video":
            info = probe_bytes(parts[m["part"]], "video", name=m["part"])
            layouts.append(family.video_layout(MediaSize("video", info.width, info.height, info.duration_s,
                                                         info.fps, info.frames)))
    ids = family.token_ids([sample["messages"]], [special], [sample.get("tools")])[0]
    return family.expand_videos(np.asarray(ids, dtype=np.int64), tokens, layouts, special,
                                kinds=[m["kind"] for m in sample["media"]])


def pack_input_ids(model_dir: str, pack_json: bytes, key: str, parts: dict[str, bytes] | None = None,
                   processor: str = "") -> bytes:
    """The ``input_ids.npy`` part of a pack (``pack_json``: its ``<key>.json``): int32 ``[T]``, the
    samples' ids concatenated in order, each equal to the family's ``encode`` (what the collator
    would tokenize; a sample with videos: ``expand_videos`` with the layouts read from the video
    ``parts`` being written, part name -> bytes). Raises ``RuntimeError`` when T differs from the
    counted ``num_tokens``. ``processor``: the run's processor options (:func:`vlmpack.models.load_model`)."""
    family = load_model(model_dir, processor)
    obj = json.loads(pack_json)
    ids = np.concatenate([_sample_input_ids(family, s, parts or {}) for s in obj["samples"]])
    if len(ids) != obj["num_tokens"]:
        raise RuntimeError(f"pack {key}: encoded {len(ids)} tokens but counted {obj['num_tokens']}")
    buf = io.BytesIO()
    np.save(buf, ids.astype("<i4"), allow_pickle=False)
    return buf.getvalue()


class VlmpackSink:
    """The ``vlmpack.pack/1`` layout (a :class:`vlmpack.sinks.base.Sink`)."""

    name = "vlmpack"
    default_prefix = "shard"
    pretokenize = True
    one_kind_per_pack = False
    fields_line = False

    @staticmethod
    def pack_key(global_pack: int, samples: list[PackEntry]) -> str:  # noqa: ARG004 - one form for every pack
        """``pack`` + 9 digits (:func:`vlmpack.packfmt.pack_key`)."""
        return pack_key(global_pack)

    @staticmethod
    def model_problem(model_type: str) -> str | None:  # noqa: ARG004 - every family's packs are written
        """None: every supported family."""
        return None

    @staticmethod
    def sample_problem(sample: Sample) -> tuple[str, str] | None:  # noqa: ARG004 - the format holds any sample
        """None: the format holds every sample the count stage accepts."""
        return None

    @staticmethod
    def entry_fields(sample: Sample) -> bytes | None:  # noqa: ARG004 - the entry is the whole sample
        """None: the pack object is made of the entries alone."""
        return None

    @staticmethod
    def pack_members(key: str, samples: list[PackEntry], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None, processor: str = "") -> tuple[list[tuple[str, bytes]], int]:
        """``<key>.json`` (:func:`vlmpack.packfmt.join_pack` of the samples' entry bytes as the count
        stage serialized them) + the media parts, numbered over the pack in sample order (+
        ``input_ids.npy`` with ``model_dir``: :func:`pack_input_ids`)."""
        entries, parts, base = [], {}, 0
        for s in samples:
            for _sha, part, ref in s.media:
                parts[shift_part(part, base)] = read_media(ref)
            base += len(s.media)
        tokens = sum(s.num_tokens for s in samples)
        pack_json = join_pack([s.entry for s in samples], [len(s.media) for s in samples], tokens, seq_len)
        entries = [(f"{key}.json", pack_json), *((f"{key}.{name}", data) for name, data in parts.items())]
        if model_dir is not None:
            entries.append((f"{key}.input_ids.npy", pack_input_ids(model_dir, pack_json, key, parts, processor)))
        return entries, tokens

    @staticmethod
    def read_pack(parts: dict[str, bytes | None]) -> tuple[dict, dict[str, bytes | None]]:
        """The pack object, ``<key>.json`` read by :func:`vlmpack.packfmt.parse_pack` (``KeyError``
        without it, ``ValueError`` for bytes that are no pack object of ``vlmpack.pack/1``, each
        field of its type, ``TypeError`` when it was not read), and ``parts`` as they are."""
        return parse_pack(parts["json"]), parts

    @staticmethod
    def dataset_files() -> dict[str, bytes]:
        """``dataset.yaml`` (sample type :class:`vlmpack.energon.sample.VlmpackPack`) and its
        ``sample_loader.py`` (:mod:`vlmpack.energon.meta`)."""
        return {"dataset.yaml": DATASET_YAML.encode(), "sample_loader.py": SAMPLE_LOADER_SOURCE.encode()}

    def check_files(self) -> dict[str, bytes]:
        """:meth:`dataset_files`: the layout's own loader yields ``VlmpackPack``."""
        return self.dataset_files()
