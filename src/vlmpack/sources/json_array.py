"""The JSON-array source: a ``.json`` file whose value is one array of records (what
``json.dump(records, f)``, LLaMA-Factory's ``data/*.json`` and LMMS-Engine's JSON inputs hold).

Detected by content: the first byte after a UTF-8 BOM and white space is ``[``. Each element is a
record in any layout of :mod:`vlmpack.layouts`; its locator is ``{"file", "sample": position
(1-based), "offset": byte offset of the element}``. Parsed with the standard library's
``json.JSONDecoder.raw_decode`` element by element (the offsets), so the records are those of
``json.loads``. One task per file (:mod:`vlmpack.sources.document`)."""

from __future__ import annotations

import json

from vlmpack.sources.document import DocumentSource

_WS = " \t\n\r"


class JsonArraySource(DocumentSource):
    """A JSON file holding one array of records (module docstring)."""

    name = "json"
    suffixes = (".json",)

    @staticmethod
    def sniff(head: bytes) -> bool:
        """``[`` is the first byte after a BOM and white space."""
        return head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1] == b"["

    @staticmethod
    def records(data: bytes) -> list[tuple[object, int]]:
        """The elements of the array with the byte offset of each (``ValueError`` for another value)."""
        text = data.decode("utf-8").removeprefix("\ufeff")
        i = len(text) - len(text.lstrip(_WS))
        if text[i:i + 1] != "[":
            raise ValueError("the file does not hold a JSON array")
        decoder, out, i = json.JSONDecoder(), [], i + 1
        pos_bytes, pos_chars = len(data) - len(text.encode("utf-8")), 0  # BOM bytes; chars already measured
        while True:
            while i < len(text) and text[i] in _WS:
                i += 1
            if text[i:i + 1] == "]" and not out:
                break
            obj, j = decoder.raw_decode(text, i)
            pos_bytes += len(text[pos_chars:i].encode("utf-8"))
            pos_chars = i
            out.append((obj, pos_bytes))
            i = j
            while i < len(text) and text[i] in _WS:
                i += 1
            if text[i:i + 1] == ",":
                i += 1
                continue
            if text[i:i + 1] == "]":
                break
            raise ValueError(f"expected ',' or ']' at character {i}")
        if text[i + 1:].strip(_WS):
            raise ValueError(f"extra data after the array at character {i + 1}")
        return out
