"""The report's figures around a run: the digest of what they show, their PNG cache, and drawing
them on a thread while the shards are written.

``OUT/report.html`` shows PNGs drawn by matplotlib (:mod:`vlmpack.pack.figures`, about 0.7 s for a
run of the 5,783 demo records). What they show depends on the manifest's token columns, the plan
and three entries of ``report.json`` (:func:`figures_digest`), all known once the plan is made;
the write stage changes them only when it leaves a sample out (its media changed after counting).
So the driver draws them (:class:`FiguresAhead`) while its write workers run, when it only waits
for them, and :func:`vlmpack.pack.report.write_report_html` takes the PNGs when the digest of the
finished run is the same (else it draws them again). Nothing here reaches the shards.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from vlmpack.fsio import atomic_write, cache_root, json_bytes, read_sealed_json, sealed_json_bytes
from vlmpack.pack.media_tokens import TOKEN_COLUMNS
from vlmpack.packing import PackPlan


def arrays_hash(manifest: pa.Table, plan: PackPlan):
    """The ``hashlib`` sha256 object over the arrays the report's figures show: the manifest's
    ``num_tokens``, ``kind``, ``media_tokens`` and per-kind token columns (int64) and the plan's arrays
    (about 40 bytes a sample). The write stage never changes them, so a run hashes them once and
    :func:`figures_digest` adds the report's part to a copy. Imports no matplotlib."""
    h = hashlib.sha256()
    for name in ("num_tokens", "kind", "media_tokens", *TOKEN_COLUMNS.values()):
        if name in manifest.column_names:  # a manifest of an older vlmpack lacks the later kinds' columns
            h.update(name.encode())
            h.update(manifest.column(name).to_numpy().astype(np.int64))  # its buffer: no bytes copy
    for arr in (plan.overlong, plan.offsets, plan.order, plan.pack_tokens):
        h.update(np.asarray(arr, dtype=np.int64).tobytes() + b"|")
    return h


def figures_digest(seq_len: int, arrays, report: dict) -> str:
    """sha256 (hex) of what the report's figures show: ``arrays`` (:func:`arrays_hash` of the
    manifest and plan; not changed), then ``seq_len`` (tokens) and ``report``'s ``rejected_by_reason``,
    ``dropped_overlong`` and ``sources``."""
    h = arrays.copy()
    h.update(json_bytes([seq_len, report.get("rejected_by_reason"), report.get("dropped_overlong"),
                         report.get("sources")], sort_keys=True))
    return h.hexdigest()


def read_png_cache(path: Path, digest: str) -> tuple[dict[str, bytes], dict[str, str]] | None:
    """``(pngs, captions)`` of the PNG cache at ``path`` when it matches its checksum, was made for
    ``digest`` and holds PNG bytes only; else ``None`` (drawn again)."""
    cached = read_sealed_json(path)
    if cached is None or cached.get("digest") != digest:
        return None
    pngs, captions = cached.get("pngs"), cached.get("captions")
    if not (isinstance(pngs, dict) and isinstance(captions, dict)
            and all(isinstance(v, str) for v in (*pngs.values(), *captions.values()))):
        return None
    try:
        raw = {str(name): base64.b64decode(b64, validate=True) for name, b64 in pngs.items()}
    except ValueError:
        return None
    if not all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in raw.values()):
        return None
    return raw, {str(k): v for k, v in captions.items()}


def write_png_cache(path: Path, digest: str, pngs: dict[str, bytes], captions: dict[str, str]) -> None:
    """Keep ``pngs`` (name -> PNG bytes) and their ``captions`` for ``digest`` in the sealed JSON file
    ``path`` (:func:`read_png_cache` reads it). Raises ``OSError``."""
    atomic_write(path, sealed_json_bytes({"digest": digest, "captions": captions,
                                          "pngs": {k: base64.b64encode(v).decode("ascii") for k, v in pngs.items()}}))


@lru_cache(maxsize=1)
def _drawing_code() -> str:
    """sha256 (hex) of the code that draws the figures (:mod:`vlmpack.pack.figures` and
    :mod:`vlmpack.pack.figure_layout`, read as bytes) and of matplotlib's version (its distribution's
    metadata: no import)."""
    from importlib.metadata import version

    h = hashlib.sha256(version("matplotlib").encode())
    for name in ("figures.py", "figure_layout.py"):
        h.update(b"\0" + (Path(__file__).parent / name).read_bytes())
    return h.hexdigest()


def shared_png_cache(cache_dir: str | None, digest: str) -> Path | None:
    """The PNG cache of figures with ``digest`` shared by every output of the cache root
    (:func:`vlmpack.fsio.cache_root` of ``--cache-dir``, the count cache's; ``None`` when it is off):
    ``<root>/figures/<key>.json``, ``key`` the sha256 of ``digest`` and of the drawing code
    (:func:`_drawing_code`: another vlmpack or matplotlib draws again). The same data packed into
    another output (or again with ``--overwrite``) takes its PNGs from there: the digest covers all
    that the figures show (:func:`figures_digest`), so they are the PNGs drawing would give."""
    root = cache_root(cache_dir)
    if root is None:
        return None
    key = hashlib.sha256(f"vlmpack-figures/{_drawing_code()}/{digest}".encode()).hexdigest()
    return root / "figures" / f"{key}.json"


def cached_pngs(png_cache: Path | None, cache_dir: str | None, digest: str) -> tuple[dict, dict] | None:
    """``(pngs, captions)`` for ``digest`` from the run's ``png_cache``, else from the shared one of
    ``cache_dir`` (:func:`shared_png_cache`; then also kept in ``png_cache``), else None. Raises ``OSError``."""
    shared = shared_png_cache(cache_dir, digest)
    for path in (png_cache, shared):
        cached = read_png_cache(path, digest) if path is not None else None
        if cached is not None:
            if path is shared and png_cache is not None:
                write_png_cache(png_cache, digest, *cached)
            return cached
    return None


def keep_pngs(png_cache: Path | None, cache_dir: str | None, digest: str, pngs: dict[str, bytes],
              captions: dict[str, str]) -> None:
    """Keep drawn PNGs in the run's ``png_cache`` (raises ``OSError``) and the shared one of ``cache_dir``
    (:func:`shared_png_cache`; skipped when it cannot be written: the next run of the data draws again)."""
    shared = shared_png_cache(cache_dir, digest)
    if png_cache is not None:
        write_png_cache(png_cache, digest, pngs, captions)
    if shared is not None:
        try:
            shared.parent.mkdir(parents=True, exist_ok=True)
            write_png_cache(shared, digest, pngs, captions)
        except OSError:
            pass


class FiguresAhead:
    """The report's PNGs, drawn by ``draw`` (no argument; returns name -> PNG bytes) on a daemon
    thread from :meth:`start` on, for a run whose figures have the digest ``digest``; ``arrays``: the
    :func:`arrays_hash` of its manifest and plan, kept for the finished run's digest.

    Start it only after the last fork of the stage it overlaps (the write pool's workers are all
    forked when :func:`vlmpack.pack.executors.make_executor` returns) and :meth:`wait` for it before
    anything forks again: a fork while it draws could copy a lock it holds. ``draw`` must read only
    data nobody changes meanwhile (Arrow tables, the plan's arrays, a report dict of its own)."""

    def __init__(self, draw: Callable[[], dict[str, bytes]], arrays, digest: str) -> None:
        self.arrays = arrays
        self.digest = digest
        self._draw = draw
        self._pngs: dict[str, bytes] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start drawing (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vlmpack-figures", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._pngs = self._draw()
        except Exception:  # noqa: BLE001 - drawn again by write_report_html, which raises what drawing raises
            self._pngs = None

    def wait(self) -> None:
        """Return once the drawing (if started) is over."""
        if self._thread is not None:
            self._thread.join()

    def take(self, digest: str) -> dict[str, bytes] | None:
        """The PNGs when they were drawn, without error, for ``digest``; else ``None``."""
        self.wait()
        return self._pngs if digest == self.digest else None
