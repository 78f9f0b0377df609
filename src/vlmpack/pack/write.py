"""Write stage: packs into deterministic WebDataset tars, their members made by the output layout.

One tar sample per pack, its key the layout's (``vlmpack``: ``pack<global index:09d>``,
:func:`vlmpack.packfmt.pack_key`); its
members come from the output layout's sink (:mod:`vlmpack.sinks`; ``vlmpack``: ``<key>.json``,
the original media bytes, ``<key>.input_ids.npy`` with ``--pretokenize``). Tars are
byte-reproducible: members sorted by name, with :func:`vlmpack.packfmt.tarinfo` headers (mtime 0,
uid/gid 0, empty uname/gname, mode 0644, ustar; a PAX header only where a name needs one). A shard
is written as ``<name>.tmp`` and renamed when complete; its ``.tar.idx`` (Energon, little-endian
uint64, N+1 entries) comes from the offsets recorded while writing (``TarFile.offset`` before each
sample's first member, and before ``close()``).

Each media item is checked again as it is read for a shard (:func:`vlmpack.media.fingerprint.read_checked`):
a loose file must still resolve inside ``--media-root`` and the bytes must have the sha256 they were
counted with (kept beside each sample in the part file, :func:`vlmpack.pack.count_task.read_entry`).
A sample that fails is left out of its pack and becomes a rejection of the shard
(:attr:`ShardResult.rejected`; reason ``media_changed``, ``media_outside_root`` or ``media_missing``)
instead of other bytes being written; a pack left without samples is not written. The next run
counts that media again (the count stage sees the new content).

Each sample reaches the shard as the count stage serialized it: the writer reads its entry bytes
and joins them into the pack's ``<key>.json`` (:func:`vlmpack.packfmt.join_pack`) without parsing
them. Each written pack's samples get their content sha256 (:func:`vlmpack.packfmt.entry_digest` of
those bytes and of the sha256 of its media bytes as written, :attr:`ShardResult.content_sha256`), kept in the
shard's marker in the run directory (never in the shard: its bytes are as without it), which
``vlmpack check`` compares every sample of the shard with.

No pack holds more than ``seq_len`` tokens: the planner never makes one, so a pack whose recorded
counts sum above it (a count cache or run directory edited by hand, or a bug) stops the shard with
:class:`vlmpack.errors.InternalError` naming the pack (exit 70) before anything of it is written.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vlmpack.energon.meta import write_tar_idx
from vlmpack.errors import InternalError, MediaError
from vlmpack.fsio import fsync_dir
from vlmpack.media.fingerprint import read_checked
from vlmpack.pack.count_task import part_path, read_entry
from vlmpack.packfmt import PackEntry, entry_digest, tarinfo
from vlmpack.sinks import DEFAULT_LAYOUT, get_sink

_TAR_OVERHEAD = 512 * 3  # header + padding of the json member, plus slack


@dataclass(frozen=True)
class ShardTask:
    """One shard to write, as flat arrays (no per-sample Python object): ``members`` ``[m]``
    (:func:`member_rows`: a structured array of :data:`MEMBER_COLUMNS`), the shard's samples in
    pack order as (records part index, byte offset, byte length of the sample's entry, its tokens
    as planned); ``pack_offsets`` int64 ``[P + 1]``, pack j is
    ``members[pack_offsets[j]:pack_offsets[j + 1]]``; ``first_pack`` the global index of its
    first pack."""

    index: int
    name: str
    first_pack: int
    members: np.ndarray
    pack_offsets: np.ndarray
    seq_len: int
    output_dir: str
    records_dir: str
    model_dir: str | None = None  # set: also write <key>.input_ids.npy (pretokenized packs)
    layout: str = DEFAULT_LAYOUT  # the output layout (vlmpack.sinks) that makes each pack's members
    media_root: str | None = None  # --media-root: loose media files must still resolve inside it
    allow_absolute_media: bool = False  # --allow-absolute-media: no media-root rule
    processor: str = ""  # with model_dir: its processor options, canonical JSON (vlmpack.models.options)

    @property
    def num_packs(self) -> int:
        """Packs in the shard (P)."""
        return len(self.pack_offsets) - 1

    def pack_members(self, j: int) -> list[tuple[int, int, int, int]]:
        """The samples of the shard's j-th pack: ``(part, offset, length, num_tokens)`` each."""
        return [tuple(r) for r in self.members[self.pack_offsets[j]:self.pack_offsets[j + 1]].tolist()]


@dataclass(frozen=True)
class ShardResult:
    """What the writer reports for a finished shard (all sizes in bytes). ``rejected``: the samples
    left out because a media item changed since it was counted, each ``{"source": locator dict,
    "id", "id_kind", "num_tokens", "reason", "detail"}`` (JSON-ready; empty in a normal run).
    ``content_sha256``: pack key -> the content sha256 (hex) of each of its samples in order
    (:func:`vlmpack.packfmt.entry_digest` of its pack entry and media bytes as written), what
    ``vlmpack check`` compares each sample of the shard with."""

    name: str
    num_packs: int
    num_samples: int
    num_tokens: int
    nbytes: int
    sha256: str
    rejected: list = field(default_factory=list)
    content_sha256: dict = field(default_factory=dict)


#: The ``manifest.parquet`` columns of :attr:`ShardTask.members`, in order.
MEMBER_COLUMNS = ("part", "rec_offset", "rec_len", "num_tokens")


def member_rows(manifest, order: np.ndarray) -> np.ndarray:
    """A structured array ``[len(order)]`` with one field per :data:`MEMBER_COLUMNS` of
    ``manifest`` (a ``pyarrow.Table``), in the column's own dtype (packed: 24 bytes a row from a
    manifest, part and num_tokens int32), at rows ``order`` (the plan's sample order), filled one
    column at a time; a row's ``tolist()`` is the tuple of Python ints
    :meth:`ShardTask.pack_members` gives."""
    cols = [manifest.column(name).to_numpy() for name in MEMBER_COLUMNS]
    rows = np.empty(len(order), dtype=np.dtype([(n, c.dtype) for n, c in zip(MEMBER_COLUMNS, cols)]))
    for name, col in zip(MEMBER_COLUMNS, cols):
        rows[name] = col[order]
    return rows


def assign_shards(pack_bytes: np.ndarray, max_packs: int, max_bytes: int, breaks=()) -> np.ndarray:
    """Shard boundaries over packs in plan order.

    pack_bytes: int64 ``[P]`` estimated tar bytes of each pack. A shard is closed before a pack
    that would make it exceed ``max_packs`` packs or ``max_bytes`` bytes (a single pack larger
    than ``max_bytes`` gets a shard of its own; no shard is empty), and before each pack index of
    ``breaks`` (where a split starts: no shard mixes splits). Returns int64 ``[S+1]`` offsets:
    shard s holds packs ``[bounds[s], bounds[s+1])``.
    """
    bounds = [0]
    count, size = 0, 0
    breaks = set(int(b) for b in breaks)
    for p, b in enumerate(pack_bytes.tolist()):
        if count and (count >= max_packs or size + b > max_bytes or p in breaks):
            bounds.append(p)
            count, size = 0, 0
        count += 1
        size += b
    if len(pack_bytes):
        bounds.append(len(pack_bytes))
    return np.asarray(bounds, dtype=np.int64)


def estimate_pack_bytes(offsets: np.ndarray, order: np.ndarray, rec_len: np.ndarray,
                        media_bytes: np.ndarray, num_media: np.ndarray) -> np.ndarray:
    """Estimated tar bytes per pack (int64 ``[P]``): records + media + 512-byte headers/padding.
    Each per-sample column is gathered and summed per pack on its own (one temporary ``[n]`` at a
    time: the driver's peak memory)."""
    if not len(order):
        return np.zeros(len(offsets) - 1, np.int64) + _TAR_OVERHEAD
    per_pack = lambda col: np.add.reduceat(col[order], offsets[:-1], dtype=np.int64)  # noqa: E731
    return per_pack(rec_len) + per_pack(media_bytes) + 1024 * per_pack(num_media) + _TAR_OVERHEAD


class _HashingWriter:
    """A write-only file wrapper that keeps the sha256 and size (bytes) of what passes through,
    so a shard's hash needs no second read. Offers what ``tarfile`` uses: ``write`` and ``tell``."""

    def __init__(self, raw):
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size


class _MediaReader:
    """The writer's ``read_media`` for one pack: :func:`~vlmpack.media.fingerprint.read_checked`
    against the sha256 each reference was counted with (``expected``), remembering the reference
    that failed (``failed``) so that the samples using it can be left out."""

    def __init__(self, task: ShardTask, expected: dict[str, str]):
        self.task, self.expected, self.failed = task, expected, None

    def __call__(self, ref: str) -> bytes:
        try:
            return read_checked(ref, self.expected[ref], media_root=self.task.media_root,
                                allow_absolute_media=self.task.allow_absolute_media)
        except MediaError:
            self.failed = ref
            raise


def _left_out(e: PackEntry, reason: str, detail: str) -> dict:
    """The rejection of sample ``e`` left out at write time (its entry parsed for its locator and id)."""
    s = e.sample()
    return {"source": s["source"], "id": s["id"], "id_kind": s.get("id_kind", "str"), "num_tokens": e.num_tokens,
            "reason": reason, "detail": detail}


def _pack_entries(task: ShardTask, sink, key: str, samples: list[PackEntry],
                  rejected: list[dict]) -> tuple[list[tuple[str, bytes]], int, list[PackEntry]]:
    """The members of pack ``key`` from its ``samples``, leaving out (into ``rejected``) each sample
    with a media item that fails :class:`_MediaReader`'s checks. Returns ``(entries, tokens, the
    samples written)``; no entries when no sample is left."""
    while samples:
        expected: dict[str, str] = {}
        conflict = []  # one reference counted with two contents (it changed between two count tasks)
        for i, e in enumerate(samples):
            for sha, _part, ref in e.media:
                if expected.setdefault(ref, sha) != sha:
                    conflict.append(i)
        if conflict:
            bad = set(conflict)
            reason = ("media_changed", "a media item was counted with two different contents in this run")
        else:
            reader = _MediaReader(task, expected)
            try:
                entries, tokens = sink.pack_members(key, samples, task.seq_len, reader, model_dir=task.model_dir,
                                                   processor=task.processor)
                return entries, tokens, samples
            except MediaError as e:
                if reader.failed is None:
                    raise
                bad = {i for i, s in enumerate(samples) if any(ref == reader.failed for _, _, ref in s.media)}
                reason = (e.reason, e.detail)
        rejected += [_left_out(s, *reason) for i, s in enumerate(samples) if i in bad]
        samples = [x for i, x in enumerate(samples) if i not in bad]
    return [], 0, []


def _check_capacity(task: ShardTask, key: str, tokens: int) -> None:
    """:class:`InternalError` when pack ``key`` of ``task`` holds more than ``task.seq_len`` tokens."""
    if tokens > task.seq_len:
        raise InternalError(
            f"{task.name}: pack {key} holds {tokens:,} tokens by its samples' recorded counts, more than its "
            f"capacity seq_len {task.seq_len:,}; the plan and the counted records disagree (a count cache or "
            f"{task.records_dir} edited by hand, or a bug), so the shard is not written; pack again with "
            "--cache-dir off and --overwrite")


def write_shard(task: ShardTask) -> ShardResult:
    """Write one shard + its ``.tar.idx`` (both atomically). Pure function of ``task`` and of the
    bytes it reads; a sample whose media changed since counting is left out (see the module
    docstring). Raises ``OSError`` (disk full, read-only, a part file that cannot be read),
    ``ValueError`` (a damaged part file) and :class:`InternalError` for a pack whose samples'
    ``num_tokens`` sum above ``task.seq_len`` (the shard is not written; only its ``.tmp`` is left, as
    after any failure)."""
    out = Path(task.output_dir)
    tar_path = out / task.name
    tmp = tar_path.with_name(tar_path.name + ".tmp")
    offsets: list[int] = []
    n_samples = n_tokens = 0
    handles: dict[int, object] = {}
    rejected: list[dict] = []
    digests: dict[str, list[str]] = {}
    sink = get_sink(task.layout)
    try:
        with open(tmp, "wb") as raw:
            f = _HashingWriter(raw)
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for j in range(task.num_packs):
                    samples = []
                    for part, off, length, tokens in task.pack_members(j):
                        if part not in handles:
                            handles[part] = open(part_path(task.records_dir, part), "rb")  # noqa: SIM115
                        samples.append(read_entry(handles[part], off, length, tokens, fields=sink.fields_line))
                    key = sink.pack_key(task.first_pack + j, samples)
                    _check_capacity(task, key, sum(e.num_tokens for e in samples))
                    entries, pack_tokens, kept = _pack_entries(task, sink, key, samples, rejected)
                    if not entries:  # every sample of the pack was left out
                        continue
                    _check_capacity(task, key, pack_tokens)  # what the output layout wrote
                    offsets.append(tf.offset)
                    digests[key] = [entry_digest(e.entry, [sha for sha, _, _ in e.media]) for e in kept]
                    for name, data in sorted(entries):
                        tf.addfile(tarinfo(name, len(data)), io.BytesIO(data))
                    n_samples += len(kept)
                    n_tokens += pack_tokens
                offsets.append(tf.offset)
            raw.flush()
            os.fsync(raw.fileno())
    except OSError as e:  # disk full, read-only, ...: name the file being written
        if e.filename is None:
            e.filename = str(tmp)
        raise
    finally:
        for fh in handles.values():
            fh.close()
    write_tar_idx(out / (task.name + ".idx"), offsets)
    os.replace(tmp, tar_path)
    fsync_dir(out)
    return ShardResult(task.name, len(offsets) - 1, n_samples, n_tokens, f.size, f.sha256.hexdigest(), rejected,
                       digests)
