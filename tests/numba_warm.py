"""Compile vlmpack's numba kernels into their cache once, in the background, at the start of a test run.

Every ``@njit(cache=True)`` kernel (the packing algorithms of :mod:`vlmpack.packing`, the ChatML label
spans of :mod:`vlmpack.models.chatml`) is compiled by the first process that calls it with a new
signature and kept in the source tree's ``__pycache__``. In a fresh clone (CI) the cache is empty, so
the two test workers, their CLI fork servers and the packing pools' workers each compiled the same
kernels at about the same time (all of them: 13.8 CPU-s in one process). The xdist controller
(:func:`conftest.pytest_configure`) starts this script while the workers import and collect: the
default bfd path first (every ``vlmpack pack`` plans with it), the label spans, then every other
algorithm and option set; a process that gets there first still compiles for itself, as before. With
a warm cache it only loads (about 2 s with the imports). Nothing here touches what a test checks: the
kernels are the same machine code whoever compiles them.
"""

from __future__ import annotations

import numpy as np

from vlmpack.models.chatml import assistant_label_mask
from vlmpack.packing import ALGORITHMS, plan_packs


def warm_default_plan() -> None:
    """The default (bfd) planner's kernels, compiled or loaded from the cache: what every ``vlmpack pack``
    plans with (also called by the CLI fork server, :mod:`cli_preload`)."""
    rng = np.random.default_rng(0)
    for cap in (64, 4096):
        plan_packs(rng.integers(1, cap, 300), cap, seed=0)


def main() -> None:
    warm_default_plan()
    rng = np.random.default_rng(0)
    for dtype in (np.int32, np.int64):
        assistant_label_mask(np.array([1, 2, 3, 4, 5], dtype=dtype), im_start_id=1, assistant_id=2, im_end_id=4,
                             newline_id=3)
    for algorithm in ALGORITHMS:
        for kw in ({}, {"max_samples_per_pack": 4}, {"media_counts": rng.integers(0, 3, 300), "max_media_per_pack": 5}):
            for cap in (64, 4096):
                plan_packs(rng.integers(1, cap, 300), cap, algorithm=algorithm, seed=0, **kw)


if __name__ == "__main__":
    main()
