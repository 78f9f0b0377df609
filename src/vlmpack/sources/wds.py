"""The WebDataset source: uncompressed tar shards read in place (never unpacked, never copied).

A sample is the run of consecutive members that share a key (grouped by
:func:`vlmpack.packfmt.group_by_key`, like the packs of an output; webdataset's ``base_plus_ext``
rule: the key is the member name up to the first dot of its base name, the rest is the part
name). Its conversation is the ``json`` part, in any layout of :mod:`vlmpack.layouts`
(the WDS-native packer's ``texts`` + ``media`` + ``name`` schema included, turns under
``--text-key``); media are named by a list in the JSON (``images`` / ``image_keys`` /
``media_files`` / ``name`` and ``videos`` / ``video_keys``: part names such as ``"0.png"`` or
``"jpg"``, or full member names),
else taken from the sample's parts by extension (sorted by part name). Each media item becomes a
``tar://`` reference (:mod:`vlmpack.media.ref`) to the member's bytes, so probing, counting and
writing read the shard in place (an ``lmdb://NAME/KEY`` name is a value of an ``--media-lmdb``
store instead, :func:`vlmpack.media.resolve.resolve_ref`). The id is the JSON's ``id``, else the sample key.

Tasks are byte ranges of whole samples (:meth:`WdsSource.split` scans the member headers once,
seeking over the data). A member that ends past the end of the file, or a shard cut without its
end-of-archive blocks, stops the run with one :class:`~vlmpack.errors.InputError` line naming the
shard and the byte: a truncated shard is never read silently short. ``.tar.gz``/``.tgz`` shards
are refused with one line (no byte-range reads in a gzip stream).

Shards joined end to end (``cat a.tar b.tar > ab.tar``) are read whole, as GNU tar's
``--ignore-zeros`` reads them: the zero blocks that end each archive are skipped and every
archive's samples are read (offsets stay offsets in the joined file; a sample never spans two
archives); bytes after end-of-archive blocks that are not a tar header are one ``InputError`` line.
Per sample: two members of one name are a ``duplicate_member`` rejection (no copy is guessed),
a ``json`` part larger than ``--max-member-bytes`` a ``member_too_large`` one (not read); media
members larger than ``--max-media-bytes`` are rejected when probed (``media_too_large``,
:func:`vlmpack.media.probe.probe_media`). Members that belong to no sample (a name without
``<key>.<part>``, e.g. ``README``; a symbolic link) are counted in the report
(``members_without_key``, ``members_not_files``).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import tarfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from vlmpack.errors import InputError, MediaError, RecordError
from vlmpack.fsio import printable_path
from vlmpack.layouts.mapping import apply_map
from vlmpack.layouts.native import normalize_native
from vlmpack.media.kinds import KINDS
from vlmpack.media.ref import LMDB, tar_member_ref
from vlmpack.media.resolve import resolve_ref
from vlmpack.packfmt import group_by_key
from vlmpack.readers.jsonl import parse_record, record_to_sample
from vlmpack.readers.sniff import _is_tar
from vlmpack.records import MAX_MEMBER_BYTES, Locator, ReadStats, Rejection

_BLOCK = tarfile.BLOCKSIZE  # bytes of a tar block
_SCAN = 1 << 20  # bytes read at a time when skipping the zero blocks between joined archives
_KEY = re.compile(r"^((?:.*/|)[^./][^/]*?)\.([^/]+)$")  # key = up to the first dot of the base name
#: The fields of a sample's ``json`` part that list its media, per kind (the first is the canonical
#: one); a kind of :data:`vlmpack.media.kinds.KINDS` not named here: ``<kind>s`` and ``<kind>``.
_LISTS = {"image": ("images", "image_keys", "media_files", "image"), "video": ("videos", "video_keys", "video")}


def split_key(name: str) -> tuple[str, str] | None:
    """``(key, part)`` of a member name, or None for a name without a dot in its base name."""
    m = _KEY.match(name)
    return (m.group(1), m.group(2)) if m else None


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a sample: its name after the key, where its header starts and where its data
    is (``offset``, ``size`` in bytes; for a hard link, the data of the member it links to)."""

    name: str
    header: int
    offset: int
    size: int


def iter_samples(path: str, start: int = 0, end: int = -1,
                 skipped: ReadStats | None = None) -> Iterator[tuple[str, list[Part]]]:
    """Yield ``(key, parts)`` for the samples whose first header lies in ``[start, end)``
    (bytes; ``end=-1``: to the end): the consecutive parts that share a key
    (:func:`vlmpack.packfmt.group_by_key`) within one archive (the end of a joined archive ends a
    sample too, see :func:`_members`). Regular files and hard links (tar writers store a
    repeated file as a link to its first copy; its data is that member's) count; other members and
    names without a part are skipped and counted in ``skipped`` (``members_without_key``:
    a file such as ``README``; ``members_not_files``: a symbolic link, device or FIFO; directories
    are not counted; a hard link to no regular member of the shard is a part of size -1, whose
    sample is rejected ``member_not_file``). Raises :class:`InputError` (one line) for a truncated
    or corrupt shard."""
    return ((key, parts) for (_, key), parts in group_by_key(_parts(path, start, end, skipped)))


def _parts(path: str, start: int, end: int, skipped: ReadStats | None) -> Iterator[tuple[tuple[int, str], Part]]:
    """``((archive number, key), part)`` per member of :func:`iter_samples`' range, in tar order."""
    with open(path, "rb") as fh:
        for archive, member in _members(path, fh, start, end):
            kp = split_key(member.name) if member.isreg() or member.islnk() else None
            if kp is None:
                if skipped is not None and not member.isdir():
                    if member.isreg() or member.islnk():
                        skipped.members_without_key += 1
                    else:
                        skipped.members_not_files += 1
                continue
            if member.islnk():  # a link to no regular member of the shard: size -1 (its sample is rejected)
                yield (archive, kp[0]), Part(kp[1], member.offset, *(_link_target(path, member) or (-1, -1)))
            else:
                yield (archive, kp[0]), Part(kp[1], member.offset, member.offset_data, member.size)


def _members(path: str, fh, start: int, end: int) -> Iterator[tuple[int, tarfile.TarInfo]]:
    """``(archive number, member)`` for every member whose header lies in ``[start, end)``, in tar
    order, read from the open shard ``fh`` (``start``: a member header; the headers are not kept).

    A shard may be several tar archives joined end to end (``cat a.tar b.tar``, a common mistake):
    as GNU tar's ``--ignore-zeros`` does, the zero blocks that end one archive are skipped and the
    next archive is read on (its member offsets stay offsets in the shard, so tasks, locators and
    ``tar://`` references stay exact); the archive number starts at 0 for ``start`` and counts
    the ends crossed. Every archive end is checked (:func:`_next_archive`). Raises
    :class:`InputError`: a member that ends past the end of the file, an archive that stops without
    its end-of-archive blocks (a shard cut between members), bytes after end-of-archive blocks
    that are not a tar header, or what ``tarfile`` cannot read."""
    size = os.fstat(fh.fileno()).st_size
    pos, archive = start, 0
    try:
        while True:
            fh.seek(pos)
            tf = tarfile.open(fileobj=fh, mode="r:")
            first = pos
            while (member := tf.next()) is not None:
                pos = member.offset
                if 0 <= end <= member.offset:
                    return
                if member.offset_data + member.size > size:
                    raise InputError(f"{printable_path(path)}: member {member.name!r} at byte {member.offset} ends "
                                     f"past the end of the file ({size} bytes); the shard is truncated, re-create it")
                tf.members.clear()  # bounded memory: the headers are not kept
                yield archive, member
            if archive and tf.offset == first:
                raise InputError(f"{printable_path(path)}: the bytes at {first} after the end-of-archive blocks of a "
                                 "tar archive are not a tar header; the shard is corrupt, re-create it")
            nxt = _next_archive(path, fh, tf.offset, size)
            if nxt is None or 0 <= end <= nxt:
                return
            pos, archive = nxt, archive + 1
    except tarfile.TarError as e:
        raise InputError(f"{printable_path(path)}: not a readable tar after byte {pos} ({e}); "
                         "the shard is truncated or corrupt, re-create it") from None


def _next_archive(path: str, fh, offset: int, size: int) -> int | None:
    """Where the next archive of a joined shard starts (bytes), or None at the end of the file,
    for an archive whose last member ends at ``offset``. A tar written completely ends with zero
    blocks there; a cut between members leaves none (``tarfile`` itself would just stop): one
    :class:`InputError` line. The zero blocks are skipped in 1 MiB reads (bounded memory); the next
    non-zero 512-byte block is the next archive's first header."""
    fh.seek(offset)
    block = fh.read(_BLOCK)
    if len(block) < _BLOCK or block.count(0) != _BLOCK:
        raise InputError(f"{printable_path(path)}: no end-of-archive blocks after byte {offset} ({size} bytes); the "
                         "shard is truncated, re-create it")
    pos = offset + _BLOCK
    while chunk := fh.read(_SCAN):
        data = chunk.lstrip(b"\x00")
        if data:
            return pos + (len(chunk) - len(data)) // _BLOCK * _BLOCK
        pos += len(chunk)
    return None


def _link_target(path: str, member: tarfile.TarInfo) -> tuple[int, int] | None:
    """``(data offset, size)`` of the member a hard link names: the last regular member of that name
    before the link (``tarfile``'s rule; in a joined shard, possibly in an earlier archive, as GNU
    tar's ``--ignore-zeros`` would extract it), else the first one after it; None when the shard
    holds no regular member of that name (a link to a symbolic link, or to nothing)."""
    headers, data = _regular_members(path, os.path.getmtime(path)).get(member.linkname, ((), ()))
    if not data:
        return None
    return data[max(bisect.bisect_left(headers, member.offset) - 1, 0)]


@lru_cache(maxsize=8)
def _regular_members(path: str, mtime: float) -> dict[str, tuple[list[int], list[tuple[int, int]]]]:  # noqa: ARG001
    """name -> (header offsets, [(data offset, size)]) of the regular members of the shard, in
    order, over every joined archive (built on the first hard link; ``mtime``: the cache key)."""
    found: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
    with open(path, "rb") as fh:
        for _, m in _members(path, fh, 0, -1):
            if m.isreg():
                headers, data = found.setdefault(m.name, ([], []))
                headers.append(m.offset)
                data.append((m.offset_data, m.size))
    return found


class WdsSource:
    """WebDataset tar shards (see the module docstring)."""

    name = "wds"
    unit = "sample"  # what a Locator's number counts

    @staticmethod
    def sniff(head: bytes) -> bool:
        """A tar header at the start (ustar magic or a valid v7/GNU header checksum)."""
        return _is_tar(head)

    @staticmethod
    def check(path: str) -> None:
        """Refuse a shard that is not an uncompressed tar (e.g. ``.tar.gz``), one line."""
        with open(path, "rb") as f:
            head = f.read(4096)
        if not _is_tar(head):
            raise InputError(f"{printable_path(path)} is not an uncompressed tar; WebDataset shards are read in place "
                             "by byte offset, so .tar.gz/.tgz shards cannot be: decompress them first (gunzip)")

    @staticmethod
    def split(path: str, target_bytes: int) -> list[tuple[int, int, int]]:
        """Ranges ``(start, end, first sample number)`` of whole samples, >= ``target_bytes`` each
        except the last (``end=-1`` on the last: to the end). Scans the headers once."""
        ranges: list[tuple[int, int, int]] = []
        start, first, n = 0, 1, 0
        for _, members in iter_samples(path):
            off = members[0].header
            if off - start >= target_bytes:
                ranges.append((start, off, first))
                start, first = off, n + 1
            n += 1
        ranges.append((start, -1, first))
        return ranges

    @staticmethod
    def read(path: str, start: int, end: int, first: int, *, schema: str = "auto", media_root: str = ".",
             allow_absolute_media: bool = False, stats: ReadStats | None = None,
             lmdb_envs: dict[str, str] | None = None, text_key: str | None = None,
             record_map: str | None = None, max_member_bytes: int = MAX_MEMBER_BYTES) -> Iterator:
        """One :class:`~vlmpack.records.Sample` or :class:`~vlmpack.records.Rejection` per sample of
        the range (``media_root`` and ``allow_absolute_media`` do not apply: media are members;
        ``lmdb_envs``: the ``--media-lmdb`` stores for ``lmdb://NAME/KEY`` names; ``text_key``:
        the key of the turns, ``--text-key``). A sample with two members of one name is rejected
        (``duplicate_member``), one whose ``json`` part is larger than ``max_member_bytes``
        (``--max-member-bytes``) too (``member_too_large``, the part is not read); members
        without a key are counted in ``stats`` (:func:`iter_samples`)."""
        stats = stats if stats is not None else ReadStats()
        with open(path, "rb") as fh:
            for no, (key, members) in enumerate(iter_samples(path, start, end, stats), first):
                stats.lines += 1
                stats.records += 1
                loc = Locator(path, no, members[0].header, key, "sample")
                res = _sample(path, fh, key, members, loc, schema, lmdb_envs, text_key, max_member_bytes,
                              record_map)
                if isinstance(res, Rejection):
                    stats.reasons[res.reason] = stats.reasons.get(res.reason, 0) + 1
                yield res


def _sample(path: str, fh, key: str, members: list[Part], loc: Locator, schema: str,
            lmdb_envs: dict[str, str] | None, text_key: str | None, max_member_bytes: int,
            record_map: str | None = None):
    parts = {m.name: m for m in members}
    if len(parts) < len(members):
        twice = sorted(n for n, c in Counter(m.name for m in members).items() if c > 1)
        return Rejection(loc, "duplicate_member", f"sample {key!r} holds more than one member named "
                         f"{', '.join(f'{key}.{n}' for n in twice[:4])}; which one is meant cannot be told: "
                         "re-create the shard with one member per part", key)
    if dangling := sorted(m.name for m in members if m.size < 0):
        return Rejection(loc, "member_not_file", f"sample {key!r}: member {key}.{dangling[0]} is a hard link to no "
                         "regular member of the shard (a link to a symbolic link, or to a missing member)", key)
    meta = parts.get("json")
    if meta is None:
        return Rejection(loc, "unknown_schema", f"sample {key!r} has no .json part (parts: {sorted(parts)[:8]})",
                         key)
    if meta.size > max_member_bytes:
        return Rejection(loc, "member_too_large", f"sample {key!r}: member {key}.json is {meta.size:,} bytes, more "
                         f"than --max-member-bytes {max_member_bytes:,}; not read (raise the option to pack it)", key)
    fh.seek(meta.offset)
    raw = fh.read(meta.size)
    try:
        obj = json.loads(raw)  # the one parse of the part (bytes: UTF-8/16/32 detected, as before)
    except (ValueError, RecursionError):
        obj = None  # parse_record gives the reason
    if isinstance(obj, dict):
        obj.setdefault("id", key)
        try:
            normalize_native(apply_map(obj, record_map), text_key)  # names its media itself; the lists below
            # then take them
        except RecordError as e:
            return Rejection(loc, e.reason, e.detail, str(obj["id"]))
        for kind, spec in KINDS.items():
            names = _LISTS.get(kind, (f"{kind}s", kind))
            given = next((obj.pop(n) for n in names if n in obj), None)
            if given is None:
                exts = spec.extensions
                given = sorted(p for p in parts if p.rsplit(".", 1)[-1].lower() in exts)
            obj[names[0]] = given

    def resolve(name: object) -> str:
        part = name if isinstance(name, str) else None
        if part is not None and part.startswith(LMDB):
            return resolve_ref(part, ".", lmdb_envs=lmdb_envs)
        if part is not None and part.startswith(key + "."):
            part = part[len(key) + 1:]
        m = parts.get(part) if part is not None else None
        if m is None:
            raise MediaError("media_missing", f"sample {key!r} has no part {name!r} (parts: {sorted(parts)[:8]})")
        return tar_member_ref(path, m.offset, m.size)

    if isinstance(obj, dict):  # the parsed object goes on as it is: never dumped and parsed again
        return record_to_sample(obj, loc, schema=schema, resolve_media=resolve, text_key=text_key,
                                record_map=record_map)
    return parse_record(raw, loc, schema=schema, resolve_media=resolve, text_key=text_key,  # its reason
                        record_map=record_map)
