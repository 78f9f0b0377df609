"""The plan stage's data-parallel shape (``--dp-size N --global-batch-size K``): a pack count that is a
multiple of ``K`` and a pack order that balances vision load across the ``N`` ranks of every micro
step (:mod:`vlmpack.packing.balance`), and the figures ``report.json``'s ``data_parallel`` holds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from vlmpack.packing import PackPlan
from vlmpack.packing.alignment import aligned_lengths
from vlmpack.packing.balance import balanced_order, check_shape, fill_global_batches, from_packs, rank_step_loads


def global_batch(dp_size: int, global_batch_size: int | None) -> int:
    """``K``: the global batch in packs (default: one pack per rank). Raises :class:`ConfigError`
    as :func:`vlmpack.packing.balance.check_shape`."""
    k = global_batch_size or dp_size
    check_shape(dp_size, k)
    return k


def pack_loads(manifest: pa.Table, plan: PackPlan) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``[P]`` vision (media) tokens and tokens of each pack of ``plan`` in its order (manifest
    columns ``media_tokens`` and ``num_tokens``)."""
    if not plan.num_packs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = plan.offsets[:-1]
    per = lambda col: np.add.reduceat(manifest.column(col).to_numpy().astype(np.int64)[plan.order], starts)  # noqa: E731
    return per("media_tokens"), per("num_tokens")


def shape_plan(plan: PackPlan, manifest: pa.Table, *, dp_size: int, global_batch_size: int | None, seed: int,
               pad_to_multiple_of: int | None) -> PackPlan:
    """``plan`` split up to a multiple of the global batch and reordered for rank balance (module
    docstring); every pack keeps its samples or is cut in two, nothing is dropped or repeated."""
    k = global_batch(dp_size, global_batch_size)
    eff = aligned_lengths(manifest.column("num_tokens").to_numpy(), pad_to_multiple_of or 1)
    plan, _ = fill_global_batches(plan, eff, k)
    vision, tokens = pack_loads(manifest, plan)
    perm = balanced_order(vision, tokens, dp_size, seed)
    return from_packs([plan.pack(int(i)) for i in perm], plan.num_samples, plan.overlong, eff, plan.capacity,
                      plan.algorithm)


def data_parallel_record(manifest: pa.Table, base: PackPlan, plan: PackPlan, *, dp_size: int,
                         global_batch_size: int | None, seq_len: int) -> dict:
    """``report.json``'s ``data_parallel``: the shape, the packs the global batch added (and the
    capacity they cost, in tokens: packs x ``seq_len``), utilization before and after, and
    :func:`vlmpack.packing.balance.rank_step_loads` of the plan without the shape (``before``:
    ``base``, its full steps) and with it (``after``, what ``vlmpack check`` recomputes)."""
    k = global_batch(dp_size, global_batch_size)
    added = plan.num_packs - base.num_packs
    return {"dp_size": dp_size, "global_batch_size": k, "packs_added": added,
            "capacity_tokens_added": added * seq_len, "packs_before": base.num_packs,
            "tail_packs_before": base.num_packs % k,
            "utilization_before": round(base.utilization(), 6), "utilization": round(plan.utilization(), 6),
            "before": rank_step_loads(*pack_loads(manifest, base), dp_size, k),
            "after": rank_step_loads(*pack_loads(manifest, plan), dp_size, k)}


def data_parallel_rows(lengths: np.ndarray, media_tokens: np.ndarray, plans: dict[int, PackPlan], *, dp_size: int,
                       global_batch_size: int | None, seed: int, pad_to_multiple_of: int | None) -> list[dict]:
    """``vlmpack plan --dp-size``: per ``seq_len`` -> plan of ``plans``, the
    :func:`data_parallel_record` of that plan shaped for the ranks (``lengths``, ``media_tokens``:
    int64 ``[n]`` tokens per sample), with ``seq_len`` added."""
    table = pa.table({"num_tokens": np.asarray(lengths, np.int64), "media_tokens": np.asarray(media_tokens, np.int64)})
    out = []
    for seq_len, base in plans.items():
        shaped = shape_plan(base, table, dp_size=dp_size, global_batch_size=global_batch_size, seed=seed,
                            pad_to_multiple_of=pad_to_multiple_of)
        out.append({"seq_len": seq_len, **data_parallel_record(table, base, shaped, dp_size=dp_size,
                                                               global_batch_size=global_batch_size, seq_len=seq_len)})
    return out


def format_data_parallel(rows: list[dict]) -> str:
    """A markdown table of :func:`data_parallel_rows`: per ``seq_len``, before -> after the shape."""
    head = ("| seq_len | ranks x packs/step | packs (added) | util % | full steps | vision tokens max-min over a "
            "step's ranks, mean / worst | max rank / mean, vision | global_seq_len per rank avg / min / max |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        b, a = r["before"], r["after"]
        ranks = lambda x: f"{x['vision_tokens']['spread_mean']:,.0f} / {x['vision_tokens']['spread_max']:,}"  # noqa: E731
        seq = lambda x: f"{x['tokens']['avg']:,.0f} / {x['tokens']['min']:,} / {x['tokens']['max']:,}"  # noqa: E731
        lines.append(f"| {r['seq_len']} | {r['dp_size']} x {r['global_batch_size'] // r['dp_size']} | "
                     f"{r['packs_before']:,} -> {r['packs_before'] + r['packs_added']:,} (+{r['packs_added']}) | "
                     f"{100 * r['utilization_before']:.2f} -> {100 * r['utilization']:.2f} | "
                     f"{b['steps']:,} -> {a['steps']:,} | {ranks(b)} -> {ranks(a)} | "
                     f"{b['vision_tokens']['max_over_mean']:.3f} -> {a['vision_tokens']['max_over_mean']:.3f} | "
                     f"{seq(b)} -> {seq(a)} |")
    return "\n".join(lines)
