"""Content fingerprints of media items: what the count cache and the writer compare.

A media item (a file, a tar member, a Parquet cell, an LMDB value or inline bytes,
:mod:`vlmpack.media.ref`) is identified by the sha256 of its bytes, never by its size and mtime
alone: a file replaced in place can keep both (``cp new.png a.png && touch -r old.png a.png``).
:func:`fingerprint` hashes the whole item once, when it is counted (about 1.7 GB/s on one core with
the CPU's SHA instructions; the demo set's 1,845 images, 119 MB, hash in 0.25 s, against 13 s of
counting).

So that a resume or a count cache hit does not read every media file again, a fingerprint also
records the stat of the file that holds the item (:attr:`Fingerprint.stat`: size, mtime, ctime and
inode number, the rule of git's index): while that stat is unchanged the recorded sha256 is taken
as it is (:func:`unchanged`), otherwise the bytes are hashed again and compared. ``ctime`` cannot
be set from user space: every write, ``utime``, rename into place, ``chmod`` or new link moves it,
and a file put in place of another has another inode. A stat is recorded only when it was the
same before and after the bytes were hashed and its ctime lies more than :data:`RACY_NS` before
the end of hashing (git's "racily clean" rule: a write in the same timestamp tick right after
hashing would not move it); otherwise the item is hashed again at every check.

:func:`read_checked` is the writer's read: the media-root rule again, then the bytes, which must
have the counted sha256. Errors are :class:`vlmpack.errors.MediaError` with a reason code.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

from vlmpack.errors import MediaError
from vlmpack.media.ref import (
    DATA,
    InlineBytes,
    LmdbValue,
    ParquetCell,
    TarMember,
    display_ref,
    is_member,
    open_ref,
    parse_ref,
    read_ref,
)
from vlmpack.media.resolve import check_real_path

#: A stat younger than this (ns, against the clock when hashing ended) is not recorded (see above).
RACY_NS = 2_000_000_000
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What was counted of one media item: its reference, ``nbytes`` (the item's size in bytes),
    ``sha256`` (hex, of the item's bytes) and ``stat``: ``(size in bytes, mtime in ns, ctime in ns,
    inode)`` of the file holding it when it was hashed, or ``None`` (hash again at every check)."""

    ref: str
    nbytes: int
    sha256: str
    stat: tuple[int, int, int, int] | None = None

    def to_json(self) -> list:
        """``[ref, nbytes, sha256, stat or null]`` (the form kept in count results)."""
        return [self.ref, self.nbytes, self.sha256, list(self.stat) if self.stat is not None else None]

    @classmethod
    def from_json(cls, value) -> Fingerprint:
        """The inverse of :meth:`to_json`; raises ``ValueError`` for anything else (a damaged file)."""
        if not (isinstance(value, list) and len(value) == 4 and isinstance(value[0], str)
                and _is_int(value[1]) and isinstance(value[2], str) and len(value[2]) == 64):
            raise ValueError(f"not a media fingerprint: {str(value)[:80]}")
        st = value[3]
        if st is not None and not (isinstance(st, list) and len(st) == 4 and all(_is_int(x) for x in st)):
            raise ValueError(f"not a media fingerprint stat: {str(st)[:80]}")
        return cls(value[0], value[1], value[2], tuple(st) if st is not None else None)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def holder_stat(ref: str) -> tuple[int, int, int, int] | None:
    """``(size, mtime_ns, ctime_ns, inode)`` of the file that holds the item of ``ref`` (the file, the
    tar archive, the Parquet file, the LMDB env's data file); ``None`` for inline ``data:`` bytes
    (the reference is the content). Raises ``OSError`` / ``ValueError`` (malformed reference)."""
    parsed = parse_ref(ref)
    if isinstance(parsed, InlineBytes):
        return None
    if isinstance(parsed, TarMember):
        path = parsed.archive
    elif isinstance(parsed, ParquetCell):
        path = parsed.file
    elif isinstance(parsed, LmdbValue):
        path = os.path.join(parsed.env, "data.mdb") if os.path.isdir(parsed.env) else parsed.env
    else:
        path = parsed
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def item_sha256(ref: str) -> tuple[str, int]:
    """``(sha256 hex, size in bytes)`` of the item's bytes, read in 1 MiB pieces (a loose file or a
    tar member: bounded memory). Raises ``OSError``, ``EOFError`` (a truncated archive),
    ``ValueError`` or :class:`MediaError` as :func:`vlmpack.media.ref.open_ref` does."""
    h, n = hashlib.sha256(), 0
    with open_ref(ref) as f:
        while data := f.read(_CHUNK):
            h.update(data)
            n += len(data)
    return h.hexdigest(), n


def fingerprint(ref: str) -> Fingerprint:
    """The :class:`Fingerprint` of the item of ``ref`` now (its bytes are read once). Raises like
    :func:`item_sha256`."""
    before = holder_stat(ref)
    sha, n = item_sha256(ref)
    after = holder_stat(ref)
    keep = after is not None and before == after and after[2] < time.time_ns() - RACY_NS
    return Fingerprint(ref, n, sha, after if keep else None)


def unchanged(fp: Fingerprint) -> bool:
    """True when the item of ``fp.ref`` still has the counted bytes: inline bytes always; else the
    holder's stat equals the recorded one, or the bytes hashed now have the recorded sha256 and size.
    False when it cannot be read. Never raises."""
    if fp.ref.startswith(DATA):
        return True
    try:
        if fp.stat is not None and holder_stat(fp.ref) == fp.stat:
            return True
        return item_sha256(fp.ref) == (fp.sha256, fp.nbytes)
    except (OSError, EOFError, ValueError, MediaError):
        return False


def read_checked(ref: str, sha256: str, *, media_root: str | None = None, allow_absolute_media: bool = False,
                 kind: str = "media") -> bytes:
    """The bytes of the item of ``ref`` for a shard, checked again as they are read: a loose file's
    ``realpath`` must still lie inside ``media_root`` (unless ``allow_absolute_media`` or no root;
    :func:`vlmpack.media.resolve.check_real_path`), and the bytes must have the counted ``sha256``.
    Raises :class:`MediaError`: ``media_outside_root``, ``media_missing`` (cannot be read any more)
    or ``media_changed`` (other bytes than the counted ones; ``kind`` names the item in the detail)."""
    if media_root is not None and not allow_absolute_media and not is_member(ref):
        check_real_path(ref, media_root, kind)
    try:
        data = read_ref(ref)
    except (OSError, EOFError, ValueError) as e:
        raise MediaError("media_missing", f"{kind} {display_ref(ref)} cannot be read any more after it was "
                         f"counted ({' '.join(str(e).split())})") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise MediaError("media_changed", f"{kind} {display_ref(ref)} changed after it was counted (sha256 "
                         f"{got[:16]}... of {len(data)} bytes, counted {sha256[:16]}...); run the same command "
                         "again to count it again")
    return data
