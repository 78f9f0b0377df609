"""The one owner of the on-disk pack format ``vlmpack.pack/1`` (docs/format.md): naming, building, reading.

A shard holds one tar sample per pack: members ``<key>.<part>`` that share the pack's key
(``pack`` + 9 digits, :func:`pack_key`), the pack object in ``<key>.json``, media
``<key>.img<i>.<ext>`` / ``<key>.vid<i>.<ext>`` (original bytes) and, pretokenized,
``<key>.input_ids.npy``.

- Writing: :func:`build_pack` turns the canonical records of a pack's samples into the pack
  object and its media parts; :func:`tarinfo` is the reproducible member header. The shard
  writer (:mod:`vlmpack.pack.write`) adds the bytes.
- Reading: :class:`ShardPacks` iterates the packs of one shard (members grouped by key, in
  order); :func:`read_packs` gives every pack of an output as a raw WebDataset dict. ``check``,
  ``verify``, ``inspect``, the training-side tests and loaders use these and nothing else groups
  tar members into packs. :func:`group_by_key` is the grouping itself (consecutive members with
  the same key), shared with the WebDataset input source (:mod:`vlmpack.sources.wds`), whose
  samples follow webdataset's own member rules.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from vlmpack.media.kinds import KINDS

T = TypeVar("T")

#: The format string in every pack object.
FORMAT = "vlmpack.pack/1"
#: Member extension of an image by the format PIL decodes it as (never re-encoded).
EXT_BY_FORMAT = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff",
                 "MPO": "jpg"}
#: Member tag of a media part by kind (``img0.png``, ``vid1.mp4``): the registry's
#: (:data:`vlmpack.media.kinds.KINDS`).
TAG_BY_KIND = {name: kind.tag for name, kind in KINDS.items()}
#: Parts of a pack that no sample references.
EXTRA_PARTS = frozenset({"json", "input_ids.npy"})


def pack_key(global_pack: int) -> str:
    """The tar key of a pack: ``pack`` + 9 digits (no dots, unique in the dataset)."""
    return f"pack{global_pack:09d}"


def split_member(name: str) -> tuple[str, str]:
    """``(key, part)`` of a pack member name ``<key>.<part>`` (the key has no dot; the part may)."""
    key, _, part = name.partition(".")
    return key, part


def tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """The header of one member (``size`` bytes): regular file, mtime 0, uid/gid 0, empty
    user/group names, mode 0644, so that shards are byte-reproducible."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def build_pack(records: list[dict], seq_len: int) -> tuple[dict, list[tuple]]:
    """The pack JSON object and its media parts ``[(part name, source reference, size in bytes,
    mtime in ns)]`` (size/mtime as counted, None when unknown) from the canonical records of its
    samples (``vlmpack.pack.count_task.canonical_record``: media by ``index``, with ``path``/``format``/
    ``nbytes``/``mtime_ns``). Media are numbered over the pack in sample order; a content part
    ``{"type", "index"}`` becomes ``{"type", "part"}``. ``seq_len`` in tokens."""
    samples, media_parts = [], []
    for rec in records:
        names = []
        for m in rec["media"]:
            ext = EXT_BY_FORMAT.get(m["format"], m["format"].lower() or "bin")
            names.append(f"{TAG_BY_KIND.get(m['kind'], 'vid')}{len(media_parts)}.{ext}")
            media_parts.append((names[-1], m["path"], m.get("nbytes"), m.get("mtime_ns")))
        messages = [{"role": msg["role"],
                     "content": [{"type": p["type"], "part": names[p["index"]]} if "index" in p else p
                                 for p in msg["content"]]} for msg in rec["messages"]]
        media = [{"part": n, "kind": m["kind"], "width": m["width"], "height": m["height"],
                  "num_tokens": m["num_tokens"]} for n, m in zip(names, rec["media"])]
        sample = {"id": rec["id"], "id_kind": rec.get("id_kind", "str"), "num_tokens": rec["num_tokens"],
                  "source": rec["source"], "messages": messages, "media": media}
        if rec.get("special_tokens") == "split":  # the collator must tokenize this text the same way
            sample["special_tokens"] = "split"
        samples.append(sample)
    total = sum(s["num_tokens"] for s in samples)
    return {"format": FORMAT, "seq_len": seq_len, "num_tokens": total, "samples": samples}, media_parts


def group_by_key(members: Iterable[tuple[str, T]]) -> Iterator[tuple[str, list[T]]]:
    """``(key, [item, ...])`` for each run of consecutive ``(key, item)`` with the same key, in
    order (a WebDataset sample: the members that share a key). A group is yielded once the next
    key starts or ``members`` ends; what ``members`` raises goes through (its open group is lost)."""
    key, group = None, []
    for k, item in members:
        if k != key and group:
            yield key, group
            group = []
        key = k
        group.append(item)
    if group:
        yield key, group


@dataclass(slots=True)
class RawPack:
    """One pack as stored: its ``key``, ``offset`` (bytes to its first member's header: the
    Energon ``.tar.idx`` entry) and ``parts`` (part name after ``<key>.`` -> bytes, or None for a
    part that was not read)."""

    key: str
    offset: int
    parts: dict[str, bytes | None]


class _Truncated(Exception):
    """Internal: a member ends past the end of the file (ends :class:`ShardPacks`' walk)."""


class ShardPacks:
    """The packs of one shard, in order: consecutive members ``<key>.<part>`` with the same key.

    ``read(part) -> bool`` picks the parts whose bytes are read (default: all). Members that are not
    regular files named ``<key>.<part>`` (no ``/``) are skipped and passed to ``on_bad(kind,
    member)`` with ``kind="name"``; with ``size`` (the file's bytes), a member whose data ends past
    it stops the walk with ``on_bad("truncated", member)``. After a whole walk, ``end`` is the
    offset of the end-of-archive blocks (``tarfile``'s offset) and ``whole`` is True. Raises what
    ``tarfile`` raises for a corrupt tar (``tarfile.TarError``, ``OSError``, ``EOFError``)."""

    def __init__(self, path: str | Path, *, read: Callable[[str], bool] | None = None, size: int | None = None,
                 on_bad: Callable[[str, tarfile.TarInfo], None] | None = None):
        self.path, self._read, self._size, self._on_bad = Path(path), read, size, on_bad
        self.end = 0
        self.whole = False

    def __iter__(self) -> Iterator[RawPack]:
        try:
            for key, parts in group_by_key(self._members()):
                yield RawPack(key, parts[0][0], {part: data for _, part, data in parts})
        except _Truncated:  # the pack cut short is not yielded
            return

    def _members(self) -> Iterator[tuple[str, tuple[int, str, bytes | None]]]:
        """``(key, (header offset, part, bytes or None))`` per pack member, in tar order."""
        with tarfile.open(self.path, mode="r:") as tf:
            while (m := tf.next()) is not None:
                if self._size is not None and m.offset_data + m.size > self._size:
                    if self._on_bad:
                        self._on_bad("truncated", m)
                    raise _Truncated
                if not m.isreg() or "/" in m.name or "." not in m.name:
                    if self._on_bad:
                        self._on_bad("name", m)
                    continue
                key, part = split_member(m.name)
                read = self._read is None or self._read(part)
                yield key, (m.offset, part, tf.extractfile(m).read() if read else None)
            self.end = tf.offset
            self.whole = True


def shard_paths(out_dir: str | Path) -> list[Path]:
    """The ``*.tar`` shards of an output, in name order."""
    return sorted(Path(out_dir).glob("*.tar"))


def read_packs(out_dir: str | Path) -> Iterator[dict]:
    """Yield every pack of a vlmpack output as a raw WebDataset dict
    (``{"__key__", "json": bytes, "img0.png": bytes, ...}``), shards in name order."""
    for shard in shard_paths(out_dir):
        for pack in ShardPacks(shard):
            yield {"__key__": pack.key, **pack.parts}
