"""Online packing with a bounded buffer (:class:`StreamingPacker`) and an Energon pre-packer helper.

Flush policy of :class:`StreamingPacker`: samples accumulate until the buffer holds
``buffer_size`` of them; then the buffer is packed with exact BFD (all constraints) and the packs
are ranked by fill (fullest first, ties by creation order). Every pack with fill >= ``min_fill``
is emitted; if more than ``keep_fraction * buffer_size`` samples would stay, further packs are
emitted, fullest first, until that bound holds. The samples of the packs not emitted stay in the
buffer and are re-packed with the next arrivals, so the near-empty tail packs of a block are
repaired instead of shipped. ``flush()`` packs and emits everything left. Memory is bounded by
``buffer_size`` samples; the decisions depend only on the buffer contents, so
``state_dict()``/``load_state_dict()`` resume a stream exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from vlmpack.errors import ConfigError, OverlongError
from vlmpack.packing.algorithms import plan_packs

logger = logging.getLogger(__name__)

T = TypeVar("T")
_STATE_VERSION = 1


class StreamingPacker:
    """Bounded-buffer online packer.

    Args:
        capacity: tokens per pack ``L``.
        buffer_size: samples held before a packing round (``B``; >= 1).
        max_samples_per_pack, max_media_per_pack, max_media_tokens_per_pack, group_by_kind,
            pad_to_multiple_of: the constraints of :func:`vlmpack.packing.plan_packs`.
        min_fill: packs at least this full (tokens / L) are emitted at every round.
        keep_fraction: at most ``keep_fraction * buffer_size`` samples stay after a round.

    Use::

        packer = StreamingPacker(8192, 10_000)
        for idx, n_tok in stream:
            for pack in packer.push(idx, n_tok):
                yield pack            # list of sample indices
        yield from packer.flush()
        packer.pop_overlong()         # indices that fit no pack (never dropped silently)

    Raises:
        ConfigError: invalid options, or a state from a packer with other options.
    """

    def __init__(
        self,
        capacity: int,
        buffer_size: int = 10_000,
        *,
        max_samples_per_pack: int | None = None,
        max_media_per_pack: int | None = None,
        max_media_tokens_per_pack: int | None = None,
        group_by_kind: bool = False,
        pad_to_multiple_of: int | None = None,
        min_fill: float = 0.995,
        keep_fraction: float = 0.5,
    ) -> None:
        if int(capacity) < 1:
            raise ConfigError(f"capacity={capacity} is invalid; use a positive token count")
        if int(buffer_size) < 1:
            raise ConfigError(f"buffer_size={buffer_size} is invalid; use at least 1 sample")
        if not 0.0 <= min_fill <= 1.0 or not 0.0 <= keep_fraction < 1.0:
            raise ConfigError(
                f"min_fill={min_fill} / keep_fraction={keep_fraction} invalid; use 0<=min_fill<=1, 0<=keep_fraction<1"
            )
        self.capacity = int(capacity)
        self.buffer_size = int(buffer_size)
        self._constraints: dict[str, Any] = {
            "max_samples_per_pack": max_samples_per_pack,
            "max_media_per_pack": max_media_per_pack,
            "max_media_tokens_per_pack": max_media_tokens_per_pack,
            "group_by_kind": bool(group_by_kind),
            "pad_to_multiple_of": pad_to_multiple_of,
        }
        self.min_fill = float(min_fill)
        self.keep_fraction = float(keep_fraction)
        self._pad = int(pad_to_multiple_of) if pad_to_multiple_of else 1
        self._idx: list[int] = []
        self._len: list[int] = []
        self._mc: list[int] = []
        self._mt: list[int] = []
        self._kind: list[int] = []
        self._overlong: list[int] = []
        self.packs_emitted = 0
        self.tokens_emitted = 0

    def __len__(self) -> int:
        """Samples currently buffered."""
        return len(self._idx)

    def _fits_alone(self, length: int, media_count: int, media_tokens: int) -> bool:
        c = self._constraints
        eff = -(-length // self._pad) * self._pad
        return (
            eff <= self.capacity
            and (c["max_media_per_pack"] is None or media_count <= c["max_media_per_pack"])
            and (c["max_media_tokens_per_pack"] is None or media_tokens <= c["max_media_tokens_per_pack"])
        )

    def push(
        self, index: int, length: int, *, media_count: int = 0, media_tokens: int = 0, kind: int = 0
    ) -> list[list[int]]:
        """Add one sample; returns the packs that are ready (lists of sample indices, maybe none).

        A sample that fits no pack goes to the overlong list (see :meth:`pop_overlong`).
        """
        if length < 0 or media_count < 0 or media_tokens < 0:
            raise ConfigError(f"sample {index}: negative length or media count; counts must be >= 0")
        if not self._fits_alone(length, media_count, media_tokens):
            self._overlong.append(int(index))
            logger.debug("sample %s (%d tokens) fits no pack of %d", index, length, self.capacity)
            return []
        self._idx.append(int(index))
        self._len.append(int(length))
        self._mc.append(int(media_count))
        self._mt.append(int(media_tokens))
        self._kind.append(int(kind))
        if len(self._idx) < self.buffer_size:
            return []
        return self._round(final=False)

    def flush(self) -> list[list[int]]:
        """Pack and return everything still buffered (the end of the stream or of an epoch)."""
        if not self._idx:
            return []
        return self._round(final=True)

    def pop_overlong(self) -> list[int]:
        """Return and clear the indices of the samples that fit no pack, in arrival order."""
        out, self._overlong = self._overlong, []
        return out

    def _round(self, *, final: bool) -> list[list[int]]:
        c = self._constraints
        lengths = np.asarray(self._len, dtype=np.int64)
        plan = plan_packs(
            lengths,
            self.capacity,
            algorithm="bfd",
            media_counts=np.asarray(self._mc, dtype=np.int64),
            media_tokens=np.asarray(self._mt, dtype=np.int64),
            kinds=np.asarray(self._kind, dtype=np.int64),
            order="creation",
            **c,
        )
        sizes = plan.samples_per_pack()
        rank = np.argsort(-plan.pack_tokens, kind="stable")
        if final:
            chosen = rank
        else:
            full = plan.pack_tokens[rank] >= self.min_fill * self.capacity
            n_full = int(full.sum())
            kept_after = len(lengths) - np.cumsum(sizes[rank])
            limit = self.keep_fraction * self.buffer_size
            n_more = int(np.argmax(kept_after <= limit)) + 1 if np.any(kept_after <= limit) else len(rank)
            chosen = rank[: max(n_full, n_more)]
        idx = np.asarray(self._idx, dtype=np.int64)
        out = [idx[plan.pack(int(p))].tolist() for p in chosen]
        keep = np.ones(len(lengths), dtype=bool)
        for p in chosen:
            keep[plan.pack(int(p))] = False
        keep_pos = np.flatnonzero(keep).tolist()
        self._idx = [self._idx[k] for k in keep_pos]
        self._len = [self._len[k] for k in keep_pos]
        self._mc = [self._mc[k] for k in keep_pos]
        self._mt = [self._mt[k] for k in keep_pos]
        self._kind = [self._kind[k] for k in keep_pos]
        self.packs_emitted += len(out)
        self.tokens_emitted += int(plan.pack_tokens[chosen].sum())
        return out

    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "buffer_size": self.buffer_size,
            "min_fill": self.min_fill,
            "keep_fraction": self.keep_fraction,
            **self._constraints,
        }

    def state_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot (config, buffered samples in order, overlong, counters)."""
        return {
            "version": _STATE_VERSION,
            "config": self._config(),
            "index": list(self._idx),
            "length": list(self._len),
            "media_count": list(self._mc),
            "media_tokens": list(self._mt),
            "kind": list(self._kind),
            "overlong": list(self._overlong),
            "packs_emitted": self.packs_emitted,
            "tokens_emitted": self.tokens_emitted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a snapshot from :meth:`state_dict`; the stream then continues exactly.

        Raises:
            ConfigError: the snapshot has another version or was taken with other options.
        """
        if state.get("version") != _STATE_VERSION:
            raise ConfigError(f"packer state version {state.get('version')} unsupported; expected {_STATE_VERSION}")
        if state["config"] != self._config():
            raise ConfigError(
                f"packer state was saved with {state['config']} but this packer has {self._config()}; "
                "construct the packer with the saved options"
            )
        self._idx = [int(v) for v in state["index"]]
        self._len = [int(v) for v in state["length"]]
        self._mc = [int(v) for v in state["media_count"]]
        self._mt = [int(v) for v in state["media_tokens"]]
        self._kind = [int(v) for v in state["kind"]]
        self._overlong = [int(v) for v in state["overlong"]]
        self.packs_emitted = int(state["packs_emitted"])
        self.tokens_emitted = int(state["tokens_emitted"])


def select_samples_to_pack(
    samples: Sequence[T],
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    *,
    algorithm: str = "bfd",
    on_overlong: str = "error",
    **constraints: Any,
) -> list[list[T]]:
    """Group a buffer of samples into packs, for an Energon ``TaskEncoder.select_samples_to_pack``.

    Energon passes a full buffer and keeps only the samples returned, so every sample that fits is
    returned in some pack (packs in creation order, samples in buffer order).

    Args:
        samples: the buffer; lengths: their token counts; capacity: ``L``.
        algorithm: a name from :data:`vlmpack.packing.ALGORITHMS`; constraints: as in plan_packs.
        on_overlong: "error" raises :class:`OverlongError`; "drop" logs a warning with the count.
    """
    if on_overlong not in ("error", "drop"):
        raise ConfigError(f"on_overlong={on_overlong!r} unknown; use 'error' or 'drop'")
    plan = plan_packs(np.asarray(lengths, dtype=np.int64), capacity, algorithm=algorithm, order="creation",
                      **constraints)
    if plan.overlong.size:
        if on_overlong == "error":
            raise OverlongError(
                f"{plan.overlong.size} samples in the packing buffer fit no pack of {capacity} tokens "
                f"(first at buffer position {int(plan.overlong[0])}); filter them before packing "
                "or pass on_overlong='drop'"
            )
        logger.warning("dropping %d samples that fit no pack of %d tokens", plan.overlong.size, capacity)
    return [[samples[int(i)] for i in pack] for pack in plan.packs()]
