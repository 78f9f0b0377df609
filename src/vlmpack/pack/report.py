"""Report stage: ``OUT/report.json`` and the one-screen summary printed at the end of a run.

The report holds the identity ``records read = samples packed + rejected + dropped overlong``
(with counts per reason), tokens, packs, the utilization ``tokens / (packs * seq_len)`` next to
the lower bound ``L1 = ceil(sum(tokens) / seq_len)`` packs, samples per pack p50/p99/max, the
sha256 of each shard, the config fingerprint and the versions of vlmpack/transformers/tokenizers.
"""

from __future__ import annotations

import math
from collections import Counter
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pyarrow as pa

from vlmpack import __version__
from vlmpack.config import PackConfig
from vlmpack.pack.write import ShardResult
from vlmpack.packing import PackPlan
from vlmpack.records import ReadStats, Rejection


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def _pct(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"p50": 0, "p99": 0, "max": 0}
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "max": int(values.max())}


def build_report(cfg: PackConfig, fingerprint: str, stats: ReadStats, manifest: pa.Table, plan: PackPlan,
                 rejections: list[Rejection], shards: list[ShardResult], timings: dict[str, float]) -> dict:
    """The report as a JSON-ready dict (see the module docstring for its content)."""
    reasons = Counter(r.reason for r in rejections)
    overlong = reasons.pop("overlong", 0)
    rejected = sum(reasons.values())
    packed = int(sum(s.num_samples for s in shards))
    tokens = int(sum(s.num_tokens for s in shards))
    packs = int(sum(s.num_packs for s in shards))
    per_pack = np.diff(plan.offsets)
    lower = math.ceil(tokens / cfg.seq_len) if tokens else 0
    util = tokens / (packs * cfg.seq_len) if packs else 0.0
    return {
        "records_read": stats.records,
        "blank_lines": stats.blank,
        "samples_packed": packed,
        "rejected": rejected,
        "dropped_overlong": overlong,
        "identity_holds": stats.records == packed + rejected + overlong,
        "rejected_by_reason": dict(sorted(reasons.items())),
        "packs": packs,
        "shards": len(shards),
        "tokens": tokens,
        "seq_len": cfg.seq_len,
        "utilization": util,
        "lower_bound_packs": lower,
        "utilization_of_lower_bound": (lower / packs) if packs else 1.0,
        "samples_per_pack": _pct(per_pack),
        "samples_by_kind": {k: int(v) for k, v in zip(("text", "image", "video"),
                                                       np.bincount(manifest.column("kind").to_numpy(), minlength=3))},
        "algorithm": cfg.algorithm,
        "shard_sha256": {s.name: s.sha256 for s in shards},
        "shard_bytes": int(sum(s.nbytes for s in shards)),
        "fingerprint": fingerprint,
        "versions": {"vlmpack": __version__, "transformers": _version("transformers"),
                     "tokenizers": _version("tokenizers")},
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }


def summary_lines(report: dict) -> list[tuple[str, str]]:
    """The one-screen summary as (label, value) rows."""
    r = report
    rows = [
        ("records read", f"{r['records_read']:,}"),
        ("samples packed", f"{r['samples_packed']:,}"),
        ("rejected", f"{r['rejected']:,}" + (" (" + ", ".join(f"{k} {v}" for k, v in r["rejected_by_reason"].items())
                                            + ")" if r["rejected_by_reason"] else "")),
        ("dropped overlong", f"{r['dropped_overlong']:,}"),
        ("identity read = packed + rejected + overlong", "holds" if r["identity_holds"] else "BROKEN"),
        ("tokens", f"{r['tokens']:,}"),
        ("packs (lower bound)", f"{r['packs']:,} ({r['lower_bound_packs']:,})"),
        ("utilization", f"{100 * r['utilization']:.2f} % of {r['seq_len']} tokens/pack; "
                        f"{100 * r['utilization_of_lower_bound']:.2f} % of the lower bound"),
        ("samples per pack p50 / p99 / max", "{p50:g} / {p99:g} / {max}".format(**r["samples_per_pack"])),
        ("shards", f"{r['shards']} ({r['shard_bytes'] / 1e6:,.1f} MB)"),
        ("seconds", ", ".join(f"{k} {v:g}" for k, v in r["seconds"].items())),
    ]
    return rows
