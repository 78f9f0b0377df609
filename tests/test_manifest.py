"""The driver's flat manifest: sort-based duplicate detection and the manifest digest.

:func:`vlmpack.pack.manifest.duplicate_positions` must give exactly what the first-seen dict it
replaced gave (every later occurrence of an ``(id_kind, id)`` key, with its first occurrence),
for any ids, including empty strings, non-ASCII and surrogate-free Unicode, whether it sorts the
ids or the workers' 64-bit hashes (colliding hashes included); and
:func:`vlmpack.pack.manifest.manifest_digest` must not depend on how the id column's Arrow buffers
are laid out (a filtered or concatenated array vs a fresh one).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack.pack.count_task import id_key_hashes
from vlmpack.pack.manifest import duplicate_positions, manifest_digest

ids_st = st.lists(st.tuples(st.sampled_from(["", "a", "b", "ä", "a\n", "10", "1", "é" * 3, "x" * 40]),
                            st.integers(0, 2)), max_size=80)


def _reference(keys: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
    seen: dict[tuple[int, str], int] = {}
    dups, firsts = [], []
    for i, (sid, k) in enumerate(keys):
        f = seen.setdefault((k, sid), i)
        if f != i:
            dups.append(i)
            firsts.append(f)
    return dups, firsts


@settings(deadline=None, max_examples=300)
@given(ids_st, st.sampled_from(["none", "blake2b", "colliding"]))
def test_duplicate_positions_equal_the_first_seen_dict(keys, hashing):
    """Without hashes (ids sorted), with the workers' BLAKE2b hashes, and with hashes that all
    collide (every id in one run: the ids themselves must decide)."""
    ids = pa.array([k[0] for k in keys], pa.string())
    kinds = np.array([k[1] for k in keys], dtype=np.int8)
    hashes = {"none": None, "blake2b": id_key_hashes([k[0] for k in keys], kinds.tolist()),
              "colliding": np.full(len(keys), 7, np.uint64)}[hashing]
    dups, firsts = duplicate_positions(ids, kinds, hashes)
    assert (dups.tolist(), firsts.tolist()) == _reference(keys)


@settings(deadline=None, max_examples=100)
@given(ids_st, st.integers(0, 10))
def test_manifest_digest_ignores_buffer_layout(keys, cut):
    words = [k[0] for k in keys]
    fresh = pa.table({"id": pa.array(words[cut:], pa.string()), "n": np.arange(len(words[cut:]), dtype=np.int32)})
    sliced = pa.array(words, pa.string()).slice(min(cut, len(words)))
    chunked = pa.chunked_array([sliced.slice(0, 3), sliced.slice(3)]) if len(sliced) > 3 else sliced
    other = pa.table({"id": chunked, "n": np.arange(len(sliced), dtype=np.int32)})
    assert manifest_digest(fresh) == manifest_digest(other)
    if words[cut:]:
        changed = pa.table({"id": pa.array(words[cut:-1] + [words[-1] + "!"], pa.string()),
                            "n": np.arange(len(words[cut:]), dtype=np.int32)})
        assert manifest_digest(changed) != manifest_digest(fresh)
