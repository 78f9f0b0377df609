"""``vlmpack check``: load a packed output through Megatron-Energon and check every pack.

Iterates one full pass of ``get_train_dataset(OUT, ..., repeat=False)`` and checks that every pack
is a :class:`vlmpack.energon.sample.VlmpackPack`, that its samples' ``num_tokens`` sum to the
pack's ``num_tokens`` and stay ``<= seq_len``, that every media part decoded, and that every
sample id comes out exactly once. Needs ``megatron-energon`` (the ``train`` extra).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from vlmpack.errors import ConfigError


def iter_energon_packs(out_dir: str | Path, *, num_workers: int = 2):
    """Yield the packs of ``out_dir`` through Energon's own loader, one epoch, no shuffle."""
    try:
        from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    except ImportError:
        raise ConfigError("checking with Energon needs megatron-energon: pip install 'vlmpack[train]'") from None
    ds = get_train_dataset(str(out_dir), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
                           worker_config=WorkerConfig.default_worker_config(num_workers=num_workers), repeat=False)
    yield from get_loader(ds)


def check_output(out_dir: str | Path, *, num_workers: int = 2) -> dict:
    """Check ``out_dir`` as described in the module docstring.

    Returns ``{"packs", "samples", "tokens", "max_pack_tokens", "duplicates", "problems"}``;
    ``problems`` is a list of one-line strings (empty when everything holds).
    """
    info = json.loads((Path(out_dir) / ".nv-meta" / ".info.json").read_text())
    expected_packs = sum(info["shard_counts"].values())
    ids: Counter[str] = Counter()
    problems: list[str] = []
    packs = tokens = max_tokens = 0
    for pack in iter_energon_packs(out_dir, num_workers=num_workers):
        packs += 1
        total = sum(s["num_tokens"] for s in pack.samples)
        if total != pack.num_tokens or total > pack.seq_len:
            problems.append(f"{pack.__key__}: tokens {total} (recorded {pack.num_tokens}, seq_len {pack.seq_len})")
        n_media = sum(len(s["media"]) for s in pack.samples)
        if len(pack.media) != n_media:
            problems.append(f"{pack.__key__}: {len(pack.media)} media decoded for {n_media} referenced")
        tokens += total
        max_tokens = max(max_tokens, total)
        ids.update(s["id"] for s in pack.samples)
    dups = {k: v for k, v in ids.items() if v > 1}
    if packs != expected_packs:
        problems.append(f"Energon yielded {packs} packs, .info.json lists {expected_packs}")
    if dups:
        problems.append(f"{len(dups)} sample ids came out more than once, e.g. {next(iter(dups))!r}")
    return {"packs": packs, "samples": sum(ids.values()), "unique_ids": len(ids), "tokens": tokens,
            "max_pack_tokens": max_tokens, "duplicates": len(dups), "problems": problems, "ids": ids}
