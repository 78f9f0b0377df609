"""Reading packs from shards that may be crafted: bounded JSON, typed pack objects, ``.npy`` ids read
header-first, tar members grouped into packs with a cap on every member's size."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from vlmpack.fsio import open_inside
from vlmpack.media.kinds import KINDS
from vlmpack.packfmt.names import (
    FORMAT,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    ROLES,
    part_limit,
    split_member,
)
from vlmpack.records import ID_KINDS

T = TypeVar("T")


def loads_json(data: bytes | str):
    """``json.loads(data)`` for bytes that may be crafted: ``ValueError`` (one line) for what is no
    UTF-8 JSON or nests arrays / objects deeper than :data:`MAX_JSON_DEPTH` (never a
    ``RecursionError``). The caller bounds the size (:func:`part_limit`)."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    opening = "[{" if isinstance(data, str) else b"[{"
    if data.count(opening[:1]) + data.count(opening[1:]) <= MAX_JSON_DEPTH:
        return obj  # too few brackets (in strings too) to nest deeper
    level, depth = [obj] if isinstance(obj, (dict, list)) else [], 0
    while level:  # level by level, containers only: a walk must not recurse either
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        deeper = []
        for c in level:
            deeper += [v for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, (dict, list))]
        level = deeper
    return obj


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _sample_problem(s) -> str | None:
    """What makes ``s`` no sample of a pack object (docs/format.md), or None."""
    if not isinstance(s, dict):
        return "is not an object"
    if isinstance(s.get("id"), bool) or not isinstance(s.get("id"), (str, int)) or not _is_count(s.get("num_tokens")):
        return "lacks a valid id / num_tokens"
    if s.get("id_kind", "str") not in ID_KINDS or not isinstance(s.get("special_tokens", ""), str) \
            or not isinstance(s.get("source", {}), dict):
        return "has an invalid id_kind / special_tokens / source"
    media = s.get("media")
    if not isinstance(media, list) or not all(
            isinstance(m, dict) and isinstance(m.get("part"), str) and m.get("kind") in KINDS
            and all(_is_count(m.get(k)) for k in ("width", "height", "num_tokens")) for m in media):
        return "has media that are not a list of {part, kind, width, height, num_tokens} objects"
    parts = {m["part"] for m in media}
    messages = s.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), list)
            and all(_content_ok(c, parts) for c in m["content"]) and _extras_ok(m) for m in messages):
        return "has messages that are not a list of {role, content: [text | a part of its media]} objects"
    tools = s.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return "has tools that are not a list of objects"
    return None


def _extras_ok(m: dict) -> bool:
    """A message's optional fields have their types: ``reasoning_content`` / ``tool_call_id`` /
    ``name`` strings, ``tool_calls`` a list of objects."""
    calls = m.get("tool_calls", [])
    return all(isinstance(m.get(k, ""), str) for k in ("reasoning_content", "tool_call_id", "name")) \
        and isinstance(calls, list) and all(isinstance(c, dict) for c in calls)


def _content_ok(c, parts: set[str]) -> bool:
    """``c`` is a content item ``{"type": "text", "text": str}`` or ``{"type": <media kind>, "part":
    one of parts}``."""
    if not isinstance(c, dict):
        return False
    if c.get("type") == "text":
        return isinstance(c.get("text"), str)
    return c.get("type") in KINDS and isinstance(c.get("part"), str) and c["part"] in parts


def parse_pack(data: bytes | str) -> dict:
    """The pack object of a ``<key>.json`` member (docs/format.md): :func:`loads_json`, then
    :func:`pack_object`. Raises ``ValueError`` (one line) for bytes that hold none."""
    return pack_object(loads_json(data))


def pack_object(obj) -> dict:
    """``obj`` (JSON already read, e.g. the ``vlmpack`` value of another layout's json) when it is a
    pack object (docs/format.md) whose every field the readers use has its type (counts are ints
    >= 0, each content ``part`` names one of its sample's media). Raises ``ValueError`` (one line:
    which field of which sample) otherwise; the counts' sums and ``seq_len`` are the caller's to
    compare."""
    if not isinstance(obj, dict):
        raise ValueError(f"a JSON {type(obj).__name__}, not a pack object")
    if obj.get("format") != FORMAT:
        raise ValueError(f"format {str(obj.get('format'))[:40]!r}, not {FORMAT}")
    if not _is_count(obj.get("seq_len")) or not _is_count(obj.get("num_tokens")) \
            or not isinstance(obj.get("samples"), list):
        raise ValueError("seq_len / num_tokens / samples missing or of the wrong type")
    for i, s in enumerate(obj["samples"]):
        if (why := _sample_problem(s)) is not None:
            raise ValueError(f"sample {i} {why}")
    return obj


def parse_input_ids(data: bytes):
    """The token ids of an ``input_ids.npy`` member (``--pretokenize``; the writer stores int32
    little-endian ``[T]``): a NumPy int array ``[T]`` (read-only, a view of ``data``). The header is
    read first, so a crafted shape never allocates: ``ValueError`` (one line) for bytes that are no
    ``.npy`` version 1 or 2 file of a 1-D integer array whose data fill the rest of the member
    exactly (no object array, nothing unpickled). The ids' range is the caller's to check."""
    import io

    import numpy as np
    from numpy.lib import format as npy

    buf = io.BytesIO(data)
    try:
        version = npy.read_magic(buf)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f".npy version {version}")
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _fortran, dtype = read(buf)
    except (ValueError, TypeError, SyntaxError, EOFError) as e:
        raise ValueError(f"no .npy array header ({' '.join(str(e).split())[:120]})") from None
    if len(shape) != 1 or dtype.kind not in "iu" or dtype.hasobject:
        raise ValueError(f"a {dtype} array of shape {shape}, not 1-D integer token ids")
    start = buf.tell()
    if len(data) - start != shape[0] * dtype.itemsize:
        raise ValueError(f"its header says {shape[0]:,} ids of {dtype.itemsize} bytes but {len(data) - start:,} "
                         "bytes follow")
    return np.frombuffer(data, dtype=dtype, count=shape[0], offset=start)


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


class MemberTooLarge(ValueError):
    """A member larger than :func:`part_limit` allows (its bytes are not read): ``member`` is its
    ``TarInfo``."""

    def __init__(self, path: Path, member: tarfile.TarInfo):
        super().__init__(f"{path.name}: member {member.name} is {member.size:,} bytes, more than the "
                         f"{part_limit(split_member(member.name)[1]):,} vlmpack reads of such a part (not read)")
        self.member = member


class _CappedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` whose extended headers (PAX, GNU long names) are read only up to
    :data:`MAX_HEADER_BYTES` (``tarfile`` reads them whole): a larger one is a ``tarfile.ReadError``."""

    def _proc_member(self, tarfile_):
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                         tarfile.GNUTYPE_LONGLINK) and self.size > MAX_HEADER_BYTES:
            raise tarfile.ReadError(f"an extended tar header of {self.size:,} bytes at byte {self.offset} "
                                    f"(more than {MAX_HEADER_BYTES:,})")
        return super()._proc_member(tarfile_)


class ShardPacks:
    """The packs of one shard, in order: consecutive members ``<key>.<part>`` with the same key.

    ``read(part) -> bool`` picks the parts whose bytes are read (default: all). Members that are not
    regular files named ``<key>.<part>`` (no ``/``) are skipped and passed to ``on_bad(kind,
    member)`` with ``kind="name"``; with ``size`` (the file's bytes), a member whose data ends past
    it stops the walk with ``on_bad("truncated", member)``. A member of more than
    :func:`part_limit` bytes (read or not) is never read: with ``on_bad`` it is passed as
    ``on_bad("too_large", member)`` and its part is None, without it :class:`MemberTooLarge` is
    raised. After a whole walk, ``end`` is the offset of the end-of-archive blocks (``tarfile``'s
    offset) and ``whole`` is True. Raises what ``tarfile`` raises for a corrupt tar
    (``tarfile.TarError``, ``OSError``, ``EOFError``); the shard is opened without following a
    symbolic link (:class:`vlmpack.fsio.LinkRefused`, an ``OSError``)."""

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
        with open_inside(self.path.parent, self.path.name) as fh, \
                tarfile.open(fileobj=fh, mode="r:", tarinfo=_CappedTarInfo) as tf:
            while (m := tf.next()) is not None:
                tf.members.clear()  # tarfile keeps every header it read: memory would grow with the member count
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
                if m.size > part_limit(part):
                    if not self._on_bad:
                        raise MemberTooLarge(self.path, m)
                    self._on_bad("too_large", m)
                    read = False
                yield key, (m.offset, part, tf.extractfile(m).read() if read else None)
            self.end = tf.offset
            self.whole = True


def shard_paths(out_dir: str | Path) -> list[Path]:
    """The ``*.tar`` shards of an output, in name order: regular files only (``lstat``; a symbolic
    link is never a shard of vlmpack's)."""
    return sorted(p for p in Path(out_dir).glob("*.tar") if p.is_file() and not p.is_symlink())


def read_packs(out_dir: str | Path) -> Iterator[dict]:
    """Yield every pack of a vlmpack output as a raw WebDataset dict
    (``{"__key__", "json": bytes, "img0.png": bytes, ...}``), shards in name order."""
    for shard in shard_paths(out_dir):
        for pack in ShardPacks(shard):
            yield {"__key__": pack.key, **pack.parts}
