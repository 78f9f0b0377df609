"""Readers: raw records -> canonical :class:`~vlmpack.records.Sample` | :class:`~vlmpack.records.Rejection`.

JSONL only for now (:mod:`vlmpack.readers.jsonl`: plain, gzip, zstd, xz, bzip2, detected by content;
content sniffing in :mod:`vlmpack.readers.sniff`, applied once per input by :func:`sniff_input`).
Record layouts (llava, messages, prompts) live in :mod:`vlmpack.layouts`; ``SCHEMAS``,
``detect_schema`` and ``to_canonical`` are re-exported from there. All functions are module-level
and picklable, for process pools.
"""

from __future__ import annotations

from vlmpack.layouts import SCHEMAS, detect_schema, to_canonical
from vlmpack.readers.jsonl import iter_lines, parse_record, read_range, sniff_input, split_ranges
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
