"""The media check table: each distinct media content is checked once, across workers and runs.

The default media check (``--media-check verify``: PIL's ``load()`` verdict by the cheapest equivalent
check, :func:`vlmpack.media.image.check_decodes`) is the costliest step of counting an image
sample (about 3.3 ms an image, mostly PNG inflate). Its verdict and the header facts
(:class:`~vlmpack.media.kinds.MediaInfo`: size after EXIF orientation, format; videos' frames,
duration, fps) depend on the bytes alone, so a :class:`CheckTable` keeps them by the sha256 of the
item's bytes (:func:`vlmpack.media.fingerprint.item_sha256`, about 1.7 GB/s), the media kind, the
check level and :func:`rules` (this package's media code, Pillow's and PyAV's versions and PIL's
decompression-bomb limit: a change of any of them checks everything again). Only accepted items are
kept: a rejection is checked again at every run (its detail names the path; rejections are rare).

The table is one SQLite file (Python's ``sqlite3``, write-ahead log: readers and writers of several
processes and runs at once) in the count cache root (:func:`vlmpack.pack.stages.count_cache_dir`,
``media-checks.sqlite3``), so a second run, another model or another dataset that reuses the images
decodes none of them again; ``--cache-dir off`` keeps none. Rows are data (JSON numbers and
strings, checked when read); nothing read from the table is executed. The table is an aid: any
SQLite error (a read-only cache, a damaged file) logs one warning and the run goes on checking
every item itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sqlite3
from pathlib import Path

from vlmpack.media.kinds import MediaInfo

logger = logging.getLogger(__name__)

#: File name of the table in the count cache root.
TABLE_NAME = "media-checks.sqlite3"
#: Rows buffered before they are written in one transaction (also written at :meth:`CheckTable.flush`).
FLUSH_ROWS = 256

_SCHEMA = ("CREATE TABLE IF NOT EXISTS checks (sha256 TEXT NOT NULL, kind TEXT NOT NULL, level TEXT NOT NULL, "
           "rules TEXT NOT NULL, info TEXT NOT NULL, PRIMARY KEY (sha256, kind, level, rules)) WITHOUT ROWID")
# a number is kept as the probe gave it (JSON keeps 30 and 30.0 apart): the packs' JSON stays byte-identical
_FIELDS = {"width": int, "height": int, "format": str, "nbytes": int, "duration_s": (int, float, type(None)),
           "fps": (int, float, type(None)), "frames": (int, type(None))}


@functools.lru_cache(maxsize=1)
def rules() -> str:
    """What a verdict depends on besides the bytes: sha256 (hex, 16 chars) of this package's media
    code (every ``.py`` of :mod:`vlmpack.media`), Pillow's and PyAV's versions and
    ``PIL.Image.MAX_IMAGE_PIXELS``. Raises ``OSError`` only when the package's files cannot be read."""
    import PIL
    from PIL import Image

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    try:
        import av

        av_version = av.__version__
    except ImportError:
        av_version = "none"
    return f"{h.hexdigest()[:16]} Pillow {PIL.__version__} av {av_version} bomb {Image.MAX_IMAGE_PIXELS}"


def _info(text: str) -> MediaInfo | None:
    """The :class:`MediaInfo` of a row's JSON, or None when it is not one (a damaged or edited row)."""
    try:
        d = json.loads(text)
    except ValueError:
        return None
    if not isinstance(d, dict) or set(d) != set(_FIELDS):
        return None
    if not all(isinstance(d[k], t) and not isinstance(d[k], bool) for k, t in _FIELDS.items()):
        return None
    return MediaInfo(**d)


class CheckTable:
    """The media check table at ``path`` (created on first use; see the module docstring). One
    instance per process (:func:`open_table`): ``sqlite3`` connections do not cross a fork."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._rules = rules()
        self._pending: dict[tuple[str, str, str], MediaInfo] = {}  # (sha256, kind, level): not yet written
        self._conn: sqlite3.Connection | None = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error:
            self._conn.close()
            raise

    def _off(self, e: sqlite3.Error) -> None:
        logger.warning("media check table %s cannot be used (%s); checking every media item", self.path, e)
        if self._conn is not None:
            self._conn.close()
        self._conn, self._pending = None, {}

    def get(self, sha256: str, kind: str, level: str) -> MediaInfo | None:
        """The :class:`MediaInfo` of an accepted item with the bytes of ``sha256`` (hex) checked as
        ``kind`` at ``level`` under the same :func:`rules`, or None (never checked, or the table
        is off). Never raises."""
        if self._conn is None:
            return None
        if (sha256, kind, level) in self._pending:
            return self._pending[sha256, kind, level]
        try:
            row = self._conn.execute("SELECT info FROM checks WHERE sha256=? AND kind=? AND level=? AND rules=?",
                                     (sha256, kind, level, self._rules)).fetchone()
        except sqlite3.Error as e:
            self._off(e)
            return None
        return _info(row[0]) if row else None

    def put(self, sha256: str, kind: str, level: str, info: MediaInfo) -> None:
        """Keep ``info``, the facts of an item accepted at ``level`` (written in batches of
        :data:`FLUSH_ROWS` and at :meth:`flush`). Never raises."""
        if self._conn is None:
            return
        self._pending[sha256, kind, level] = info
        if len(self._pending) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows (one transaction; a row already there is kept). Never raises."""
        if self._conn is None or not self._pending:
            return
        rows = [(*key, self._rules, json.dumps({k: getattr(info, k) for k in _FIELDS}, sort_keys=True))
                for key, info in self._pending.items()]
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("INSERT OR IGNORE INTO checks VALUES (?, ?, ?, ?, ?)", rows)
            self._pending = {}
        except sqlite3.Error as e:
            self._off(e)

    def close(self) -> None:
        """:meth:`flush`, then close the connection (the table is off from then on). Never raises."""
        self.flush()
        if self._conn is not None:
            self._conn.close()
        self._conn = None


_OPEN: dict[tuple[int, str], CheckTable | None] = {}


def open_table(root: str | Path | None) -> CheckTable | None:
    """This process's :class:`CheckTable` in the cache root ``root`` (``None``: no table; made with
    its parents when missing), or None when it cannot be opened (one warning). Never raises."""
    if root is None:
        return None
    key = (os.getpid(), str(root))
    if key not in _OPEN:
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            _OPEN[key] = CheckTable(Path(root) / TABLE_NAME)
        except (OSError, sqlite3.Error) as e:
            logger.warning("media check table in %s cannot be opened (%s); checking every media item", root, e)
            _OPEN[key] = None
    return _OPEN[key]


def prepare_table(root: str | Path | None) -> None:
    """Create the table file in the cache root ``root`` (write-ahead log mode and schema) and close
    it, before the workers that share it start: two processes switching a new file to WAL mode at
    once can get "database is locked" at once, SQLite's busy timeout notwithstanding (seen with two
    pool workers of one run: that worker then checked every media item itself). On a file already in
    WAL mode the switch takes no lock. Never raises: a failure is left to the workers (one warning
    each, :func:`open_table`)."""
    if root is None:
        return
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        CheckTable(Path(root) / TABLE_NAME).close()
    except (OSError, sqlite3.Error):
        pass


def close_tables() -> None:
    """Write what is buffered and close this process's tables; the next :func:`open_table` opens
    the file again (e.g. after it was replaced). Tables a parent process opened before forking this
    one are forgotten, never used or closed here (SQLite connections do not cross a fork)."""
    for (pid, _), table in _OPEN.items():
        if table is not None and pid == os.getpid():
            table.close()
    _OPEN.clear()
