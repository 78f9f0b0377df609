"""``--dedup exact``: samples with the same content, whatever their ids, are packed once.

A sample's content is its entry as the count stage serialized it (:func:`vlmpack.packfmt.sample_entry`:
the canonical messages with media as parts, the tools, each media item's kind, size and tokens)
without ``id``, ``id_kind`` and ``source``, and the sha256 of each media item's bytes in order (not its
path: the same image under two names is the same content). Its key is the 128-bit BLAKE2b of both
(:func:`vlmpack.packfmt.content_key`, which ``vlmpack check`` computes again from the shards).
Between the count and the plan stage, the first sample of each key in input order is kept; every
later one is rejected ``duplicate_content`` with the kept sample's id and place in the detail, so
``records read = packed + rejected + dropped overlong`` still holds.

Cost: one read and JSON parse of every sample's entry in the run's records part files, on the
driver (``bench/bench_dedup.py`` prints its rows at 10^6 samples: 16.9 s on this machine).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from vlmpack.pack.count_task import part_path, read_entry
from vlmpack.pack.manifest import InputFiles
from vlmpack.packfmt import content_key
from vlmpack.records import Rejection


def content_keys(manifest: pa.Table, records_dir) -> list[bytes]:
    """The :func:`vlmpack.packfmt.content_key` of every manifest row (columns ``part``, ``rec_offset``, ``rec_len``,
    ``num_tokens``), read from the records part files in ``records_dir``, one file open at a time."""
    part, off, length, ntok = (manifest.column(c).to_numpy() for c in ("part", "rec_offset", "rec_len",
                                                                         "num_tokens"))
    keys: list[bytes] = [b""] * len(part)
    order = np.argsort(part, kind="stable")
    bounds = np.flatnonzero(np.diff(part[order])) + 1
    for rows in np.split(order, bounds) if len(order) else []:
        with open(part_path(records_dir, int(part[rows[0]])), "rb") as fh:
            for i in rows.tolist():
                e = read_entry(fh, int(off[i]), int(length[i]), int(ntok[i]))
                keys[i] = content_key(json.loads(e.entry), [m[0] for m in e.media])
    return keys


def first_copies(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the later copies, the position of each one's first copy), int64, ascending:
    the first of equal keys in list order is the one kept."""
    first: dict[bytes, int] = {}
    dups, firsts = [], []
    for i, k in enumerate(keys):
        j = first.setdefault(k, i)
        if j != i:
            dups.append(i)
            firsts.append(j)
    return np.asarray(dups, dtype=np.int64), np.asarray(firsts, dtype=np.int64)


def dedup_exact(inputs: InputFiles, manifest: pa.Table, records_dir) -> tuple[pa.Table, list[Rejection]]:
    """``manifest`` without the later copies of equal content (module docstring), and their
    rejections ``duplicate_content`` (detail: the kept sample's id and locator)."""
    dups, firsts = first_copies(content_keys(manifest, records_dir))
    if not len(dups):
        return manifest, []
    ids, fidx, line, off = (manifest.column(c) for c in ("id", "file_idx", "line", "offset"))
    out = []
    for i, f in zip(dups.tolist(), firsts.tolist()):
        loc = inputs.locator(fidx[i].as_py(), line[i].as_py(), off[i].as_py())
        kept = inputs.locator(fidx[f].as_py(), line[f].as_py(), 0)
        out.append(Rejection(loc, "duplicate_content", f"same content as sample {ids[f].as_py()!r} at {kept}",
                             ids[i].as_py()))
    keep = np.ones(manifest.num_rows, dtype=bool)
    keep[dups] = False
    return manifest.filter(pa.array(keep)), out
