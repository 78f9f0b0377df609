"""Token-aware, distributed, seeded length-grouped batch sampler for unpacked training.

When samples are not packed, padding waste is lowest when a batch holds samples of similar
length (the idea of transformers' ``LengthGroupedSampler`` and of Megatron's / lmms-engine's
token budgets). :class:`LengthGroupedSampler` yields *batches of indices* whose padded size
``max(length) * count`` stays within ``max_tokens`` (or exactly ``batch_size`` samples):

1. a seeded permutation of all indices (new every epoch: ``set_epoch``);
2. mega-batches of ``mega_batch_mult * world_size`` batches' worth of samples are sorted by length
   (longest first), so neighbours have similar lengths while the data stays shuffled globally;
3. each mega-batch is cut into batches under the budget; the batch list is shuffled (seeded) and
   dealt round-robin to the ``world_size`` ranks, every rank getting the same number of batches
   (the tail is dropped or, with ``drop_last=False``, padded by repeating early batches).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class LengthGroupedSampler:
    """Batches of sample indices grouped by length, for ``DataLoader(batch_sampler=...)``.

    Args:
      lengths: tokens per sample (e.g. the ``num_tokens`` of the manifest), int ``[n]``.
      max_tokens: budget per batch in padded tokens (``max(len) * count``); or
      batch_size: a fixed number of samples per batch (exactly one of the two).
      num_replicas, rank: data-parallel world size and this rank (default 1, 0).
      seed: base seed; ``set_epoch(e)`` reshuffles deterministically.
      mega_batch_mult: how many batches per rank a sorted mega-batch spans (default 50).
      drop_last: drop the batches that do not divide evenly across ranks (else repeat some).

    A sample longer than ``max_tokens`` gets a batch of its own. Raises ``ValueError`` for bad args.
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, *, max_tokens: int | None = None,
                 batch_size: int | None = None, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 mega_batch_mult: int = 50, drop_last: bool = False):
        if (max_tokens is None) == (batch_size is None):
            raise ValueError("give exactly one of max_tokens and batch_size")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.num_replicas, self.rank, self.seed = int(num_replicas), int(rank), int(seed)
        self.mega_batch_mult, self.drop_last = int(mega_batch_mult), drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch`` (call before each epoch, as with DistributedSampler)."""
        self.epoch = int(epoch)

    def _all_batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.epoch])
        perm = rng.permutation(len(self.lengths))
        if self.batch_size:
            mega = self.batch_size * self.mega_batch_mult * self.num_replicas
        else:
            mean = max(1.0, float(self.lengths.mean())) if len(self.lengths) else 1.0
            mega = max(1, int(self.max_tokens / mean) * self.mega_batch_mult * self.num_replicas)
        batches: list[np.ndarray] = []
        for a in range(0, len(perm), mega):
            chunk = perm[a:a + mega]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += self._cut(chunk)
        order = rng.permutation(len(batches))
        return [batches[i] for i in order]

    def _cut(self, idx: np.ndarray) -> list[np.ndarray]:
        if self.batch_size:
            return [idx[i:i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        out, start = [], 0
        lens = self.lengths[idx]
        while start < len(idx):  # idx sorted longest first: the batch max is its first element
            n = max(1, int(self.max_tokens // max(1, lens[start])))
            out.append(idx[start:start + n])
            start += n
        return out

    def _rank_batches(self) -> list[np.ndarray]:
        batches = self._all_batches()
        w = self.num_replicas
        if self.drop_last:
            batches = batches[:len(batches) - len(batches) % w]
        elif batches and len(batches) % w:
            extra = w - len(batches) % w
            batches = batches + [batches[i % len(batches)] for i in range(extra)]
        return batches[self.rank::w]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self._rank_batches():
            yield b.tolist()

    def __len__(self) -> int:
        return len(self._rank_batches())
