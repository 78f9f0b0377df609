"""The YAML source: a ``.yaml`` / ``.yml`` file whose document is one list of records (LMMS-Engine's
YAML inputs).

Detected by name (no magic bytes). Parsed with PyYAML's ``safe_load`` (``CSafeLoader`` when PyYAML
has its C extension): plain data only, no tag constructs or runs anything. Values YAML reads as
other types than JSON has (dates, timestamps) become their ``str``. The locator is ``{"file",
"sample": position (1-based), "offset": 0}``. One task per file (:mod:`vlmpack.sources.document`)."""

from __future__ import annotations

import datetime

from vlmpack.sources.document import DocumentSource


def _plain(v: object) -> object:
    """``v`` with JSON's types only (a date or timestamp becomes its ``str``; mapping keys ``str``)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, (datetime.date, datetime.datetime, datetime.time)):
        return str(v)
    return v


class YamlSource(DocumentSource):
    """A YAML file holding one list of records (module docstring)."""

    name = "yaml"
    suffixes = (".yaml", ".yml")

    @staticmethod
    def records(data: bytes) -> list[tuple[object, int]]:
        """The list's items (``ValueError`` for a YAML error or a document that is no list)."""
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            doc = yaml.load(data, Loader=loader)  # noqa: S506 - a safe loader: plain data only
        except yaml.YAMLError as e:
            raise ValueError(" ".join(str(e).split())) from None
        if not isinstance(doc, list):
            raise ValueError(f"the document is a {type(doc).__name__}, not a list of records")
        return [(_plain(x), 0) for x in doc]
