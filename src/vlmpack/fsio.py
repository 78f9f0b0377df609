"""File-system edges shared by every layer: atomic writes, canonical JSON bytes, printable paths,
and reading or deleting inside an output without following a symbolic link.

Every file vlmpack writes into an output goes through :func:`atomic_write` (a temporary file in
the same folder, fsynced, renamed into place, folder fsynced), so a kill at any point leaves
either the old file or the new one, never a part. A file that cannot be read or parsed counts as
missing (:func:`read_json` returns ``None``).

State that vlmpack reads back (the run directory, the count cache) is data only: JSON, Arrow and
NumPy without pickles, never code. A JSON state file is *sealed* (:func:`sealed_json_bytes`: its
own sha256 under :data:`CHECKSUM`), other files are named with their sha256 in a sealed file; a
file whose checksum does not match counts as missing (:func:`read_sealed_json`, :func:`file_sha256`).

vlmpack writes no symbolic link into an output, so it follows none there: :func:`open_inside`
opens a regular file under a root with no link at any step (:class:`LinkRefused` otherwise),
:func:`links_under` names the links among paths vlmpack would write, and :func:`remove_regular`
deletes a file only when ``lstat`` says it is a regular one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

#: ``--cache-dir`` / ``$VLMPACK_CACHE`` values that turn the shared cache off.
CACHE_OFF = ("", "off", "none")
#: The environment variable naming the shared cache root (count cache, model load recipes).
ENV_CACHE = "VLMPACK_CACHE"


def cache_root(value: str | None = None) -> Path | None:
    """The shared cache root: ``value`` (``--cache-dir``), else ``$VLMPACK_CACHE``, else
    ``~/.cache/vlmpack/counts``; ``None`` when the value is one of :data:`CACHE_OFF`. The count
    cache keeps each count key in ``<root>/<key>/``, the model load recipes in ``<root>/load/``
    (:mod:`vlmpack.models.load_recipe`), the report's PNGs in ``<root>/figures/``
    (:func:`vlmpack.pack.report_figures.shared_png_cache`)."""
    value = value if value is not None else os.environ.get(ENV_CACHE)
    if value is None:
        return Path.home() / ".cache" / "vlmpack" / "counts"
    if value.strip().lower() in CACHE_OFF:
        return None
    return Path(value).expanduser()


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (temp + fsync + rename + fsync of the
    parent folder). Raises ``OSError`` (ENOSPC, EROFS, EACCES, ...) with ``filename`` set."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    _atomic(Path(path), write)


def atomic_write_stream(path: str | Path, fill: Callable[[BinaryIO], None]) -> None:
    """:func:`atomic_write` of what ``fill(f)`` writes to the open (binary, seekable) temp file: no
    in-memory copy of the content. Raises ``OSError`` like :func:`atomic_write`."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            fill(f)

    _atomic(Path(path), write)


def atomic_write_parquet(path: str | Path, table, row_group_size: int | None = None, *,
                         use_dictionary: bool = True, data_page_size: int | None = None,
                         after_row_group: Callable[[], None] | None = None) -> None:
    """:func:`atomic_write` for a pyarrow table written as Parquet straight to the temp file
    (no in-memory copy of the serialized table). ``use_dictionary`` and ``data_page_size`` (bytes)
    are ``pyarrow.parquet.ParquetWriter``'s; with ``row_group_size`` the table is written one row
    group of that many rows at a time, ``after_row_group()`` called after each (e.g. to return
    the writer's freed buffers to the OS). Raises ``OSError`` like :func:`atomic_write`."""
    import pyarrow.parquet as pq

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(tmp, table.schema, use_dictionary=use_dictionary, data_page_size=data_page_size) as w:
            step = row_group_size or max(table.num_rows, 1)
            for a in range(0, table.num_rows, step):  # none for an empty table: the schema only
                w.write_table(table.slice(a, step), row_group_size=step)
                if after_row_group is not None:
                    after_row_group()

    _atomic(Path(path), write)


def _atomic(path: Path, write) -> None:
    """``write(tmp)`` fills ``path``'s temp file; then fsync, rename over ``path``, fsync the folder.
    The temp file is removed on ``OSError``, which is raised with ``filename`` set."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with contextlib.suppress(FileNotFoundError):  # a leftover (or a planted link) is replaced, never followed
            os.unlink(tmp)
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
    """The JSON content of ``path``, or ``None`` when it is missing, empty or not valid JSON (nested
    too deep for the parser included)."""
    try:
        return json.loads(Path(path).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


#: The key of a sealed JSON object that holds the sha256 (hex) of the rest (:func:`sealed_json_bytes`).
CHECKSUM = "checksum"


def _seal(body: dict) -> str:
    return hashlib.sha256(json_bytes(body, sort_keys=True, separators=(",", ":"))).hexdigest()


def sealed_json_bytes(obj: dict, **kwargs) -> bytes:
    """``obj`` (a dict without the key :data:`CHECKSUM`) as JSON bytes (:func:`json_bytes`,
    ``kwargs`` passed on) with ``"checksum"``: the sha256 (hex) of ``obj``'s canonical JSON (sorted
    keys, no spaces). :func:`read_sealed_json` gives ``obj`` back only while that still matches, so
    an edit of any value, also one that keeps the file's length, makes the file count as missing.
    Raises ``ValueError`` when ``obj`` already has the key."""
    if CHECKSUM in obj:
        raise ValueError(f"a sealed JSON object must not have a {CHECKSUM!r} key of its own")
    return json_bytes({**obj, CHECKSUM: _seal(obj)}, **kwargs)


def read_sealed_json(path: str | Path) -> dict | None:
    """The object of a file written from :func:`sealed_json_bytes` (without its checksum), or
    ``None`` when the file is missing, is no JSON object, has no checksum or one that does not match
    its content. Never raises."""
    return unseal(read_json(path))


def unseal(obj) -> dict | None:
    """The object of a parsed sealed JSON value (:func:`sealed_json_bytes`) without its checksum, or
    ``None`` when ``obj`` is no object, has no checksum or one that does not match. For a reader that
    bounds its own reads (``vlmpack check``: :func:`read_inside`). Never raises."""
    if not isinstance(obj, dict) or not isinstance(obj.get(CHECKSUM), str):
        return None
    body = {k: v for k, v in obj.items() if k != CHECKSUM}
    try:
        ok = _seal(body) == obj[CHECKSUM]
    except (TypeError, ValueError):  # pragma: no cover - anything json.loads gives can be dumped again
        return None
    return body if ok else None


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> tuple[str, int]:
    """``(sha256 hex, size in bytes)`` of the file at ``path``, read in ``chunk``-byte pieces (bounded
    memory; about 1.7 GB/s on one core with the CPU's SHA instructions). Raises ``OSError``."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while data := f.read(chunk):
            h.update(data)
            size += len(data)
    return h.hexdigest(), size


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


class LinkRefused(OSError):
    """A symbolic link (or another non-regular entry) where vlmpack reads or writes a file of its
    own: never followed. ``filename`` is the path, ``strerror`` the one-line reason."""

    def __init__(self, path: str | Path, what: str = "a symbolic link; vlmpack writes none and follows none"):
        super().__init__(errno.ELOOP, what, str(path))

    def __str__(self) -> str:
        return f"{printable_path(self.filename)} is {self.strerror}"


def _parts(rel: str | Path) -> list[str]:
    """The components of ``rel``, a relative path that stays below its root (``ValueError`` else)."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in (".", "..") for p in parts):
        raise ValueError(f"{printable_path(rel)} is not a path inside the output")
    return list(parts)


def open_inside(root: str | Path, rel: str | Path, max_bytes: int | None = None) -> BinaryIO:
    """Open the regular file ``root/rel`` for reading (binary) without following a symbolic link
    at any component of ``rel`` (``root`` itself is the caller's choice and may be one).

    Raises :class:`LinkRefused` for a link or a non-regular file (a FIFO is never waited on),
    ``ValueError`` for a ``rel`` that leaves ``root`` (absolute, ``..``) or a file of more than
    ``max_bytes`` bytes, and ``OSError`` (``FileNotFoundError``, ...) as ``open`` does."""
    parts, path = _parts(rel), Path(root) / rel
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError as e:
                if _is_link(name, fd):
                    raise LinkRefused(Path(root, *parts[:i + 1])) from None
                e.filename = str(path)
                raise
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LinkRefused(path, "not a regular file; vlmpack reads only the files it writes")
        if max_bytes is not None and st.st_size > max_bytes:
            raise ValueError(f"{printable_path(path)} is {st.st_size:,} bytes, more than the {max_bytes:,} vlmpack "
                             "reads of such a file")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def read_inside(root: str | Path, rel: str | Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``root/rel`` (:func:`open_inside`: no link followed, at most
    ``max_bytes`` bytes, else ``ValueError``; ``OSError`` as ``open``)."""
    with open_inside(root, rel, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while read
        raise ValueError(f"{printable_path(Path(root) / rel)} is more than the {max_bytes:,} bytes vlmpack reads "
                         "of such a file")
    return data


def links_under(root: str | Path, rels) -> list[Path]:
    """The paths ``root/rel`` (for each ``rel`` of ``rels``, relative) that are, or pass through, a
    symbolic link below ``root``, in order; missing paths are not links. Never raises for a path
    that cannot be examined (it is left out)."""
    found: list[Path] = []
    for rel in rels:
        p = Path(root)
        for name in Path(rel).parts:
            p = p / name
            try:
                if stat.S_ISLNK(os.lstat(p).st_mode):
                    found.append(p)
                    break
            except OSError:
                break
    return found


def remove_regular(path: str | Path) -> bool:
    """Delete ``path`` if ``lstat`` says it is a regular file (never a link's target, never a
    folder); returns whether it was deleted. Raises ``OSError`` when the deletion fails."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except FileNotFoundError:
        return False
    os.unlink(path)
    return True
