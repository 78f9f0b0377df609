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
- Reading what may be crafted (``check``, ``verify``, ``inspect`` read outputs they did not
  write): :func:`loads_json` (no file deeper than :data:`MAX_JSON_DEPTH`, never a
  ``RecursionError``), :func:`parse_pack` (a pack object whose every field has its type, or
  ``ValueError``), :func:`parse_input_ids` (the ids of ``input_ids.npy``, header checked before
  any allocation), and :class:`ShardPacks` reads no member over :func:`part_limit` (nor a tar
  header over :data:`MAX_HEADER_BYTES`), so memory stays bounded whatever a shard claims.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from vlmpack.fsio import open_inside
from vlmpack.media.kinds import KINDS
from vlmpack.records import ID_KINDS, MAX_MEDIA_BYTES

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
#: The most bytes read of one member, by part (a pack's JSON holds at most ``seq_len`` tokens of text;
#: ``input_ids.npy`` 4 bytes a token); media: :data:`MAX_MEDIA_BYTES`. A larger member is not read.
MAX_PART_BYTES = {"json": 64 << 20, "input_ids.npy": 64 << 20}
# The most bytes read of one media member (an image or a video; the training side reads it whole
# too) is MAX_MEDIA_BYTES (imported from vlmpack.records): the ceiling of `vlmpack pack --max-media-bytes`.
#: The most bytes of a tar's extended header (PAX, GNU long name); vlmpack writes < 1 KiB.
MAX_HEADER_BYTES = 1 << 20
#: The deepest nesting of arrays and objects :func:`loads_json` accepts (a pack object nests 6 deep).
MAX_JSON_DEPTH = 64
#: The roles of a pack's messages (docs/format.md).
ROLES = ("system", "user", "assistant")


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


#: The domain tag that starts what :func:`sample_digest` hashes (a new rule gets a new tag).
SAMPLE_DIGEST = b"vlmpack.sample-sha256/1"
_NUMBERED = re.compile(r"^([A-Za-z_]+)[0-9]+")


def sample_digest(sample: dict, media_sha256: list[str]) -> str:
    """The content sha256 (hex) of one sample of a pack object: every field of the sample (``id``,
    ``id_kind``, ``num_tokens``, ``source``, ``messages``, ``media``, ``special_tokens``, ...) as
    canonical JSON (sorted keys, no spaces, ASCII escapes), each media ``part`` name renumbered within
    the sample (its i-th item ``img<i>.<ext>`` / ``vid<i>.<ext>``: the numbering over the pack is the
    pack's), then ``media_sha256``, the sha256 (hex) of each media item's bytes in the sample's media
    order. A changed character of any text or field, or another media byte, gives another digest; the
    same sample gives the same digest whichever pack holds it, so it is also derived from the count
    stage's canonical record (:func:`build_pack` of that record alone) and the sha256 of its media.

    ``sample``: a sample of a pack object whose fields have their types (:func:`parse_pack`, or
    :func:`build_pack`'s own). The writer records it per sample in the run directory; ``check``
    computes it again from the shard (docs/format.md, "Run record")."""
    names = {}
    for i, m in enumerate(sample["media"]):
        names[m["part"]] = _NUMBERED.sub(lambda g, i=i: f"{g.group(1)}{i}", m["part"], count=1)
    body = {**sample,
            "media": [{**m, "part": names[m["part"]]} for m in sample["media"]],
            "messages": [{**msg, "content": [{**c, "part": names.get(c["part"], c["part"])} if "part" in c else c
                                             for c in msg["content"]]} for msg in sample["messages"]]}
    h = hashlib.sha256(SAMPLE_DIGEST + b"\0")
    h.update(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii"))
    h.update(b"\0" + "".join(f"{x}\n" for x in media_sha256).encode("ascii", "replace"))
    return h.hexdigest()


def part_limit(part: str) -> int:
    """The most bytes vlmpack reads of a member whose part (name after ``<key>.``) is ``part``:
    :data:`MAX_PART_BYTES`, :data:`MAX_MEDIA_BYTES` for media and any other part."""
    return MAX_PART_BYTES.get(part, MAX_MEDIA_BYTES)


def loads_json(data: bytes | str):
    """``json.loads(data)`` for bytes that may be crafted: ``ValueError`` (one line) for what is no
    UTF-8 JSON or nests arrays / objects deeper than :data:`MAX_JSON_DEPTH` (never a
    ``RecursionError``). The caller bounds the size (:func:`part_limit`)."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    stack = [(obj, 1)]  # iterative: a walk must not recurse either
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
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
            and all(_content_ok(c, parts) for c in m["content"]) for m in messages):
        return "has messages that are not a list of {role, content: [text | a part of its media]} objects"
    return None


def _content_ok(c, parts: set[str]) -> bool:
    """``c`` is a content item ``{"type": "text", "text": str}`` or ``{"type": <media kind>, "part":
    one of parts}``."""
    if not isinstance(c, dict):
        return False
    if c.get("type") == "text":
        return isinstance(c.get("text"), str)
    return c.get("type") in KINDS and isinstance(c.get("part"), str) and c["part"] in parts


def parse_pack(data: bytes | str) -> dict:
    """The pack object of a ``<key>.json`` member (docs/format.md): :func:`loads_json`, then every
    field the readers use has its type (counts are ints >= 0, each content ``part`` names one of
    its sample's media). Raises ``ValueError`` (one line: which field of which sample) otherwise;
    the counts' sums and ``seq_len`` are the caller's to compare."""
    obj = loads_json(data)
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
