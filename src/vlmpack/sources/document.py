"""What the whole-file sources share: a file that is one document holding a list of records (a JSON
array, a CSV table, a YAML list), parsed at once and read as one task.

Such a file has no record boundaries that a byte range could split on without parsing it, so it is
one task and its memory is the file's parsed size (for datasets of millions of records prefer JSONL,
Parquet or WebDataset, which are split into bounded tasks). A file that does not parse as its format
stops the run with one :class:`~vlmpack.errors.InputError` line naming it (checked once per input
before any task starts, like a cut compressed JSONL file); each record of a file that parses is a
:class:`~vlmpack.records.Sample` or a :class:`~vlmpack.records.Rejection` with a reason, through the
same :func:`vlmpack.readers.jsonl.record_to_sample` as a JSONL line. Nothing read is executed (YAML:
``yaml.safe_load``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vlmpack.errors import InputError
from vlmpack.fsio import printable_path
from vlmpack.readers.jsonl import record_to_sample
from vlmpack.records import Locator, ReadStats, Rejection


@dataclass(frozen=True)
class BadRecord:
    """A record of a file that parses but that cannot be one (a CSV cell that looks like JSON and
    is none): it becomes a rejection with ``reason`` (of :data:`vlmpack.records.REASONS`) and ``detail``."""

    reason: str
    detail: str


class DocumentSource:
    """A whole-file source (a :class:`vlmpack.sources.base.Source`): subclasses give ``name``,
    ``unit``, ``suffixes`` and :meth:`records`."""

    name = ""
    unit = "sample"  # a record's position in the file, 1-based
    #: file name endings detected as this format (their content has no magic bytes)
    suffixes: tuple[str, ...] = ()

    @staticmethod
    def records(data: bytes) -> list[tuple[object, int]]:
        """``[(record, byte offset of its start or 0)]`` of a whole file; ``ValueError`` (one line)
        for bytes that are not this format or not a list of records."""
        raise NotImplementedError

    @staticmethod
    def sniff(head: bytes) -> bool:  # noqa: ARG004 - told by its name, see ``suffixes``
        return False

    def _parse(self, path: str) -> list[tuple[object, int]]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"cannot read input {printable_path(path)}: {e.strerror or e}") from None
        try:
            return self.records(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise InputError(f"{printable_path(path)} is not a {self.name} file of records ({detail})") from None

    def check(self, path: str) -> None:
        """Refuse a file that does not parse as a list of records (one :class:`InputError` line)."""
        self._parse(path)

    @staticmethod
    def split(path: str, target_bytes: int) -> list[tuple[int, int, int]]:  # noqa: ARG004
        """One task: the whole file (module docstring)."""
        return [(0, -1, 1)]

    def read(self, path: str, start: int, end: int, first: int, *, schema: str = "auto", media_root: str = ".",
             allow_absolute_media: bool = False, stats: ReadStats | None = None,
             lmdb_envs: dict[str, str] | None = None, text_key: str | None = None,
             record_map: str | None = None, max_member_bytes: int | None = None) -> Iterator:
        """One Sample or Rejection per record, numbered from 1 in file order (``start``/``end``/
        ``first`` are the one task's); media references resolve as JSONL's (``media_root``,
        ``allow_absolute_media``, ``lmdb_envs``). A record is no container member, so
        ``max_member_bytes`` does not apply."""
        del start, end, first, max_member_bytes
        stats = stats if stats is not None else ReadStats()
        for no, (obj, offset) in enumerate(self._parse(path), start=1):
            stats.lines += 1
            stats.records += 1
            loc = Locator(path, no, offset, None, self.unit)
            if isinstance(obj, BadRecord):
                res = Rejection(loc, obj.reason, obj.detail)
            else:
                res = record_to_sample(obj, loc, schema=schema, media_root=media_root,
                                       allow_absolute_media=allow_absolute_media, lmdb_envs=lmdb_envs,
                                       text_key=text_key, record_map=record_map)
            if isinstance(res, Rejection):
                stats.reasons[res.reason] = stats.reasons.get(res.reason, 0) + 1
            yield res
