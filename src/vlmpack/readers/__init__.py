"""Readers: raw records -> canonical :class:`~vlmpack.records.Sample` | :class:`~vlmpack.records.Rejection`.

JSONL only for now (:mod:`vlmpack.readers.jsonl`: plain, ``.gz``, ``.zst``; schemas in
:mod:`vlmpack.readers.schemas`). All functions are module-level and picklable, for process pools.
"""

from __future__ import annotations

from vlmpack.readers.jsonl import compression, iter_lines, open_stream, parse_record, read_range, split_ranges
from vlmpack.readers.schemas import SCHEMAS, RecordError, detect_schema, to_canonical

__all__ = [
    "SCHEMAS",
    "RecordError",
    "compression",
    "detect_schema",
    "iter_lines",
    "open_stream",
    "parse_record",
    "read_range",
    "split_ranges",
    "to_canonical",
]
