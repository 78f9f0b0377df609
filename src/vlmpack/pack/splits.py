"""Train / validation / test splits: each sample's split from a hash of its id, never from its position.

``--val-fraction F`` (``train=1-F, val=F``) or ``--split train=0.98,val=0.01,test=0.01`` gives each
split a share; a sample's split is decided by its ``(id kind, id)`` alone (:func:`split_of_ids`:
the first 8 bytes of BLAKE2b of the key, :func:`vlmpack.pack.count_task.id_key_hashes`, as a
fraction of 2^64 against the cumulative shares), so it never changes between runs, worker counts,
node counts (``--num-nodes``) or input orders, and a sample added later does not move any other.
Packs never mix splits (each split is planned on its own), shards never mix them (each split's packs
are cut into shards of their own), and Energon's ``split.yaml`` lists each split's shards under its
split part (``get_train_dataset(OUT, split_part="val", ...)``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from vlmpack.pack.count_task import id_key_hashes
from vlmpack.pack.write import ShardResult
from vlmpack.packing import PackPlan

#: Energon's split parts, in the order packs and shards are written.
SPLIT_NAMES = ("train", "val", "test")


def split_of_ids(ids: pa.Array | pa.ChunkedArray | list[str], id_kinds: np.ndarray,
                 shares: dict[str, float]) -> np.ndarray:
    """int8 ``[n]``: the index into :data:`SPLIT_NAMES` of each sample's split (module docstring).
    ``shares``: split name -> share (each in (0, 1], summing to 1)."""
    names = [s for s in SPLIT_NAMES if s in shares]
    bounds = np.cumsum([shares[s] for s in names])
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]  # one Python list of ids at a time
    kinds, hashes, pos = np.asarray(id_kinds), [], 0
    for chunk in chunks:
        part = chunk.to_pylist() if isinstance(chunk, pa.Array) else list(chunk)
        hashes.append(id_key_hashes(part, kinds[pos:pos + len(part)].tolist()))
        pos += len(part)
    h = (np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)).astype(np.float64) / 2.0**64
    idx = np.minimum(np.searchsorted(bounds, h, side="right"), len(names) - 1)
    return np.asarray([SPLIT_NAMES.index(n) for n in names], np.int8)[idx]


def join_plans(parts: list[tuple[np.ndarray, PackPlan]], n: int) -> PackPlan:
    """One plan of ``n`` samples from the plans of disjoint row subsets (``(rows, plan)``, ``rows``
    int64 ascending manifest positions, the plan over ``rows``' samples in that order), their packs
    one after the other: a pack's samples stay ascending (``rows`` is), ``overlong`` is sorted."""
    pack_ids = np.full(n, -1, np.int64)
    offsets, order, overlong, tokens = [np.zeros(1, np.int64)], [], [], []
    base_pack = base_order = 0
    capacity, algorithm = 0, ""
    for rows, plan in parts:
        local = np.asarray(plan.pack_ids, np.int64)
        pack_ids[rows] = np.where(local >= 0, local + base_pack, -1)
        order.append(rows[np.asarray(plan.order, np.int64)])
        offsets.append(np.asarray(plan.offsets[1:], np.int64) + base_order)
        overlong.append(rows[np.asarray(plan.overlong, np.int64)])
        tokens.append(np.asarray(plan.pack_tokens, np.int64))
        base_pack, base_order = base_pack + plan.num_packs, base_order + len(plan.order)
        capacity, algorithm = plan.capacity, plan.algorithm
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    return PackPlan(pack_ids, np.concatenate(offsets), cat(order), np.sort(cat(overlong)), cat(tokens),
                    capacity, algorithm)


def split_report(shares: dict[str, float], shards: list[ShardResult], shard_splits: dict[str, str]) -> dict:
    """``report.json`` ``splits``: per split its ``share`` (asked), ``packs``, ``samples``, ``tokens``
    and ``shards`` (sorted names) as written; ``vlmpack check`` rebuilds ``split.yaml`` from it."""
    out = {name: {"share": shares[name], "packs": 0, "samples": 0, "tokens": 0, "shards": []}
           for name in SPLIT_NAMES if name in shares}
    for s in shards:
        row = out[shard_splits[s.name]]
        row["packs"] += s.num_packs
        row["samples"] += s.num_samples
        row["tokens"] += s.num_tokens
        row["shards"].append(s.name)
    for row in out.values():
        row["shards"].sort()
    return out
