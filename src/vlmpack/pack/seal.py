"""The hash record of a finished run, ``OUT/.vlmpack/hashes.json``: the sha256 of every file ``check`` compares.

``vlmpack pack`` writes it last (after ``report.json`` and ``report.html``), sealed
(:func:`vlmpack.fsio.sealed_json_bytes`)::

    {"format": "vlmpack.hashes/1",
     "files": {"report.json": {"sha256": "<hex>", "size": 2210}, "rejects.jsonl": {...},
               ".vlmpack/config.json": {...}, ".vlmpack/manifest.parquet": {...}, ".vlmpack/plan.npz": {...},
               "shard-000000.tar": {...}, "shard-000000.tar.idx": {...}, ...},
     "checksum": "<hex>"}

Names are relative to ``OUT`` (sizes in bytes). ``report.json`` cannot hold its own sha256, so the
record is a file of the run directory; each sample's content sha256 is in its shard's marker
(:attr:`vlmpack.pack.write.ShardResult.content_sha256`). ``vlmpack check`` hashes every file again
(:mod:`vlmpack.check.content`). What this proves: the output is the one its own run record
describes. A seal is no signature: whoever can rewrite the files and the run record consistently
is not caught (docs/check.md, "What check and verify prove").
"""

from __future__ import annotations

from pathlib import Path

from vlmpack.fsio import atomic_write, file_sha256, sealed_json_bytes
from vlmpack.pack.rundir import RUN_DIR

#: The ``format`` of the hash record.
FORMAT = "vlmpack.hashes/1"
#: The hash record's file name in the run directory.
HASHES = "hashes.json"
#: The files of ``OUT`` (relative names) that every finished run records, besides each shard and its ``.tar.idx``.
RECORDED = ("report.json", "rejects.jsonl", f"{RUN_DIR}/config.json", f"{RUN_DIR}/manifest.parquet",
            f"{RUN_DIR}/plan.npz")


def recorded_names(shards: list[str]) -> list[str]:
    """The relative names the hash record of an output with ``shards`` (file names) holds, in order."""
    return [*RECORDED, *(x for name in sorted(shards) for x in (name, name + ".idx"))]


def hash_record(out: Path, shards: list[str]) -> dict:
    """The hash record's object (unsealed) for the files of ``out`` now. Raises ``OSError`` for a
    file that cannot be read."""
    files = {}
    for name in recorded_names(shards):
        sha, size = file_sha256(out / name)
        files[name] = {"sha256": sha, "size": size}
    return {"format": FORMAT, "files": files}


def write_hashes(out: Path, shards: list[str]) -> None:
    """Write ``out/.vlmpack/hashes.json`` (sealed, atomic) for the files of ``out`` as they are now.
    Raises ``OSError``."""
    atomic_write(out / RUN_DIR / HASHES, sealed_json_bytes(hash_record(out, shards), indent=1))
