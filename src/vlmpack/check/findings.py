"""What one ``vlmpack check`` run has found so far: the problem lines and what the records and the
tars hold, shared by the steps of :mod:`vlmpack.check` (records, shards, Energon load)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vlmpack.fsio import read_inside
from vlmpack.packfmt import loads_json
from vlmpack.sinks import Sink, sink_of

#: The most bytes read of a record file of ``OUT`` (``report.json``, ``.info.json``, run-dir JSON).
MAX_RECORD_BYTES = 64 << 20


@dataclass
class Findings:
    """The state of one check of ``out``.

    ``problems``: one-line findings, in the order found. From the records: ``report``
    (``report.json``), ``counts`` (``.info.json`` ``shard_counts``: shard -> packs), ``meta_ok``
    (``.nv-meta`` complete: Energon may load it), ``expected`` (the run dir's manifest
    ``(kind, id)`` -> ``num_tokens``, overlong samples left out; None without it). From the tars:
    ``keys`` (every key found -> its shard), ``packs`` (key -> (shard, ``(kind, id)`` of its
    samples)), ``totals`` (``packs``, ``samples``, ``tokens``, ``bytes``) and ``token_diffs``
    (samples whose ``num_tokens`` differs from the manifest's). ``load_ok``: False once something
    was found that Energon must not be handed (a symbolic link, a member over its size limit, a
    shard name that is no file of ``out``, a count of packs no shard's bytes can hold). From the run
    record (:mod:`vlmpack.check.content`): ``hashes`` (``hashes.json``: relative name -> ``{"sha256",
    "size"}``; None without it), ``records_at`` (``(kind, id)`` -> ``(task, rec_offset, rec_len,
    num_media)`` of its count record), ``content_lines`` (sample content problems found),
    ``open_records`` (count record files open), ``records_broken`` (a count record could not be read).
    ``sink``: the output layout, :func:`vlmpack.sinks.sink_of` (its ``dataset.yaml`` compared, never run).
    ``progress``: called ``progress(label, advance, total)`` as packs are read (a progress bar), or None."""

    out: Path
    problems: list[str] = field(default_factory=list)
    report: dict | None = None
    counts: dict[str, int] | None = None
    meta_ok: bool = False
    load_ok: bool = True
    expected: dict[tuple[str, str], int] | None = None
    keys: dict[str, str] = field(default_factory=dict)
    packs: dict[str, tuple[str, list[tuple[str, str]]]] = field(default_factory=dict)
    totals: Counter[str] = field(default_factory=Counter)
    token_diffs: list[str] = field(default_factory=list)
    loads: list[tuple[int, int]] = field(default_factory=list)  # (vision tokens, tokens) per pack, output order
    content_keys: dict[bytes, str] | None = None  # --dedup exact (report.json dedup): content key -> first id
    hashes: dict | None = None
    records_at: dict[tuple[str, str], tuple[int, int, int, int]] | None = None
    content_lines: int = 0
    open_records: dict = field(default_factory=dict)
    records_broken: bool = False
    sink: Sink = field(init=False)  # the output's layout (vlmpack.sinks.sink_of: its dataset.yaml compared)
    progress: Callable[[str, int, int | None], None] | None = None

    def __post_init__(self) -> None:
        self.sink = sink_of(self.out)

    def add(self, msg: str) -> None:
        """Record one problem line."""
        self.problems.append(msg)

    def tick(self, label: str, advance: int = 1, total: int | None = None) -> None:
        """Tell :attr:`progress` (when given) that ``advance`` more packs of step ``label`` are done."""
        if self.progress is not None:
            self.progress(label, advance, total)


def eg(items: list, n: int = 3) -> str:
    """The first ``n`` items as ``"a, b, c, ..."`` (problem lines name a few examples)."""
    return ", ".join(str(x) for x in items[:n]) + (", ..." if len(items) > n else "")


def is_int(v) -> bool:
    """An ``int`` that is not a ``bool`` (JSON counts)."""
    return isinstance(v, int) and not isinstance(v, bool)


def read_json(out: Path, rel: str):
    """The JSON value of the UTF-8 file ``out/rel``, read without following a symbolic link and
    at most :data:`MAX_RECORD_BYTES` bytes (:func:`vlmpack.fsio.read_inside`), nesting bounded
    (:func:`vlmpack.packfmt.loads_json`). Raises ``OSError`` (:class:`vlmpack.fsio.LinkRefused`
    for a link) / ``ValueError``."""
    return loads_json(read_inside(out, rel, MAX_RECORD_BYTES))
