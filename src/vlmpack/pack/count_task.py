"""Measure stage: read + validate + count exact tokens for one input range (one pool task).

A task covers one range of one input file, as its source splits it (:mod:`vlmpack.sources`: a
line-aligned byte range of a JSONL file, a byte range of whole samples of a tar shard).
It parses and validates every record, counts the tokens of the valid ones in batches with the
model's family (:class:`vlmpack.models.base.ModelFamily` from ``vlmpack.models.load_model``:
media rule, special tokens, template, tokenizer, expansion), and writes each accepted sample once,
serialized as its entry of the pack object (:func:`vlmpack.packfmt.sample_entry`: the bytes its shard
will hold), as one line of ``<run>/records/part-<task>.jsonl``, so that the writer can read any sample
back by (part, byte offset, length) whatever the input's compression, and join it into its pack
without parsing it. Each entry line is followed by one more line, the JSON list of its media's
``[sha256, part, reference]`` (``[]`` without media, :func:`read_entry`): the writer checks the
bytes it copies against them. An output layout with fields of its own (``--layout``,
:meth:`vlmpack.sinks.base.Sink.entry_fields`) gets a third line, those fields serialized once, so
the writer joins them without parsing the entry. The content fingerprint
of every media file used (:mod:`vlmpack.media.fingerprint`) is in the task's result, so a resume
or a count cache hit sees a file replaced in place, whatever its size and mtime.

Tasks are pure functions of their inputs: the same task gives the same part file and arrays
whatever the number of workers, which keeps the output byte-identical across worker counts.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from vlmpack.errors import MediaError, MediaRuleError
from vlmpack.fsio import atomic_write
from vlmpack.media.check_table import open_table
from vlmpack.media.fingerprint import Fingerprint, fingerprint, unchanged
from vlmpack.media.ref import display_ref
from vlmpack.models import load_model
from vlmpack.models.load_recipe import use_cache_root
from vlmpack.pack.media_tokens import TOKEN_COLUMNS, sample_kind_tokens
from vlmpack.pack.turn_split import SplitStats, split_overlong
from vlmpack.pack.validate import skip_overlong_texts, text_bound_of, validate_sample
from vlmpack.packfmt import PackEntry, sample_entry
from vlmpack.records import ID_KINDS, MAX_MEDIA_BYTES, MAX_MEMBER_BYTES, SAMPLE_KINDS, ReadStats, Rejection, Sample
from vlmpack.sinks import DEFAULT_LAYOUT, get_sink
from vlmpack.sources import get_source

KIND_CODE = {k: i for i, k in enumerate(SAMPLE_KINDS)}  # text 0, image 1, video 2
TOKENIZE_BATCH = 256
_NO_MEDIA: Counter = Counter()  # the media counts of a text-only sample (read, never changed)
#: The largest token count a per-sample int32 array holds: a sample counted above it is ``overlong``
#: for every ``--seq-len`` (:class:`vlmpack.config.PackConfig` caps L at it), never wrapped.
MAX_TOKENS = 2**31 - 1


@dataclass(frozen=True)
class MeasureTask:
    """One unit of measuring work: ``path[start:end]`` (bytes; ``end=-1`` = to EOF), whose first
    line is ``first_line``; ``file_idx`` is the input's position in the config."""

    index: int
    file_idx: int
    path: str
    start: int
    end: int
    first_line: int
    schema: str
    media_root: str
    allow_absolute_media: bool
    media_check: str
    model_dir: str
    records_dir: str
    special_tokens: str = "reject"  # --special-tokens: reject | split
    fmt: str = "jsonl"  # the input's format (vlmpack.sources): what start/end/first_line mean
    media_lmdb: tuple[tuple[str, str], ...] = ()  # --media-lmdb stores: (name, env path) pairs
    text_key: str | None = None  # --text-key: the key of the turns
    record_map: str | None = None  # a registry's column and tag mapping (vlmpack.layouts.mapping)
    token_limit: int = MAX_TOKENS  # tokens: a sample whose text alone needs more is rejected untokenized
    max_member_bytes: int = MAX_MEMBER_BYTES  # --max-member-bytes: the largest WDS json member read
    max_media_bytes: int = MAX_MEDIA_BYTES  # --max-media-bytes: the largest media item probed and packed
    layout: str = DEFAULT_LAYOUT  # --layout: a sample the output layout cannot hold is rejected (vlmpack.sinks)
    processor: str = ""  # processor options, canonical JSON (vlmpack.models.options); "": none
    split_limit: int = 0  # --overlong split: tokens (--seq-len) a longer sample is cut to at turns; 0: off
    check_table: str = ""  # the count cache root holding the media check table (vlmpack.media.check_table); "": none


@dataclass
class MeasureResult:
    """Arrays over the task's accepted samples (in input order) plus its rejections.

    ``num_tokens``/``media_tokens`` int32 (tokens), ``num_media`` int32, ``kind`` int8 (0 text,
    1 image, 2 video), ``media_bytes`` int64 (bytes of the original media), ``line`` int64,
    ``offset`` int64 (bytes, in the decompressed input), ``rec_offset``/``rec_len`` int64 (bytes,
    in the task's records part file), ``id_kind`` int8 (index into :data:`vlmpack.records.ID_KINDS`),
    ``label_tokens`` int32 (tokens that carry a label, the family's label mask), ``kind_tokens``:
    per media kind after the first, its column name of :data:`vlmpack.pack.media_tokens.TOKEN_COLUMNS`
    (``video_tokens``, ``audio_tokens``) -> int32 (the part of ``media_tokens`` of the sample's
    items of that kind; the rest is its images').
    ``ids``: an Arrow ``string`` array (one contiguous buffer: no per-sample Python object on the
    driver). ``media_files``: the :class:`~vlmpack.media.fingerprint.Fingerprint` (sha256 of the
    bytes) of every media item the accepted samples use, as counted: a resume whose media changed
    counts the task again; the driver drops the list once checked (:meth:`flatten`) and keeps
    ``media_sha256``, its digest. ``part_sha256`` / ``part_size``: sha256 (hex) and size in bytes of
    the records part file the task wrote. ``bound_counted_max`` / ``bound_skipped_min``: the largest
    text lower bound (tokens, :func:`vlmpack.models.text_bound.min_text_tokens`) of a sample that
    was tokenized and the smallest of one rejected ``overlong`` untokenized (0: none); the result
    holds for a ``--seq-len`` L when ``bound_counted_max <= L < bound_skipped_min`` (:meth:`fits`).
    Saved as data only (:mod:`vlmpack.pack.results`).
    """

    index: int
    file_idx: int
    ids: Any  # pyarrow.StringArray (or a list[str]: see ids_array)
    num_tokens: np.ndarray
    media_tokens: np.ndarray
    num_media: np.ndarray
    kind: np.ndarray
    media_bytes: np.ndarray
    line: np.ndarray
    offset: np.ndarray
    rec_offset: np.ndarray
    rec_len: np.ndarray
    id_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    label_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    kind_tokens: dict[str, np.ndarray] = field(
        default_factory=lambda: {c: np.zeros(0, np.int32) for c in TOKEN_COLUMNS.values()})
    media_files: list[Fingerprint] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    stats: ReadStats = field(default_factory=ReadStats)
    seconds_read: float = 0.0  # worker seconds reading + validating
    seconds_count: float = 0.0  # worker seconds rendering + tokenizing + media rules + media sha256
    reused: bool = False  # read back from OUT's run directory or the count cache: not counted by this run
    media_sha256: str = ""  # media_files_sha256(media_files), kept once the list is dropped
    id_hash: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # id_key_hashes of the ids
    num_samples: int = -1  # accepted samples; set by flatten() (the arrays may be released after)
    released: bool = False  # the per-sample arrays were dropped (they are in the saved result)
    part_sha256: str = ""  # sha256 (hex) of the records part file
    part_size: int = 0  # its size in bytes
    bound_counted_max: int = 0
    bound_skipped_min: int = 0
    split: dict = field(default_factory=dict)  # --overlong split: SplitStats.as_dict() of the task ({}: none split)

    def fits(self, token_limit: int) -> bool:
        """True when counting again with ``token_limit`` (tokens) would give this same result: the
        same samples are left untokenized (those whose text bound exceeds the limit), so a count
        cache keyed without L serves every L that does not move a sample across it."""
        return self.bound_counted_max <= token_limit and (not self.bound_skipped_min
                                                          or token_limit < self.bound_skipped_min)

    def ids_array(self):
        """``ids`` as a pyarrow ``string`` array (a result built by hand may hold a list)."""
        return self.ids if isinstance(self.ids, pa.Array) else pa.array(list(self.ids), pa.string())

    def release(self) -> None:
        """Drop the per-sample arrays and ids (once the driver has concatenated them into the
        manifest, :func:`vlmpack.pack.manifest.build_manifest`); scalars, rejections and stats stay."""
        self.num_samples = len(self.rec_len) if not self.released else self.num_samples
        self.released = True
        empty = np.zeros(0, np.int64)
        for name in ("num_tokens", "media_tokens", "num_media", "kind", "media_bytes", "line", "offset",
                     "rec_offset", "rec_len", "id_kind", "label_tokens", "id_hash"):
            setattr(self, name, empty)
        self.kind_tokens = dict.fromkeys(self.kind_tokens, empty)
        self.ids = pa.array([], pa.string())

    def flatten(self) -> MeasureResult:
        """Keep only flat data on the driver: ``ids`` as an Arrow array, ``media_files`` replaced by
        its digest ``media_sha256`` (the list is in the saved result, read again at a resume).
        Returns ``self``."""
        self.ids = self.ids_array()
        self.num_samples = len(self.rec_len)
        if not self.media_sha256:
            self.media_sha256 = media_files_sha256(self.media_files)
        self.media_files = []
        return self


def id_key_hashes(ids: list[str], id_kinds: list[int]) -> np.ndarray:
    """uint64 ``[n]``: the first 8 bytes (little-endian) of BLAKE2b of each ``(id_kind, id)`` key,
    computed in the worker so that the driver finds duplicates by sorting 8-byte integers
    (:func:`vlmpack.pack.manifest.duplicate_positions`, which confirms equal hashes on the ids)."""
    return np.frombuffer(b"".join(hashlib.blake2b(bytes([k]) + s.encode("utf-8", "surrogatepass"),
                                                  digest_size=8).digest() for s, k in zip(ids, id_kinds)),
                         dtype="<u8").astype(np.uint64)


def media_files_sha256(media_files: list[Fingerprint]) -> str:
    """sha256 (hex) of a task's media as counted: each item's reference, size in bytes and content
    sha256 (not its stat: a file touched but not changed keeps the digest, and the shards)."""
    h = hashlib.sha256()
    for fp in media_files:
        h.update(fp.ref.encode("utf-8", "surrogatepass") + b"\0" + f"{fp.nbytes}\0{fp.sha256}\n".encode())
    return h.hexdigest()


def part_path(records_dir: str | Path, index: int) -> Path:
    """The records part file of task ``index``."""
    return Path(records_dir) / f"part-{index:06d}.jsonl"


def result_path(store: str | Path, index: int) -> Path:
    """The saved :class:`MeasureResult` of task ``index`` in a count store: its sealed JSON file,
    written last (it marks the task done; :mod:`vlmpack.pack.results`)."""
    return Path(store) / f"part-{index:06d}.result.json"


def arrays_path(store: str | Path, index: int) -> Path:
    """The per-sample arrays of task ``index`` in a count store (Arrow IPC file, :mod:`vlmpack.pack.results`)."""
    return Path(store) / f"part-{index:06d}.arrow"


def read_entry(fh, offset: int, length: int, num_tokens: int, *, fields: bool = False) -> PackEntry:
    """The sample at ``offset`` (``length`` bytes, without its newline) of an open records part
    file, as the writer takes it: its entry bytes as written (never parsed here) and, from the line
    that follows it, each media item's ``(sha256 hex, part within the sample, reference)``;
    ``num_tokens`` is the planned count (``manifest.parquet``); ``fields``: the output layout's
    fields line follows (:func:`record_lines`), read as it is. Raises ``ValueError`` when the
    media line is no JSON of that form (a damaged part file)."""
    fh.seek(offset)
    entry = fh.read(length)
    fh.seek(offset + length + 1)
    media = json.loads(fh.readline())
    if not (isinstance(media, list) and all(
            isinstance(m, list) and len(m) == 3 and all(isinstance(x, str) for x in m) for m in media)):
        raise ValueError(f"the records part file holds no sample and media line at byte {offset}")
    extra = fh.readline().rstrip(b"\n") if fields else b""
    return PackEntry(entry, num_tokens, tuple(tuple(m) for m in media), extra)


def record_lines(sample: Sample, sha256: list[str], special_tokens: str = "reject") -> tuple[bytes, bytes]:
    """The two lines stored per accepted sample, without newlines: its entry of the pack object
    (:func:`vlmpack.packfmt.sample_entry`, the bytes the shard will hold: serialized once) and the
    JSON list of ``[sha256, part, reference]`` of its media (``sha256`` hex, as counted), which the
    writer checks the bytes it copies against."""
    entry, names = sample_entry(sample, special_tokens)
    # surrogatepass: a media reference may hold the surrogate escapes of a non-UTF-8 file name;
    # json.loads(bytes) reads them back the same way
    if not sample.media:
        return entry, b"[]"
    media = json.dumps([[h, n, m.path] for h, n, m in zip(sha256, names, sample.media)], ensure_ascii=False)
    return entry, media.encode("utf-8", "surrogatepass")


def media_changed(files: list[Fingerprint]) -> str | None:
    """The reference of the first of ``files`` whose bytes are not the counted ones any more (or
    that cannot be read), else None: :func:`vlmpack.media.fingerprint.unchanged` (the stat when it
    is the recorded one, else the bytes hashed again)."""
    for fp in files:
        if not unchanged(fp):
            return fp.ref
    return None


def _fingerprints(samples: list[Sample]) -> tuple[list[Sample], list[Rejection], dict[str, Fingerprint]]:
    """Fingerprint each media item of ``samples`` once (:func:`vlmpack.media.fingerprint.fingerprint`);
    a sample whose item cannot be read now is rejected (``media_missing``)."""
    fps: dict[str, Fingerprint | MediaError] = {}
    ok, bad = [], []
    for s in samples:
        for m in s.media:
            if m.path not in fps:
                try:
                    fps[m.path] = fingerprint(m.path)
                except (OSError, EOFError, ValueError, MediaError) as e:
                    fps[m.path] = MediaError("media_missing", f"{m.kind} {display_ref(m.path)} cannot be read "
                                             f"to fingerprint it ({' '.join(str(e).split())})")
        err = next((fps[m.path] for m in s.media if isinstance(fps[m.path], MediaError)), None)
        if err is None:
            ok.append(s)
        else:
            bad.append(Rejection(s.locator, err.reason, err.detail, s.id))
    return ok, bad, {k: v for k, v in fps.items() if isinstance(v, Fingerprint)}


def _count_media(family, sample: Sample) -> Rejection | None:
    """Fill ``num_tokens`` of each media item of ``sample`` (:meth:`ModelFamily.media_tokens`); the
    rejection of the first item the family refuses, else None. Its reason is the error's own
    (:attr:`vlmpack.errors.SampleError.reason`: ``media_unsupported`` unless the rule names
    another, e.g. ``media_undecodable`` for a Qwen2.5-Omni video whose sound track is cut short)."""
    n_images = sum(m.kind == "image" for m in sample.media)
    for m in sample.media:
        try:
            m.num_tokens = family.media_tokens(m, sample_images=n_images)
        except MediaRuleError as e:
            return Rejection(sample.locator, e.reason, f"{display_ref(m.ref)}: {e}", sample.id)
    return None


def count_samples(family, samples: list[Sample], special_tokens: str = "reject"
                  ) -> tuple[list[Sample], list[Rejection]]:
    """Fill ``num_tokens`` of each sample (and of its media) with the exact count.

    ``special_tokens``: ``"reject"`` rejects a sample whose text holds a special token of the
    tokenizer (``special_token_in_text``); ``"split"`` tokenizes such text as plain text (see
    :mod:`vlmpack.models.special_tokens`). Batched tokenization (``TOKENIZE_BATCH`` samples a
    call). A sample whose template fails or whose media the processor refuses is rejected; one
    counted above :data:`MAX_TOKENS` (int32, e.g. 200,000 images of 16,384 tokens) is ``overlong``.
    Returns ``(counted samples, rejections)``, both in input order.
    """
    ok: list[Sample] = []
    rejected: list[Rejection] = []
    for s in samples:
        bad = _count_media(family, s)
        if bad is None:
            problem = family.field_problem(s.messages, s.tools)
            if problem is not None:
                bad = Rejection(s.locator, problem[0], problem[1], s.id)
        if bad is None and special_tokens != "split":
            hit = family.find_special_token(s.messages, s.tools)
            if hit is not None:
                bad = Rejection(s.locator, "special_token_in_text",
                                f"turn {hit[0]} holds the special token {hit[1]!r}; remove it, or pass "
                                "--special-tokens split to train on it as plain text", s.id)
        if bad is None:
            ok.append(s)
        else:
            rejected.append(bad)
    counted: list[Sample] = []
    modes = [special_tokens] * TOKENIZE_BATCH
    for b in range(0, len(ok), TOKENIZE_BATCH):
        batch = ok[b:b + TOKENIZE_BATCH]
        try:
            all_ids = family.token_ids([s.messages for s in batch], modes[:len(batch)], [s.tools for s in batch])
        except Exception:  # noqa: BLE001 - a template may raise anything: find the sample(s) one by one
            all_ids = []
            for s in batch:
                try:
                    all_ids.append(family.token_ids([s.messages], [special_tokens], [s.tools])[0])
                except Exception as e:  # noqa: BLE001
                    all_ids.append(Rejection(s.locator, "template_error", f"{type(e).__name__}: {e}"[:300], s.id))
        for s, ids in zip(batch, all_ids):
            if isinstance(ids, Rejection):
                rejected.append(ids)
                continue
            arr = np.asarray(ids, dtype=np.int64)
            n_kind = Counter(m.kind for m in s.media) if s.media else _NO_MEDIA
            later = {f"n_{k}s": n for k, n in n_kind.items() if k not in ("image", "video")}  # n_audios
            problem = family.check_ids(arr, n_kind["image"], n_kind["video"], **later)
            if problem:
                rejected.append(Rejection(s.locator, "special_token_in_text", problem, s.id))
                continue
            s.num_tokens = family.num_tokens(arr, [m.num_tokens for m in s.media])
            if max(s.num_tokens, sum(m.num_tokens for m in s.media)) > MAX_TOKENS:  # int32 arrays: never wrap
                rejected.append(Rejection(s.locator, "overlong", f"{s.num_tokens:,} tokens > {MAX_TOKENS:,}, the "
                                          "largest --seq-len", s.id))
                continue
            s.label_tokens = int(np.count_nonzero(family.label_mask(arr)))  # media tokens never carry labels
            counted.append(s)
    return counted, rejected


def read_records(task: MeasureTask, stats: ReadStats) -> Iterator[Sample | Rejection]:
    """The parsed records of ``task``'s range, in input order, as its source reads them
    (:mod:`vlmpack.sources`; ``stats`` gets the source's counts): a :class:`Sample` (media not yet
    probed) or the :class:`Rejection` of a record that does not parse. Raises what the source raises
    for the input as a whole (:class:`vlmpack.errors.InputError`)."""
    return get_source(task.fmt).read(task.path, task.start, task.end, task.first_line, schema=task.schema,
                                     media_root=task.media_root, allow_absolute_media=task.allow_absolute_media,
                                     stats=stats, max_member_bytes=task.max_member_bytes,
                                     **({"lmdb_envs": dict(task.media_lmdb)} if task.media_lmdb else {}),
                                     **({"text_key": task.text_key} if task.text_key else {}),
                                     **({"record_map": task.record_map} if task.record_map else {}))


def run_task(task: MeasureTask) -> MeasureResult:
    """Read, validate and count one range; write its records part file (atomically)."""
    use_cache_root(task.check_table or None)  # a Ray worker finds the run's load recipes (load_recipe)
    family = load_model(task.model_dir, task.processor)
    table = open_table(task.check_table or None)
    t0 = time.perf_counter()
    stats = ReadStats()
    valid: list[Sample] = []
    rejections: list[Rejection] = []
    sink = get_sink(task.layout)
    for rec in read_records(task, stats):
        if isinstance(rec, Rejection):
            rejections.append(rec)
            continue
        checked = validate_sample(rec, check=task.media_check, family=family, media_root=task.media_root,
                                  allow_absolute_media=task.allow_absolute_media,
                                  max_media_bytes=task.max_media_bytes, table=table)
        if not isinstance(checked, Rejection) and (problem := sink.sample_problem(checked)) is not None:
            checked = Rejection(checked.locator, problem[0], problem[1], checked.id)
        (rejections if isinstance(checked, Rejection) else valid).append(checked)
    if table is not None:
        table.flush()
    t1 = time.perf_counter()
    valid, rej_long, kept_max, skipped_min = skip_overlong_texts(text_bound_of(task.model_dir), valid,
                                                                 task.token_limit)
    counted, rej = count_samples(family, valid, task.special_tokens)
    split = SplitStats()
    if task.split_limit:  # --overlong split: a longer conversation becomes pieces cut at turns
        counted, rej = split_overlong(counted, rej, task.split_limit,
                                      lambda xs: count_samples(family, xs, task.special_tokens), split)
    counted, rej_fp, fps = _fingerprints(counted)
    t2 = time.perf_counter()
    rejections.extend(rej_long + rej + rej_fp)
    rejections.sort(key=lambda r: r.locator.line)
    rec_offset = np.zeros(len(counted), dtype=np.int64)
    rec_len = np.zeros(len(counted), dtype=np.int64)
    blobs, pos = [], 0
    for i, s in enumerate(counted):
        entry, media = record_lines(s, [fps[m.path].sha256 for m in s.media], task.special_tokens)
        blobs += [entry, b"\n", media, b"\n"]
        rec_offset[i], rec_len[i] = pos, len(entry)
        pos += len(entry) + len(media) + 2
        if (fields := sink.entry_fields(s)) is not None:  # the layout's own fields: a third line
            blobs += [fields, b"\n"]
            pos += len(fields) + 1
    part = b"".join(blobs)
    atomic_write(part_path(task.records_dir, task.index), part)
    media_files = sorted((fps[p] for p in {m.path for s in counted for m in s.media}), key=lambda fp: fp.ref)
    return MeasureResult(
        index=task.index, file_idx=task.file_idx, ids=pa.array([s.id for s in counted], pa.string()),
        num_tokens=np.array([s.num_tokens for s in counted], dtype=np.int32),
        media_tokens=np.array([sum(m.num_tokens for m in s.media) for s in counted], dtype=np.int32),
        kind_tokens=sample_kind_tokens(s.media for s in counted),
        num_media=np.array([len(s.media) for s in counted], dtype=np.int32),
        kind=np.array([KIND_CODE[s.kind] for s in counted], dtype=np.int8),
        media_bytes=np.array([sum(m.nbytes for m in s.media) for s in counted], dtype=np.int64),
        line=np.array([s.locator.line for s in counted], dtype=np.int64),
        offset=np.array([s.locator.offset for s in counted], dtype=np.int64),
        rec_offset=rec_offset, rec_len=rec_len,
        id_kind=np.array([ID_KINDS.index(s.id_kind) for s in counted], dtype=np.int8),
        id_hash=id_key_hashes([s.id for s in counted], [ID_KINDS.index(s.id_kind) for s in counted]),
        label_tokens=np.array([s.label_tokens for s in counted], dtype=np.int32),
        media_files=media_files, media_sha256=media_files_sha256(media_files),
        rejections=rejections, stats=stats, seconds_read=t1 - t0, seconds_count=t2 - t1,
        part_sha256=hashlib.sha256(part).hexdigest(), part_size=len(part),
        bound_counted_max=kept_max, bound_skipped_min=skipped_min, split=split.as_dict(),
    )
