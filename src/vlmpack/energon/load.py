"""Loading a vlmpack output through Megatron-Energon's own loader, with its failures caught.

:func:`iter_energon_packs` runs one epoch of ``get_train_dataset(OUT, repeat=False)`` (no
shuffle); :class:`ErrorLog` is an Energon error handler that records, instead of printing a
traceback and skipping, every sample Energon fails on (shard, key, one-line error); used by
``vlmpack check`` (:mod:`vlmpack.check`). :func:`energon_view` is what the gates hand Energon
instead of ``OUT`` itself: Energon imports and runs what ``.nv-meta`` names, so the gates give it
vlmpack's own metadata bytes and only the shards of ``OUT``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vlmpack.energon.meta import write_metadata
from vlmpack.errors import ConfigError
from vlmpack.packfmt import split_member


@contextlib.contextmanager
def energon_view(out_dir: str | Path, shard_counts: dict[str, int], dataset_files: dict[str, bytes]
                 ) -> Iterator[Path]:
    """A temporary folder for Energon to load instead of ``out_dir``, removed on exit: its
    ``.nv-meta/`` is written by :func:`vlmpack.energon.meta.write_metadata` from ``shard_counts``
    (shard file name -> packs) and ``dataset_files`` (the output layout's bytes), never copied from
    ``out_dir``, and each shard and its ``.idx`` is a symbolic link to ``out_dir``'s (a missing one
    dangles, and Energon says so). The caller checks first that ``out_dir``'s ``.nv-meta`` equals
    these bytes and that every shard is a regular file of ``out_dir``; Energon then loads the
    output's data with vlmpack's own loader. Raises ``ValueError`` for a shard name that is not a
    plain file name, ``OSError`` when the folder cannot be made."""
    out = Path(out_dir).absolute()
    if any("/" in n or n in ("", ".", "..") for n in shard_counts):
        raise ValueError("shard names must be plain file names")
    with tempfile.TemporaryDirectory(prefix="vlmpack-energon-") as tmp:
        view = Path(tmp)
        write_metadata(view, shard_counts, dataset_files)
        for name in shard_counts:
            for n in (name, name + ".idx"):
                os.symlink(out / n, view / n)
        yield view


@contextlib.contextmanager
def frozen_gc() -> Iterator[None]:
    """While the block runs, the objects alive at its start are left out of Python's garbage
    collection (``gc.freeze()``; ``gc.unfreeze()`` at the end, however the block ends).

    Energon's loader runs full collections: ``BasicDataLoader.__init__`` calls ``gc.collect()``,
    ``GcDataset`` collects at the start of each pass and every 10 samples, and each forked worker
    walks ``gc.get_objects()`` (``gc_init_worker``). In a process that has imported torch and
    transformers (400,000+ objects; a test process holds millions) each full collection takes
    0.2-1 s: measured over the test suite, 90 % of the time of the ``vlmpack check`` Energon pass
    was spent collecting. Frozen objects are skipped by all of these (and by the forked workers,
    which inherit the frozen set), so they only visit what the pass itself creates. Objects that
    become garbage in cycles while frozen are collected after the block. Blocks do not nest: the
    end of any block unfreezes every object (as Energon's own ``GcDataset`` does at the end of a pass).
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def iter_energon_packs(out_dir: str | Path, *, num_workers: int = 2, error_handler=None, auto_decode: bool = False):
    """Yield the packs of ``out_dir`` through Energon's own loader, one epoch, no shuffle.

    ``auto_decode=False`` (default): ``pack.media`` holds the raw bytes of each part (decode them
    with :func:`vlmpack.train.encode.open_image`, which opens only the accepted image formats);
    ``True`` lets Energon's default decoder turn them into tensors (it opens any format PIL has).

    ``error_handler(exception, sample, sources)`` replaces Energon's default one (which prints a
    traceback and skips the sample). Garbage collection skips the objects alive before the pass
    while it runs (:func:`frozen_gc`). Raises :class:`ConfigError` without megatron-energon and
    whatever Energon raises for an unloadable dataset.
    """
    try:
        from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    except ImportError:
        raise ConfigError("checking with Energon needs megatron-energon: pip install 'vlmpack[train]'") from None
    wc = WorkerConfig.default_worker_config(num_workers=num_workers)
    if error_handler is not None:
        wc.global_error_handler = error_handler
    ds = get_train_dataset(str(out_dir), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
                           worker_config=wc, repeat=False, auto_decode=auto_decode)
    with frozen_gc():
        yield from get_loader(ds)


class ErrorLog:
    """Energon error handler appending ``{"shard", "key", "error"}`` JSON lines to ``path`` (so it
    works from loader worker processes; picklable for any start method)."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, e: Exception, sample, sources=None) -> None:
        raw = sample
        if not isinstance(raw, dict) and isinstance(getattr(raw, "data", None), (tuple, list)) and raw.data:
            raw = raw.data[0]  # RawSampleData: the sample's tar parts with __key__ / __shard__
        get = raw.get if isinstance(raw, dict) else lambda k: getattr(raw, k, None)
        src = (sources or get("__sources__") or [None])[0]
        key, shard = get("__key__"), get("__shard__") or getattr(src, "shard_name", None)
        if key is None and src is not None and src.file_names:
            key = split_member(str(src.file_names[0]))[0]
        part = getattr(e, "k", None)  # webdataset's DecodingError names the part (and has no message)
        msg = one_line(e.__cause__ if e.__cause__ is not None and not str(e) else e)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"shard": shard, "key": key, "error": (f"part {part}: " if part else "") + msg}) + "\n")


def one_line(e: BaseException) -> str:
    """``Type: message`` on one line (a DataLoader worker's wrapped exception: its last line)."""
    lines = [x.strip() for x in re.sub(r" ?<[^<>]* at 0x[0-9a-f]+>", "", str(e)).splitlines() if x.strip()]
    last, name = (lines[-1] if lines else ""), type(e).__name__
    return last if last.split(":", 1)[0].endswith(name) else f"{name}: {last}" if last else name
