"""Stage keys of ``vlmpack pack``: count once, plan many.

Each stage is keyed by its own inputs only (the table of which option belongs to which stage is in
:mod:`vlmpack.pack.rundir`), so a change re-runs that stage and the ones after it, never the ones
before:

- count key (:func:`count_key`): sha256 of the vlmpack version, the source of the counting code
  (:func:`counting_code_digest`: a rule fixed between releases must not reuse cached counts),
  :data:`TASK_BYTES`, the inputs'
  identity (absolute path, size in bytes, mtime in ns), the model directory (absolute path and the
  sha256 of each counting file, ``ModelFamily.counting_files``) and :data:`COUNT_OPTIONS`. The
  identity of each media file is checked per task at reuse time instead (size + mtime, see
  :func:`vlmpack.pack.count_task.media_changed`), as before.
- plan key (:func:`plan_key`): sha256 of the manifest digest (the counts) and :data:`PLAN_OPTIONS`.
- write key (:func:`write_key`): sha256 of the count key, the plan key, the media files as counted
  (path, size, mtime: they are copied into the shards) and :data:`WRITE_OPTIONS`.

Options in :data:`NO_STAGE` change no byte of the output. :func:`count_cache_dir` is where counts
are shared between output directories and ``vlmpack plan --input`` (``--cache-dir``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from vlmpack import __version__
from vlmpack.config import PackConfig

#: Input bytes per count task (fixed: the output must not depend on workers; part of the count key).
TASK_BYTES = 2 << 20
#: Options that decide the counts and the canonical records (the count stage).
COUNT_OPTIONS = ("input", "input_format", "input_schema", "text_key", "media_root", "allow_absolute_media",
                 "media_lmdb", "media_check", "special_tokens", "model", "max_member_bytes", "max_media_bytes")
#: Options that decide the plan, given the counts (the plan stage; ``overlong``: drop or stop).
PLAN_OPTIONS = ("seq_len", "algorithm", "max_samples_per_pack", "max_media_per_pack", "max_media_tokens_per_pack",
                "group_by_kind", "pad_to_multiple_of", "seed", "overlong")
@dataclass(frozen=True)
class PlanOptions:
    """What the plan stage uses (:data:`PLAN_OPTIONS`, nothing else): capacity ``seq_len`` and the
    per-pack budgets in tokens, the algorithm name (:data:`vlmpack.packing.ALGORITHMS`), the
    constraints, the pack-order ``seed`` and the ``overlong`` policy (``"drop"`` | ``"error"``).
    Built from a config with :meth:`of`; the plan key and the plan are functions of it alone."""

    seq_len: int
    algorithm: str = "bfd"
    max_samples_per_pack: int | None = None
    max_media_per_pack: int | None = None
    max_media_tokens_per_pack: int | None = None
    group_by_kind: bool = False
    pad_to_multiple_of: int | None = None
    seed: int = 0
    overlong: str = "drop"

    @classmethod
    def of(cls, cfg: PackConfig) -> PlanOptions:
        """The plan options of ``cfg``."""
        return cls(**{k: getattr(cfg, k) for k in PLAN_OPTIONS})


#: Options that decide the shard bytes and names, given the plan (the write stage).
WRITE_OPTIONS = ("pretokenize", "max_packs_per_shard", "max_shard_bytes", "shard_prefix", "num_nodes", "node_rank")
#: Options that change no output byte (where to write, how fast, when to stop, where the cache is).
NO_STAGE = ("output", "workers", "executor", "ray_address", "overwrite", "progress", "max_reject_fraction",
            "cache_dir")
#: ``--cache-dir`` / ``$VLMPACK_CACHE`` values that turn the shared count cache off.
CACHE_OFF = ("", "off", "none")
ENV_CACHE = "VLMPACK_CACHE"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


#: Parts of the vlmpack package whose code does not decide counts or canonical records (all the
#: other ``.py`` files are hashed into the count key): the training side, the CLI, Energon loading,
#: planning, writing, reports and the output checks.
COUNTING_CODE_EXCLUDE = ("train", "cli", "energon", "packing", "pack/write.py", "pack/report.py",
                         "pack/figures.py", "pack/preflight.py", "check", "check_blend.py", "verify.py",
                         "inspection.py", "sinks", "packfmt.py")


@functools.lru_cache(maxsize=1)
def counting_code_digest() -> str:
    """sha256 (hex) of the installed vlmpack source that counts (every ``.py`` file of the package
    outside :data:`COUNTING_CODE_EXCLUDE`, by relative path and bytes). Raises ``OSError`` only
    when the package's own files cannot be read."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] in COUNTING_CODE_EXCLUDE or rel.as_posix() in COUNTING_CODE_EXCLUDE:
            continue
        h.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def count_payload(cfg: PackConfig, payload: dict) -> dict:
    """What the count key hashes: from ``payload`` (:meth:`PackConfig.fingerprint_payload`, so the
    model files are hashed once) the inputs' identity and the model files, plus :data:`COUNT_OPTIONS`
    (absolute paths), the node slice when ``num_nodes > 1`` (task indices are the node's own) and
    :data:`TASK_BYTES`."""
    opts = payload["options"]
    count_opts = {k: opts.get("schema" if k == "input_schema" else k) for k in COUNT_OPTIONS}
    if cfg.num_nodes > 1:
        count_opts.update(num_nodes=cfg.num_nodes, node_rank=cfg.node_rank)
    return {"vlmpack": __version__, "code": counting_code_digest(), "stage": "count", "task_bytes": TASK_BYTES,
            "options": count_opts,
            "inputs": payload["inputs"], "model_files": payload["model_files"]}


def count_key(cfg: PackConfig, payload: dict) -> str:
    """sha256 (hex) of :func:`count_payload`."""
    return _digest(count_payload(cfg, payload))


def plan_key(opts: PlanOptions | PackConfig, manifest_digest: str) -> str:
    """sha256 (hex) of the manifest digest (:func:`vlmpack.pack.manifest.manifest_digest`) and
    :data:`PLAN_OPTIONS` (of a :class:`PlanOptions`, or of a config: the same key): the key of
    ``plan.npz``."""
    return _digest({"manifest": manifest_digest, "options": {k: getattr(opts, k) for k in PLAN_OPTIONS}})


def write_key(cfg: PackConfig, count: str, plan: str, media_files: list) -> str:
    """sha256 (hex) of the count key, the plan key, the media files as counted (``(reference, size
    in bytes, mtime in ns)``: their bytes are copied into the shards) and :data:`WRITE_OPTIONS`:
    the key of the shard markers."""
    return _digest({"count": count, "plan": plan, "media": media_files,
                    "options": {k: getattr(cfg, k) for k in WRITE_OPTIONS}})


def count_cache_dir(cfg: PackConfig) -> Path | None:
    """The shared count cache root: ``cfg.cache_dir``, else ``$VLMPACK_CACHE``, else
    ``~/.cache/vlmpack/counts``; ``None`` when the value is one of :data:`CACHE_OFF` (no sharing:
    counts live only in ``OUT/.vlmpack/records``). Counts of one count key are in ``<root>/<key>/``."""
    value = cfg.cache_dir if cfg.cache_dir is not None else os.environ.get(ENV_CACHE)
    if value is None:
        return Path.home() / ".cache" / "vlmpack" / "counts"
    if value.strip().lower() in CACHE_OFF:
        return None
    return Path(value).expanduser()
