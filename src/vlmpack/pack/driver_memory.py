"""Freed memory back to the operating system between the driver's stages.

The driver's stages allocate a few large arrays each (the manifest's columns, the plan, the shard
tasks' member rows) and free the previous stage's temporaries. Freed memory is not always returned:
glibc's ``malloc`` raises its mmap threshold after each large free (up to 32 MiB), so arrays of a few
MiB later come from the heap and stay in the process when freed; Arrow's default pool (mimalloc)
keeps its freed segments. :func:`release_free_memory` asks both to return what is free, so the
driver's resident size follows what it holds (measured by ``bench/bench_scale.py``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import pyarrow as pa

__all__ = ["release_free_memory"]


def release_free_memory() -> None:
    """Return free memory to the OS: ``pyarrow``'s default pool (``MemoryPool.release_unused``) and
    glibc's heap (``malloc_trim(0)``, where the C library has it: not on macOS or musl). Nothing
    that is held is touched; never raises."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim`` or None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return getattr(libc, "malloc_trim", None)
    except OSError:
        return None

