"""Energon metadata written by vlmpack itself (no ``energon prepare``, no energon import).

Formats follow ``shared/docs/energon_format.md`` (verified against megatron-energon 7.4.1):

- ``<shard>.tar.idx``: N+1 little-endian uint64, entry i = byte offset of sample i's first
  header block, entry N = offset of the end-of-archive zero blocks (not the file size).
- ``.nv-meta/.info.json``: ``{"energon_version": ..., "shard_counts": {shard: N}}`` (indent 2,
  no trailing newline, shards sorted).
- ``.nv-meta/split.yaml``: every shard in ``train``, ``val``/``test`` empty, ``exclude: []``; with
  ``--split`` / ``--val-fraction`` each shard under its split (:mod:`vlmpack.pack.splits`).
- ``.nv-meta/dataset.yaml``: the typed form with ``sample_type`` = :class:`vlmpack.energon.sample.VlmpackPack`,
  ``sample_loader: sample_loader.py:sample_loader`` and ``part_filter: sample_loader.py:part_filter``.
- ``.nv-meta/sample_loader.py``: :data:`SAMPLE_LOADER_SOURCE` (no decoding: an image that does not
  decode must fail in :func:`vlmpack.train.encode.open_image`, which names the pack key and sample
  id, not inside Energon's decoder, whose ``DecodingError`` names neither and makes Energon skip
  the whole pack).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vlmpack.errors import RunDirError
from vlmpack.media.kinds import MEDIA_TAGS

ENERGON_VERSION = "7.4.1"  # the on-disk format version these files were verified against

SAMPLE_LOADER_SOURCE = '''"""vlmpack sample loader (written by vlmpack): tar parts of one pack -> VlmpackPack fields.

Images are passed on as Energon's decoder left them: raw bytes when it is off (the vlmpack
TaskEncoder; vlmpack.train.encode.open_image then decodes them and names the pack, the sample and
the part of an image that does not decode), else what the decoder made. Nothing is decoded here.
"""
import io
import json


def _json(value):
    if isinstance(value, (bytes, bytearray, str)):  # the decoder is off
        return json.loads(value)
    return value


def _array(value):
    if isinstance(value, (bytes, bytearray)):
        import numpy as np
        return np.load(io.BytesIO(value), allow_pickle=False)
    return value


def sample_loader(raw: dict) -> dict:
    meta = _json(raw["json"])
    parts = [m["part"] for s in meta["samples"] for m in s["media"]]
    present = [p for p in parts if p in raw]  # a missing part is named by the collator (pack + sample)
    ids = raw.get("input_ids.npy")
    return dict(seq_len=meta["seq_len"], num_tokens=meta["num_tokens"], samples=meta["samples"],
                media=[raw[p] for p in present], media_parts=present,
                input_ids=None if ids is None else _array(ids))


def part_filter(part: str) -> bool:
    return part in ("json", "input_ids.npy") or part.startswith(@MEDIA_TAGS@)
'''.replace("@MEDIA_TAGS@", "(" + ", ".join(f'"{t}"' for t in MEDIA_TAGS) + ")")  # ("img", "vid")

#: sha256 (hex) of the ``sample_loader.py`` bytes earlier vlmpack versions wrote, each one a loader
#: vlmpack itself wrote (never an unknown one): ``vlmpack check`` accepts them in an output it
#: wrote before a media kind was added to :data:`vlmpack.media.kinds.KINDS` (the loader's
#: ``part_filter`` tags changed; the loader is otherwise the same, and an output written then holds
#: no member of the new kind). The check's Energon pass loads :data:`SAMPLE_LOADER_SOURCE` anyway.
#: ``f8991efb...``: the image + video loader (``("img", "vid")``), written up to issue 23 item 3.
EARLIER_SAMPLE_LOADERS: frozenset[str] = frozenset({
    "f8991efb235cd72efb7f3e3e2c5473e7148cb709f52ea1c957be8daa3ffdcb08",
})


DATASET_YAML = """sample_type:
  __module__: vlmpack.energon.sample
  __class__: VlmpackPack
sample_loader: sample_loader.py:sample_loader
part_filter: sample_loader.py:part_filter
"""


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):  # a leftover (or a planted link) is replaced, never followed
        os.unlink(tmp)
    with open(tmp, "xb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_tar_idx(path: str | Path, offsets: Sequence[int]) -> None:
    """Write a ``.tar.idx`` from the N+1 offsets recorded while writing (bytes, ascending)."""
    _atomic_write(Path(path), np.asarray(offsets, dtype="<u8").tobytes())


def read_tar_idx(path: str | Path) -> np.ndarray:
    """The offsets of a ``.tar.idx`` as uint64 ``[N+1]``."""
    return np.fromfile(path, dtype="<u8")


def metadata_files(shard_counts: dict[str, int], dataset_files: dict[str, bytes] | None = None,
                   shard_splits: dict[str, str] | None = None) -> dict[str, bytes]:
    """The files of ``.nv-meta/`` (file name -> bytes, in the order written) for the shards
    ``shard_counts`` (relative path -> number of packs): ``.info.json``, ``split.yaml`` (each shard
    under its split part, ``shard_splits``: shard -> ``train`` / ``val`` / ``test``; default every
    shard in ``train``) and the output layout's ``dataset_files`` (default: :data:`DATASET_YAML` +
    :data:`SAMPLE_LOADER_SOURCE`, the ``vlmpack.pack/1`` layout). Pure: ``vlmpack check`` compares an
    output's files with these."""
    shards = sorted(shard_counts)
    info = {"energon_version": ENERGON_VERSION, "shard_counts": {s: int(shard_counts[s]) for s in shards}}
    split = "split_parts:\n"
    for part in ("train", "val", "test"):
        names = [s for s in shards if (shard_splits or {}).get(s, "train") == part]
        split += f"  {part}:" + ("".join(f"\n  - {json.dumps(s)}" for s in names) or " []") + "\n"
    split += "exclude: []\n"
    if dataset_files is None:
        dataset_files = {"dataset.yaml": DATASET_YAML.encode(), "sample_loader.py": SAMPLE_LOADER_SOURCE.encode()}
    return {".info.json": json.dumps(info, indent=2).encode(), "split.yaml": split.encode(), **dataset_files}


def write_metadata(root: str | Path, shard_counts: dict[str, int], dataset_files: dict[str, bytes] | None = None,
                   shard_splits: dict[str, str] | None = None) -> None:
    """Write ``.nv-meta/`` (:func:`metadata_files`) for the shards ``shard_counts`` (relative path
    -> number of packs), the output layout's ``dataset_files`` (file name -> bytes) and the shards'
    split parts (``shard_splits``).

    Raises ``ValueError`` for an empty shard (Energon asserts against those) and
    :class:`vlmpack.errors.RunDirError` when ``.nv-meta`` is a symbolic link (never written through).
    """
    if any(n <= 0 for n in shard_counts.values()):
        raise ValueError("empty shards cannot be listed in Energon metadata")
    meta = Path(root) / ".nv-meta"
    if meta.is_symlink():
        raise RunDirError(f"{meta} is a symbolic link; vlmpack writes none and follows none: remove it")
    meta.mkdir(parents=True, exist_ok=True)
    for name, data in metadata_files(shard_counts, dataset_files, shard_splits).items():
        _atomic_write(meta / name, data)
