"""The JSONL source: plain, gzip, zstd, xz or bz2 files, one record per line.

The parsing rules (BOM, CRLF, blank lines, schemas, reason codes) live in
:mod:`vlmpack.readers.jsonl`; this module is its :mod:`vlmpack.sources` face.
"""

from __future__ import annotations

from vlmpack.readers.jsonl import read_range, split_ranges
from vlmpack.readers.sniff import sniff_input


class JsonlSource:
    """JSONL files: tasks are line-aligned byte ranges (a compressed file is one task)."""

    name = "jsonl"
    unit = "line"  # what a Locator's number counts

    @staticmethod
    def sniff(head: bytes) -> bool:  # noqa: ARG004 - the fallback format
        return True

    @staticmethod
    def check(path: str) -> None:
        """Refuse a file that is not JSONL by content (:func:`vlmpack.readers.sniff_input`); a
        compressed tar is refused with the WebDataset rule (shards are read in place, so uncompressed only)."""
        sniff_input(path, compressed_tar_rule=True)

    @staticmethod
    def split(path: str, target_bytes: int) -> list[tuple[int, int, int]]:
        """:func:`vlmpack.readers.split_ranges`."""
        return split_ranges(path, target_bytes)

    @staticmethod
    def read(path: str, start: int, end: int, first: int, *, max_member_bytes: int | None = None, **options):
        """:func:`vlmpack.readers.read_range` (options: ``schema``, ``media_root``,
        ``allow_absolute_media``, ``stats``, ``lmdb_envs``, ``text_key``, ``record_map``); a line is no container
        member, so ``max_member_bytes`` does not apply."""
        del max_member_bytes
        return read_range(path, start, end, first, **options)
