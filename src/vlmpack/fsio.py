"""File-system edges shared by every layer: atomic writes, canonical JSON bytes, printable paths.

Every file vlmpack writes into an output goes through :func:`atomic_write` (a temporary file in
the same folder, fsynced, renamed into place, folder fsynced), so a kill at any point leaves
either the old file or the new one, never a part. A file that cannot be read or parsed counts as
missing (:func:`read_json` returns ``None``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (temp + fsync + rename + fsync of the
    parent folder). Raises ``OSError`` (ENOSPC, EROFS, EACCES, ...) with ``filename`` set."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    _atomic(Path(path), write)


def atomic_write_parquet(path: str | Path, table) -> None:
    """:func:`atomic_write` for a pyarrow table written as Parquet straight to the temp file
    (no in-memory copy of the serialized table). Raises ``OSError`` like :func:`atomic_write`."""
    import pyarrow.parquet as pq

    _atomic(Path(path), lambda tmp: pq.write_table(table, tmp))


def _atomic(path: Path, write) -> None:
    """``write(tmp)`` fills ``path``'s temp file; then fsync, rename over ``path``, fsync the folder.
    The temp file is removed on ``OSError``, which is raised with ``filename`` set."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if e.filename is None:
            e.filename = str(path)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: str | Path) -> None:
    """``fsync`` a folder so a rename in it is durable (best effort where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def json_bytes(obj, **kwargs) -> bytes:
    """``json.dumps(obj, ensure_ascii=False)`` as UTF-8; a string holding a lone surrogate (which
    UTF-8 cannot encode) is written with ``\\uXXXX`` escapes instead of crashing."""
    text = json.dumps(obj, ensure_ascii=False, **kwargs)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, **kwargs).encode("ascii")


def read_json(path: str | Path):
    """The JSON content of ``path``, or ``None`` when it is missing, empty or not valid JSON."""
    try:
        return json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None


def printable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as one printable line: bytes of a non-UTF-8 name (surrogate escapes in ``str``)
    as ``\\xNN`` and control or other non-printable characters escaped. Never raises."""
    text = os.fsdecode(path)
    try:
        text = os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeError:  # a lone surrogate that is no escaped byte
        text = text.encode("utf-8", "backslashreplace").decode("ascii")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
