"""Input sources: one module per format behind one interface, and the registry that picks one.

A source (:class:`vlmpack.sources.base.Source`) turns one input file into bounded tasks and
each task into records::

    split(path, target_bytes) -> [(start, end, first), ...]   # what one pool task reads
    read(path, start, end, first, *, schema, media_root, allow_absolute_media, stats, lmdb_envs,
         text_key) -> Iterator[Sample | Rejection]            # one result per record, never raises
                                                              # for a bad record
    check(path) -> None                                       # refuse a file it cannot read (one line)

``start``/``end``/``first`` mean what the format needs (JSONL: a line-aligned byte range and its
first line number; a tar shard: a byte range of whole samples and the first sample's position).
Tasks are pure functions of these values, so the output does not depend on the workers.

Formats (:data:`SOURCES`): ``jsonl`` (:mod:`vlmpack.sources.jsonl`: plain / gz / zst / xz / bz2),
``wds`` (:mod:`vlmpack.sources.wds`: uncompressed WebDataset tar shards, read in place),
``parquet`` (:mod:`vlmpack.sources.parquet`: Parquet / Arrow IPC tables, tasks = row-group ranges,
images read in place from their cells) and the whole-file documents of
:mod:`vlmpack.sources.document`: ``json`` (:mod:`~vlmpack.sources.json_array`: one JSON array),
``csv`` (:mod:`~vlmpack.sources.csv_table`) and ``yaml`` (:mod:`~vlmpack.sources.yaml_list`).
:func:`detect_format` sniffs the content; ``--input-format`` forces one.

Adding a format: write ``vlmpack/sources/<name>.py`` with a class that satisfies
:class:`~vlmpack.sources.base.Source` and add one line to :data:`SOURCES` (CONTRIBUTING.md).
"""

from __future__ import annotations

from vlmpack.errors import ConfigError, InputError
from vlmpack.sources.base import Source
from vlmpack.sources.csv_table import CsvSource
from vlmpack.sources.json_array import JsonArraySource
from vlmpack.sources.jsonl import JsonlSource
from vlmpack.sources.parquet import ParquetSource
from vlmpack.sources.wds import WdsSource
from vlmpack.sources.yaml_list import YamlSource

#: The registry: format name -> source. Detection tries their magic bytes in order, then the name
#: endings of those without any (``suffixes``); ``jsonl`` is the fallback.
SOURCES: dict[str, Source] = {"wds": WdsSource(), "parquet": ParquetSource(), "json": JsonArraySource(),
                              "csv": CsvSource(), "yaml": YamlSource(), "jsonl": JsonlSource()}
#: Values of ``--input-format``.
INPUT_FORMATS = ("auto", *SOURCES)


def detect_format(path: str) -> str:
    """The format of ``path`` from its first bytes (a tar header -> ``wds``, ``PAR1`` / Arrow ->
    ``parquet``, ``[`` -> ``json``), else from its name (``.csv`` -> ``csv``, ``.yaml`` / ``.yml`` ->
    ``yaml``), else ``jsonl``, whose own check refuses what is not JSONL. Raises :class:`InputError`
    when unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise InputError(f"cannot open input {path}: {e.strerror or e}; check the path") from None
    for name, source in SOURCES.items():
        if name != "jsonl" and source.sniff(head):
            return name
    lower = path.lower()
    for name, source in SOURCES.items():
        if name != "json" and lower.endswith(getattr(source, "suffixes", ())):
            return name
    return "jsonl"


def get_source(fmt: str) -> Source:
    """The source of format ``fmt``; :class:`ConfigError` for an unknown name."""
    try:
        return SOURCES[fmt]
    except KeyError:
        raise ConfigError(f"unknown input format {fmt!r}; use one of {', '.join(INPUT_FORMATS)}") from None


def resolve_format(path: str, fmt: str = "auto") -> str:
    """``fmt``, or the detected format of ``path`` for ``"auto"``."""
    return detect_format(path) if fmt == "auto" else get_source(fmt).name


def check_input(path: str, fmt: str = "auto") -> str:
    """Detect (or take) the format of ``path`` and let its source refuse what it cannot read;
    returns the format name. Raises :class:`InputError` (one line)."""
    name = resolve_format(path, fmt)
    get_source(name).check(path)
    return name


__all__ = ["INPUT_FORMATS", "SOURCES", "Source", "check_input", "detect_format", "get_source", "resolve_format"]
