"""JSONL reader: plain, gzip, zstd, xz or bzip2 files -> :class:`Sample` | :class:`Rejection`, with locators.

Work is split into line-aligned byte ranges (:func:`split_ranges`, plain files only; a compressed
file is one task) that process-pool workers read independently (:func:`read_range`). Everything is
module-level and picklable. Compression is detected from the file's magic bytes
(:func:`vlmpack.readers.sniff.codec_of`), not from its name.

Integrity: a compressed file is read member by member (gzip members, zstd frames, xz streams,
bzip2 streams, any number of them concatenated) and must end exactly at the end of a complete
member; a file cut inside one, corrupt data (a failed CRC/checksum, an invalid block) or trailing
bytes that are not another member raise :class:`InputError` naming the file, the line and the
decompressed byte offset reached (never a silent partial read; zero padding after a gzip member
or an xz stream is allowed, as ``gzip`` and ``xz`` do). Limits: a file cut exactly between two
members is a valid shorter file and cannot be told apart; a bit flip in a zstd frame written
without a content checksum (``zstd`` writes one by default, ``ZstdCompressor()`` does not) can go
undetected (:func:`~vlmpack.readers.sniff.sniff_input` logs a warning when the first frame has
none). :func:`~vlmpack.readers.sniff.sniff_input` refuses a file whose content is clearly not
JSONL (a tar, zip, Parquet, image, binary ...) before it is read as lines.

Per-line rules: the line's bytes without ``"\\n"``; a UTF-8 BOM at the start of *any* line and a
trailing ``"\\r"`` are stripped; a line that is empty or whitespace only (after the BOM) is *blank*
and not a record (:attr:`ReadStats.blank`). Everything else is a record and yields exactly one
Sample or Rejection: :func:`parse_record` never raises.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import IO

from vlmpack.errors import InputError, MediaError, RecordError, StreamError
from vlmpack.fsio import printable_path
from vlmpack.layouts import SCHEMAS, record_tools, to_canonical
from vlmpack.media.resolve import resolve_ref
from vlmpack.readers.sniff import sniff_input
from vlmpack.readers.streams import broken_message, compression, open_stream
from vlmpack.records import Locator, Media, ReadStats, Rejection, Sample

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_READ_BLOCK = 4 << 20


def split_ranges(path: str, target_bytes: int = 8 << 20) -> list[tuple[int, int, int]]:
    """Line-aligned work ranges ``(start, end, first_line_no)`` covering ``path``.

    Plain files: each range ends just after the first ``"\\n"`` at or after ``start + target_bytes - 1``
    (so ranges hold >= ``target_bytes`` bytes except the last), ``end`` is exclusive and the last
    range ends at the file size (a last line without ``"\\n"`` is included); ``first_line_no`` is
    1-based. An empty file gives ``[(0, 0, 1)]``. Reads the whole file once (counts newlines).
    Compressed files: ``[(0, -1, 1)]`` (one task; ``-1`` = to the end of the stream). Does not
    look at the content: :func:`sniff_input` does (once per input, before tasks are made).
    Raises :class:`InputError` (unreadable file), ``ValueError`` (``target_bytes < 1``).
    """
    if target_bytes < 1:
        raise ValueError(f"target_bytes must be >= 1, got {target_bytes}")
    if compression(path) is not None:
        return [(0, -1, 1)]
    ranges: list[tuple[int, int, int]] = []
    start, first_line, newlines, pos = 0, 1, 0, 0
    target = target_bytes
    with open(path, "rb") as fh:
        while block := fh.read(_READ_BLOCK):
            i = 0
            while target - 1 < pos + len(block):
                j = block.find(b"\n", max(i, target - 1 - pos))
                if j < 0:
                    break
                newlines += block.count(b"\n", i, j + 1)
                end = pos + j + 1
                ranges.append((start, end, first_line))
                start, first_line, target = end, newlines + 1, end + target_bytes
                i = j + 1
            newlines += block.count(b"\n", i)
            pos += len(block)
    if start < pos or not ranges:
        ranges.append((start, pos, first_line))
    return ranges


def iter_lines(
    path: str, start: int = 0, end: int = -1, first_line: int = 1
) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(line_no, byte_offset, raw)`` for the lines that *start* in ``[start, end)``.

    ``raw`` is the line without its ``"\\n"`` (a ``"\\r"`` or BOM is kept: :func:`parse_record`
    strips them); ``byte_offset`` is the line's first byte in the decompressed stream;
    ``start`` must be a line start (``0`` or a value from :func:`split_ranges`) and ``first_line``
    its 1-based line number; ``end=-1`` reads to the end. Compressed streams are read from their
    beginning (bytes before ``start`` are decompressed and skipped).
    Raises :class:`InputError` for an unreadable input, or a compressed one that is truncated or
    corrupt (one line: the file, the last complete line, the decompressed byte offset reached);
    the lines before the break have been yielded by then, so a caller must treat the error as
    fatal for the whole file.
    """
    line_no, offset = first_line, start
    try:
        with open_stream(path) as fh:
            if start:
                if fh.seekable() and compression(path) is None:
                    fh.seek(start)
                else:
                    _skip(fh, start)
            for line in fh:
                if end >= 0 and offset >= end:
                    break
                raw = line[:-1] if line.endswith(b"\n") else line
                yield line_no, offset, raw
                line_no += 1
                offset += len(line)
    except StreamError as e:
        raise InputError(broken_message(path, e, line_no, offset)) from None
    except OSError as e:
        raise InputError(
            f"cannot read {printable_path(path)} after line {line_no - 1} (byte {offset}): {e.strerror or e}; "
            "check the file and the disk"
        ) from None


def parse_record(
    raw: bytes,
    locator: Locator,
    *,
    schema: str = "auto",
    media_root: str = ".",
    allow_absolute_media: bool = False,
    resolve_media=None,
    lmdb_envs: dict[str, str] | None = None,
    text_key: str | None = None,
    record_map: str | None = None,
) -> Sample | Rejection:
    """Turn one raw line into a :class:`Sample` (canonical messages, media with resolved ``path``,
    header fields still 0) or a :class:`Rejection`; never raises for any input bytes.
    ``resolve_media(ref) -> str`` replaces the media-root resolution (an archive source maps part
    names to :mod:`vlmpack.media.ref` references; it raises ``MediaError`` for an unknown one).
    ``lmdb_envs``: the ``--media-lmdb`` stores (name -> env path) for ``lmdb://NAME/KEY`` references.
    ``text_key``: the key of the turns (``--text-key``, :func:`vlmpack.layouts.native.normalize_native`);
    ``record_map``: a registry's column and tag mapping (:mod:`vlmpack.layouts.mapping`).

    Steps and reason codes: strip BOM / trailing ``"\\r"``; UTF-8 (``not_utf8``, also for JSON
    ``\\uD800``-style lone surrogate escapes, which cannot be written back as UTF-8); JSON
    (``invalid_json``); an object (``not_an_object``); ``id`` int or non-empty str (``wrong_type``
    otherwise; absent or ``null`` -> ``f"{file}:{line}"`` with ``has_own_id=False``); schema and
    structural checks of :func:`vlmpack.layouts.to_canonical`; media references resolved
    lexically by :func:`vlmpack.media.resolve.resolve_ref`. Any unexpected exception becomes a
    ``wrong_type`` rejection with a one-line detail. ``ValueError`` only for an unknown ``schema``.
    The byte-level steps (to ``not_utf8`` / ``invalid_json``) are done here, once; the parsed value goes
    to :func:`record_to_sample`, the object-level entry that sources holding a parsed record call.
    """
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    try:
        if raw.startswith(_BOM):
            raw = raw[3:]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return Rejection(
                locator,
                "not_utf8",
                f"invalid UTF-8 byte(s) {raw[e.start : e.end]!r} at byte {e.start}",
                _salvage_id(raw),
            )
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            return Rejection(locator, "invalid_json", f"invalid JSON: {e.msg} at column {e.colno}")
        except RecursionError:
            return Rejection(locator, "invalid_json", "JSON nested too deeply to parse")
        except ValueError as e:  # e.g. an integer literal longer than Python's int/str digit limit
            return Rejection(locator, "invalid_json", f"invalid JSON: {_short(str(e))}")
    except Exception as e:  # noqa: BLE001 - one bad record must never stop a run
        return _unexpected(locator, e, None)
    return record_to_sample(
        obj,
        locator,
        schema=schema,
        media_root=media_root,
        allow_absolute_media=allow_absolute_media,
        resolve_media=resolve_media,
        lmdb_envs=lmdb_envs,
        text_key=text_key,
        record_map=record_map,
        check_surrogates=_SURROGATE_ESCAPE.search(raw) is not None,
    )


def record_to_sample(
    obj: object,
    locator: Locator,
    *,
    schema: str = "auto",
    media_root: str = ".",
    allow_absolute_media: bool = False,
    resolve_media=None,
    lmdb_envs: dict[str, str] | None = None,
    text_key: str | None = None,
    record_map: str | None = None,
    check_surrogates: bool = True,
) -> Sample | Rejection:
    """The object-level half of :func:`parse_record`, for a record already parsed (a JSONL line
    by :func:`parse_record`, a WebDataset ``.json`` part, a Parquet row as plain JSON values):
    the same checks, reasons and details from ``not_an_object`` on (see :func:`parse_record`),
    never raises except ``ValueError`` for an unknown ``schema``. ``obj`` is used, not copied
    (``to_canonical`` may keep parts of it). ``check_surrogates``: look for lone UTF-16
    surrogates in its strings (keys included; ``not_utf8``); False only when the caller knows
    there can be none (:func:`parse_record` saw no ``\\uD8..``-``\\uDF..`` escape in the line)."""
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    rid: str | None = None
    try:
        if not isinstance(obj, dict):
            return Rejection(
                locator, "not_an_object", f"top-level JSON value is a {type(obj).__name__}, not an object"
            )
        own = obj.get("id")
        if own is not None:
            if isinstance(own, bool) or not isinstance(own, (int, str)) or own == "":
                return Rejection(
                    locator, "wrong_type", f"'id' must be an int or a non-empty string, got {_short(own)}"
                )
            rid = str(own)
        if check_surrogates and _has_lone_surrogate(obj):
            return Rejection(
                locator, "not_utf8", "a string holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF)", rid
            )
        messages, refs = to_canonical(obj, schema, text_key, record_map)
        media = [
            Media(
                kind=kind,
                ref=ref,  # type: ignore[arg-type]
                path=resolve_media(ref) if resolve_media is not None
                else resolve_ref(ref, media_root, allow_absolute_media=allow_absolute_media, lmdb_envs=lmdb_envs),
            )
            for kind, ref in refs
        ]
        tools = record_tools(obj)
        if rid is None:
            return Sample(str(locator), messages, media, locator, has_own_id=False, tools=tools)
        return Sample(rid, messages, media, locator, id_kind="int" if isinstance(own, int) else "str", tools=tools)
    except (RecordError, MediaError) as e:
        return Rejection(locator, e.reason, e.detail, rid)
    except RecursionError:
        return Rejection(locator, "wrong_type", "record nested too deeply", rid)
    except Exception as e:  # noqa: BLE001 - one bad record must never stop a run
        return _unexpected(locator, e, rid)


def _unexpected(locator: Locator, e: Exception, rid: str | None) -> Rejection:
    logger.debug("unexpected error parsing %s", locator, exc_info=True)
    return Rejection(locator, "wrong_type", f"unexpected {type(e).__name__}: {_short(str(e))}", rid)


def read_range(
    path: str,
    start: int = 0,
    end: int = -1,
    first_line: int = 1,
    *,
    schema: str = "auto",
    media_root: str = ".",
    allow_absolute_media: bool = False,
    stats: ReadStats | None = None,
    lmdb_envs: dict[str, str] | None = None,
    text_key: str | None = None,
    record_map: str | None = None,
) -> Iterator[Sample | Rejection]:
    """Parse the records of one range of ``path`` (see :func:`split_ranges`); one result per
    non-blank line, in file order. Updates ``stats`` (``lines``, ``blank``, ``records`` and
    ``reasons`` of the *parse* rejections; validation rejections are counted by the caller).
    Raises :class:`InputError` for an unreadable/corrupt input file, never for a bad record."""
    stats = stats if stats is not None else ReadStats()
    for line_no, offset, raw in iter_lines(path, start, end, first_line):
        stats.lines += 1
        body = raw[3:] if raw.startswith(_BOM) else raw
        if not body.strip():
            stats.blank += 1
            continue
        stats.records += 1
        result = parse_record(
            raw,
            Locator(path, line_no, offset),
            schema=schema,
            media_root=media_root,
            allow_absolute_media=allow_absolute_media,
            lmdb_envs=lmdb_envs,
            text_key=text_key,
            record_map=record_map,
        )
        if isinstance(result, Rejection):
            stats.reasons[result.reason] = stats.reasons.get(result.reason, 0) + 1
        yield result


def _skip(fh: IO[bytes], nbytes: int) -> None:
    while nbytes > 0:
        chunk = fh.read(min(nbytes, _READ_BLOCK))
        if not chunk:
            return
        nbytes -= len(chunk)


def _salvage_id(raw: bytes) -> str | None:
    """The ``id`` of a line that is not UTF-8, read with replacement characters, if any."""
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
        own = obj.get("id") if isinstance(obj, dict) else None
        return str(own) if isinstance(own, (int, str)) and not isinstance(own, bool) and own != "" else None
    except Exception:  # noqa: BLE001 - best effort only
        return None


def _has_lone_surrogate(obj: object) -> bool:
    """Whether a string of ``obj`` (dict keys included, any depth) holds a lone UTF-16 surrogate,
    i.e. cannot be encoded as UTF-8: the decision ``json.dumps(obj, ensure_ascii=False)
    .encode("utf-8")`` made, without writing the text. Iterative (no depth limit)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def _short(value: object, limit: int = 120) -> str:
    text = " ".join(str(value).split()) if isinstance(value, str) else " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "iter_lines",
    "parse_record",
    "read_range",
    "record_to_sample",
    "sniff_input",
    "split_ranges",
]
