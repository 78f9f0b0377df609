"""The ``Source`` protocol: what one input format module provides (see :mod:`vlmpack.sources`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from vlmpack.records import MAX_MEMBER_BYTES, ReadStats, Rejection, Sample

#: A task: ``(start, end, first)``: what one pool task reads of one input file. The meaning is the
#: format's (JSONL: a line-aligned byte range and the number of its first line; a tar shard: a byte
#: range of whole samples and the position of its first sample; Parquet/Arrow: a range of row
#: groups / record batches and the number of its first row). ``end == -1``: to the end.
Task = tuple[int, int, int]


@runtime_checkable
class Source(Protocol):
    """One input format. Implementations are stateless; tasks are pure functions of their values,
    so the records (and the output) do not depend on how tasks are spread over workers."""

    #: the format's name: the registry key and the value of ``--input-format``
    name: str
    #: what the number of a :class:`~vlmpack.records.Locator` of this format counts:
    #: ``"line"``, ``"sample"`` or ``"row"``
    unit: str

    def sniff(self, head: bytes) -> bool:
        """True when the first bytes (up to 4 KiB) of a file are this format (magic bytes)."""

    def check(self, path: str) -> None:
        """Refuse a file this format cannot read, with one :class:`~vlmpack.errors.InputError` line."""

    def split(self, path: str, target_bytes: int) -> list[Task]:
        """Tasks covering the file once, in order, each about ``target_bytes`` of input (bounded
        memory per task). Raises :class:`~vlmpack.errors.InputError` for a truncated/corrupt file."""

    def read(self, path: str, start: int, end: int, first: int, *, schema: str = "auto", media_root: str = ".",
             allow_absolute_media: bool = False, stats: ReadStats | None = None,
             lmdb_envs: dict[str, str] | None = None, text_key: str | None = None,
             record_map: str | None = None, max_member_bytes: int = MAX_MEMBER_BYTES) -> Iterator[Sample | Rejection]:
        """One :class:`~vlmpack.records.Sample` or :class:`~vlmpack.records.Rejection` (with a
        reason code of :data:`vlmpack.records.REASONS`) per record of the task, in input order;
        never raises for a bad record, raises :class:`~vlmpack.errors.InputError` (one line) for a
        file that breaks while being read. ``stats`` counts lines/records/parse rejections.
        ``max_member_bytes`` (``--max-member-bytes``): a format whose records are members of a
        container (a WebDataset ``json`` part) rejects a larger one unread (``member_too_large``);
        formats without such members take it and have nothing to apply it to."""
