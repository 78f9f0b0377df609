"""The result of a packing algorithm: flat index arrays (:class:`PackPlan`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlmpack.errors import InputError

_ARRAYS = ("pack_ids", "offsets", "order", "overlong", "pack_tokens")


@dataclass(frozen=True, eq=False)
class PackPlan:
    """Which samples go into which pack, as flat int64 arrays (never lists of lists).

    Attributes:
        pack_ids: int64 ``[n]``, the pack of each sample, ``-1`` for a sample in ``overlong``.
        offsets: int64 ``[P+1]``, CSR offsets into ``order``; ``offsets[0] == 0``.
        order: int64 ``[n_packed]``; the samples of pack ``p`` are ``order[offsets[p]:offsets[p+1]]``,
            in ascending sample index within a pack.
        overlong: int64 ``[k]``, ascending indices of the samples that fit no pack: longer than the
            capacity (after ``pad_to_multiple_of`` rounding) or, alone, over a media budget.
        pack_tokens: int64 ``[P]``, tokens per pack (sum of the rounded lengths), ``<= capacity``.
        capacity: the token capacity ``L`` the plan was made for (0 when unknown).
        algorithm: the registry name of the algorithm that made it ("" when unknown).
    """

    pack_ids: np.ndarray
    offsets: np.ndarray
    order: np.ndarray
    overlong: np.ndarray
    pack_tokens: np.ndarray
    capacity: int = 0
    algorithm: str = ""

    @property
    def num_packs(self) -> int:
        """Number of packs ``P``."""
        return int(self.offsets.shape[0] - 1)

    @property
    def num_samples(self) -> int:
        """Number of input samples ``n`` (packed plus overlong)."""
        return int(self.pack_ids.shape[0])

    def pack(self, p: int) -> np.ndarray:
        """int64 indices of the samples of pack ``p`` (a view into ``order``)."""
        return self.order[self.offsets[p] : self.offsets[p + 1]]

    def packs(self) -> Iterator[np.ndarray]:
        """Iterate over the packs in plan order; each item is an int64 index array (a view)."""
        for p in range(self.num_packs):
            yield self.order[self.offsets[p] : self.offsets[p + 1]]

    def samples_per_pack(self) -> np.ndarray:
        """int64 ``[P]``: number of samples in each pack."""
        return np.diff(self.offsets)

    def utilization(self) -> float:
        """Packed tokens / (P * capacity), in [0, 1]; 0.0 for an empty plan or unknown capacity."""
        if self.num_packs == 0 or self.capacity <= 0:
            return 0.0
        return float(self.pack_tokens.sum()) / (self.num_packs * self.capacity)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackPlan):
            return NotImplemented
        return (
            self.capacity == other.capacity
            and self.algorithm == other.algorithm
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in _ARRAYS)
        )

    __hash__ = None  # type: ignore[assignment]

    def to_npz(self, path: str | Path) -> None:
        """Save to an uncompressed ``.npz`` (the five arrays plus ``capacity`` and ``algorithm``);
        ``path`` may also be a writable binary file object."""
        np.savez(
            path if hasattr(path, "write") else Path(path),
            **{a: getattr(self, a) for a in _ARRAYS},
            capacity=np.int64(self.capacity),
            algorithm=np.str_(self.algorithm),
        )

    @classmethod
    def from_npz(cls, path: str | Path) -> PackPlan:
        """Load a plan written by :meth:`to_npz`.

        Raises:
            InputError: the file is missing or lacks one of the arrays.
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"pack plan {path} does not exist; write it with PackPlan.to_npz first")
        with np.load(path, allow_pickle=False) as z:
            missing = [a for a in _ARRAYS if a not in z.files]
            if missing:
                raise InputError(f"pack plan {path} lacks arrays {missing}; re-create it with PackPlan.to_npz")
            arrays = {a: np.asarray(z[a], dtype=np.int64) for a in _ARRAYS}
            capacity = int(z["capacity"]) if "capacity" in z.files else 0
            algorithm = str(z["algorithm"]) if "algorithm" in z.files else ""
        return cls(**arrays, capacity=capacity, algorithm=algorithm)

    def validate(
        self,
        lengths: np.ndarray,
        *,
        max_samples_per_pack: int | None = None,
        media_counts: np.ndarray | None = None,
        media_tokens: np.ndarray | None = None,
        max_media_per_pack: int | None = None,
        max_media_tokens_per_pack: int | None = None,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        """Check the plan against the inputs; raises ``AssertionError`` naming the first violation.

        Checks: every sample in exactly one pack or in ``overlong``; CSR consistent with
        ``pack_ids``; no pack over the capacity or any given constraint; ``pack_tokens`` exact.
        """
        n = self.num_samples
        lengths = np.asarray(lengths, dtype=np.int64)
        assert lengths.shape == (n,), f"plan has {n} samples, lengths has {lengths.shape}"
        eff = lengths if not pad_to_multiple_of else -(-lengths // pad_to_multiple_of) * pad_to_multiple_of
        seen = np.zeros(n, dtype=np.int64)
        np.add.at(seen, self.order, 1)
        np.add.at(seen, self.overlong, 1)
        assert np.all(seen == 1), f"samples not exactly once: {np.flatnonzero(seen != 1)[:10]}"
        assert np.all(np.diff(self.overlong) > 0), "overlong not ascending"
        assert np.all(self.pack_ids[self.overlong] == -1), "overlong sample with a pack id"
        sizes = np.diff(self.offsets)
        assert self.offsets[0] == 0 and np.all(sizes >= 1), "empty pack or bad offsets"
        assert np.array_equal(self.pack_ids[self.order], np.repeat(np.arange(self.num_packs), sizes))
        seg = np.repeat(np.arange(self.num_packs), sizes)
        if self.num_packs:
            assert np.all(np.diff(self.order)[np.diff(seg) == 0] > 0), "pack not in ascending order"
        tok = np.bincount(seg, weights=eff[self.order], minlength=self.num_packs).astype(np.int64)
        assert np.array_equal(tok, self.pack_tokens), "pack_tokens wrong"
        if self.capacity:
            assert np.all(tok <= self.capacity), f"pack over capacity: {tok.max()} > {self.capacity}"
        if max_samples_per_pack:
            assert np.all(sizes <= max_samples_per_pack), "pack over max_samples_per_pack"
        for arr, lim in ((media_counts, max_media_per_pack), (media_tokens, max_media_tokens_per_pack)):
            if arr is not None and lim is not None and self.num_packs:
                per = np.bincount(seg, weights=np.asarray(arr)[self.order], minlength=self.num_packs)
                assert np.all(per <= lim), f"pack over media limit {lim}: {per.max()}"
