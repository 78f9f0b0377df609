"""The CSV source: a table with a header row, one record per row (``pandas.DataFrame.to_csv``,
spreadsheet exports; LMMS-Engine's CSV inputs).

Detected by name (``.csv``: no magic bytes). Parsed by the standard library's ``csv``
(``csv.DictReader``, RFC 4180 quoting, so a cell may hold commas and line breaks). A cell whose
text starts with ``[`` or ``{`` holds JSON (a conversation column such as ``messages`` /
``conversations``, an ``images`` list) and is parsed as such; an empty cell is absent; any other
cell is a string (an ``images`` cell may name one path). A row whose JSON cell does not parse is
rejected ``invalid_json``, the run goes on. The locator is ``{"file", "row"}`` (1-based, the header
not counted). One task per file (:mod:`vlmpack.sources.document`)."""

from __future__ import annotations

import csv
import io
import json
import sys

from vlmpack.sources.document import BadRecord, DocumentSource


def _cell(column: str, text: str) -> object:
    """A cell's value: JSON when it starts like JSON (else a :class:`BadRecord`), else its text."""
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError as e:
            return BadRecord("invalid_json", f"column {column!r} starts like JSON but is none: {e}"[:300])
    return text


class CsvSource(DocumentSource):
    """A CSV table with a header row (module docstring)."""

    name = "csv"
    unit = "row"
    suffixes = (".csv",)

    @staticmethod
    def records(data: bytes) -> list[tuple[object, int]]:
        """The rows as records (offset 0: the row group of a table locator). ``ValueError`` for a
        file without a header row or with a row of more cells than the header."""
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a cell may hold a whole conversation
        reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""), restkey="\0extra")
        if not reader.fieldnames:
            raise ValueError("no header row")
        out = []
        for row in reader:
            if "\0extra" in row:
                raise ValueError(f"row {reader.line_num} has more cells than the header")
            rec = {k: _cell(k, v) for k, v in row.items() if v not in (None, "")}
            bad = next((v for v in rec.values() if isinstance(v, BadRecord)), None)
            out.append((bad or rec, 0))
        return out
