"""Per-sample alignment for context parallelism in the THD layout: the multiple every sample's
length is padded to, and the lengths the planner packs once padded.

Megatron-Core's THD format (``PackedSeqParams(qkv_format="thd")``) with context parallelism size
``CP`` cuts every sample into ``2 x CP`` equal chunks (rank ``r`` takes chunks ``r`` and
``2CP-1-r``: Transformer Engine's ``thd_get_partitioned_indices``, Megatron-Core's
``get_thd_batch_on_this_cp_rank`` and ``_get_thd_freqs_on_this_cp_rank``), so each sample's padded
length must be a multiple of ``2 x CP``; with sequence parallelism the ``TP`` ranks split each
rank's tokens again, so the multiple is ``2 x CP x TP`` (NeMo's packed-sequence recipes:
``pad_seq_to_mult = 2 * context_parallel_size``, times ``tensor_model_parallel_size`` with
``sequence_parallel``). A planner that packs the aligned lengths guarantees that no pack exceeds
``L`` after the trainer pads.
"""

from __future__ import annotations

import math

import numpy as np

from vlmpack.errors import ConfigError


def sample_multiple(cp_size: int = 1, tp_size: int = 1, sequence_parallel: bool = False,
                    pad_to_multiple_of: int | None = None) -> int:
    """The multiple (tokens) each sample's length is padded to: ``2 x cp_size`` when ``cp_size > 1``,
    times ``tp_size`` with ``sequence_parallel``, and a multiple of ``pad_to_multiple_of`` too
    (their least common multiple); 1 when none applies.

    Raises :class:`ConfigError` for a size below 1."""
    for name, v in (("cp_size", cp_size), ("tp_size", tp_size), ("pad_to_multiple_of", pad_to_multiple_of or 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{name}={v!r} is invalid; use an integer >= 1")
    m = (2 * cp_size if cp_size > 1 else 1) * (tp_size if sequence_parallel else 1)
    return math.lcm(m, pad_to_multiple_of or 1)


def planned_multiple(cp_size: int = 1, tp_size: int = 1, sequence_parallel: bool = False,
                     pad_to_multiple_of: int | None = None) -> int | None:
    """What the planner's ``pad_to_multiple_of`` is: ``pad_to_multiple_of`` as given while the parallel
    layout adds nothing to it (None stays None, so a plan key made before ``--cp-size`` existed is kept),
    else :func:`sample_multiple`. Raises :class:`ConfigError` as it."""
    m = sample_multiple(cp_size, tp_size, sequence_parallel, pad_to_multiple_of)
    return pad_to_multiple_of if m == (pad_to_multiple_of or 1) else m


def aligned_lengths(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """int64 ``lengths`` (tokens) each rounded up to a multiple of ``multiple`` (>= 1)."""
    a = np.asarray(lengths, dtype=np.int64)
    return a if multiple <= 1 else -(-a // multiple) * multiple
