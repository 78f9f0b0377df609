"""Per-node packing without Ray: ``vlmpack pack --num-nodes N --node-rank r``.

Each of N independent runs (one per machine, no coordination, no shared state besides the
inputs) packs a deterministic 1/N of the input and writes its own output directory; ``vlmpack
metadataset`` then blends the N outputs into one Energon ``MetadatasetV2``
(:mod:`vlmpack.energon.metadataset`).

Rules:

- The input tasks are the line-aligned byte ranges / row groups / shard members that the sources
  split every input into (``split(path, task_bytes)``, in ``--input`` order, the same list a
  single run counts). Node r takes the tasks of global index ``i`` with ``i % N == r``
  (:func:`select_tasks`): a function of the input files alone (paths, sizes, content), never of
  workers, hosts or time, so the union over r = 0..N-1 of the nodes' tasks is every task exactly
  once. Each node then plans and writes over its own slice only (no global plan).
- Consequences: records read, rejected and accepted over the N nodes equal a single run's, except
  for a sample id that occurs in two nodes' slices (a single run rejects the second as
  ``duplicate_id``; the nodes cannot see each other). ``vlmpack metadataset`` and ``vlmpack check``
  on the blend refuse such a pair (:func:`vlmpack.energon.metadataset.blend_problems`).
- Shard names get the prefix ``node<r>-of-<N>-`` (r zero-padded to the width of N-1,
  :func:`shard_prefix`), so two nodes' shards never share a name; N = 1 keeps the plain names.
- The config fingerprint includes N and r when N > 1 (:meth:`vlmpack.config.PackConfig.fingerprint_payload`),
  so a run directory of rank 0 is never resumed by rank 1 (:func:`check_node_output` says so in
  one line before anything is written).
- ``report.json`` records ``nodes`` (:func:`node_record`) and ``model_fingerprint``
  (:func:`model_fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from vlmpack.config import PackConfig
from vlmpack.errors import ConfigError, RunDirError
from vlmpack.fsio import read_json
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.sources import get_source, resolve_format

__all__ = ["InputRange", "check_node_output", "model_fingerprint", "node_ranges", "node_record", "select_tasks",
           "shard_prefix", "split_id"]


class InputRange(NamedTuple):
    """One input task: ``file_idx`` into ``cfg.input``, the source ``fmt``, the byte range
    ``[start, end)`` (``end == -1``: to the end of a compressed stream), the 1-based number of its
    first record unit (``first``) and ``nbytes``, its size in bytes (progress weight)."""

    file_idx: int
    path: str
    fmt: str
    start: int
    end: int
    first: int
    nbytes: int


def select_tasks(num_tasks: int, num_nodes: int, node_rank: int) -> list[int]:
    """Global indices of the tasks node ``node_rank`` of ``num_nodes`` packs: ``i % num_nodes ==
    node_rank`` (round robin, so nodes get a near-equal share of every input file). Pure.

    Raises ``ValueError`` when ``not 0 <= node_rank < num_nodes``.
    """
    if not 0 <= node_rank < num_nodes:
        raise ValueError(f"node_rank {node_rank} outside 0..{num_nodes - 1}")
    return list(range(node_rank, num_tasks, num_nodes))


def all_ranges(cfg: PackConfig, task_bytes: int) -> list[InputRange]:
    """Every input task of ``cfg`` in input order, each input split by its source into ranges of
    about ``task_bytes`` bytes. Raises what the sources raise for an unreadable input
    (:class:`vlmpack.errors.InputError`)."""
    out: list[InputRange] = []
    for fi, path in enumerate(cfg.input):
        size = os.path.getsize(path)
        fmt = resolve_format(path, cfg.input_format)
        for start, end, first in get_source(fmt).split(path, task_bytes):
            out.append(InputRange(fi, path, fmt, start, end, first, (end if end >= 0 else size) - start))
    return out


def node_ranges(cfg: PackConfig, task_bytes: int) -> tuple[list[InputRange], int]:
    """The tasks this node packs (all of them when ``cfg.num_nodes == 1``) and the number of
    tasks of the whole input. Raises :class:`ConfigError` (one line, on every rank alike) when
    there are fewer tasks than nodes: some node would have nothing to pack."""
    ranges = all_ranges(cfg, task_bytes)
    if cfg.num_nodes == 1:
        return ranges, len(ranges)
    if len(ranges) < cfg.num_nodes:
        raise ConfigError(f"--num-nodes {cfg.num_nodes}: the inputs make only {len(ranges)} task(s) of about "
                          f"{max(1, task_bytes >> 20)} MiB, so some node would pack nothing; use --num-nodes "
                          f"{len(ranges)} or fewer")
    return [ranges[i] for i in select_tasks(len(ranges), cfg.num_nodes, cfg.node_rank)], len(ranges)


def shard_prefix(cfg: PackConfig) -> str:
    """The shard name prefix of this run: ``cfg.shard_prefix`` (when not set, the output layout's
    own default: ``shard``, LLaVA-OneVision-2's and LoongForge's ``pretrain``), preceded by
    ``node<r>-of-<N>-`` when ``cfg.num_nodes > 1`` (``r`` zero-padded to the width of ``N-1``:
    ``node03-of-12-shard``). Two ranks, or two node counts, never give the same prefix. Raises
    :class:`ConfigError` for an unknown layout."""
    from vlmpack.sinks import get_sink

    base = cfg.shard_prefix if "shard_prefix" in cfg.model_fields_set else get_sink(cfg.layout).default_prefix
    if cfg.num_nodes == 1:
        return base
    width = len(str(cfg.num_nodes - 1))
    return f"node{cfg.node_rank:0{width}d}-of-{cfg.num_nodes}-{base}"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def model_fingerprint(payload: dict) -> str:
    """sha256 (hex) of the model directory's counting files as recorded in the fingerprint payload
    (``payload["model_files"]``: file name -> sha256, :meth:`PackConfig.fingerprint_payload`).
    Two outputs with the same value were counted with the same tokenizer, template, processor and
    config, so their packs may be blended."""
    return _digest(payload.get("model_files", {}))


def split_id(payload: dict) -> str:
    """sha256 (hex) of the fingerprint payload without ``node_rank``: equal for the N ranks of one
    per-node split (same inputs, options, model, N), different for anything else."""
    opts = {k: v for k, v in payload.get("options", {}).items() if k != "node_rank"}
    return _digest({**payload, "options": opts})


def node_record(cfg: PackConfig, payload: dict, tasks_total: int, tasks_node: int) -> dict:
    """The ``nodes`` object of ``report.json``: ``num_nodes``, ``node_rank``, ``split_id``
    (:func:`split_id`), ``tasks_total`` (input tasks of the whole input) and ``tasks`` (this
    node's)."""
    return {"num_nodes": cfg.num_nodes, "node_rank": cfg.node_rank, "split_id": split_id(payload),
            "tasks_total": tasks_total, "tasks": tasks_node}


def check_node_output(cfg: PackConfig) -> None:
    """Refuse (one line, :class:`RunDirError`) an ``--output`` whose run record belongs to another
    rank or node count, unless ``--overwrite``: each node needs its own output directory. The
    fingerprint refuses it anyway; this names the actual mistake."""
    old = read_json(Path(cfg.output) / RUN_DIR / "config.json")
    if cfg.overwrite or not isinstance(old, dict) or not isinstance(old.get("options"), dict):
        return
    opts = old["options"]
    was = (opts.get("num_nodes", 1), opts.get("node_rank", 0))
    if was != (cfg.num_nodes, cfg.node_rank):
        raise RunDirError(f"{cfg.output} holds the run of node {was[1]} of {was[0]}, this is node {cfg.node_rank} "
                          f"of {cfg.num_nodes}; give each node its own --output (or pass --overwrite)")
