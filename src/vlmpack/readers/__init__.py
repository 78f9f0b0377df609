"""Readers: raw records -> canonical :class:`~vlmpack.records.Sample` | :class:`~vlmpack.records.Rejection`.

JSONL only for now (:mod:`vlmpack.readers.jsonl`: plain, gzip, zstd, xz, bzip2, detected by content;
schemas in :mod:`vlmpack.readers.schemas`; content sniffing in :mod:`vlmpack.readers.sniff`, applied
once per input by :func:`sniff_input`). All functions are module-level and picklable, for process pools.
"""

from __future__ import annotations

from vlmpack.readers.jsonl import iter_lines, parse_record, read_range, sniff_input, split_ranges
from vlmpack.readers.schemas import SCHEMAS, detect_schema, to_canonical
from vlmpack.readers.streams import compression, open_stream

__all__ = [
    "SCHEMAS",
    "compression",
    "detect_schema",
    "iter_lines",
    "open_stream",
    "parse_record",
    "read_range",
    "sniff_input",
    "split_ranges",
    "to_canonical",
]
