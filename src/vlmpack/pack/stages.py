"""Stage keys of ``vlmpack pack``: count once, plan many.

Each stage is keyed by its own inputs only (the table of which option belongs to which stage is in
:mod:`vlmpack.pack.rundir`), so a change re-runs that stage and the ones after it, never the ones
before:

- count key (:func:`count_key`): sha256 of the vlmpack version, the source of the counting code
  (:func:`counting_code_digest`: a rule fixed between releases must not reuse cached counts),
  the task size (:func:`task_bytes`), the inputs'
  identity (absolute path, size in bytes, mtime in ns) and content (sha256 of the bytes,
  :func:`input_sha256`: an input replaced in place with the same size and mtime gets another key),
  the model directory (absolute path and the sha256 of each counting file,
  ``ModelFamily.counting_files``) and :data:`COUNT_OPTIONS`. Each media item is checked per task at
  reuse time instead (its content sha256, :mod:`vlmpack.media.fingerprint`;
  :func:`vlmpack.pack.count_task.media_changed`).
- plan key (:func:`plan_key`): sha256 of the manifest digest (the counts) and :data:`PLAN_OPTIONS`.
- write key (:func:`write_key`): sha256 of the count key, the plan key, the media items as counted
  (reference, size, content sha256: they are copied into the shards) and :data:`WRITE_OPTIONS`.

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
from vlmpack.config import PROCESSOR_FIELDS, PackConfig, processor_options
from vlmpack.fsio import cache_root
from vlmpack.packing.alignment import planned_multiple
from vlmpack.records import MAX_MEDIA_BYTES, MAX_MEMBER_BYTES, display_path

#: Input bytes per count task at most (:func:`task_bytes`; the output never depends on the task size).
TASK_BYTES = 2 << 20
#: Count tasks an input set is cut into at least, while tasks keep :data:`MIN_TASK_BYTES` bytes.
MIN_TASKS = 16
#: Input bytes per count task at least.
MIN_TASK_BYTES = 512 << 10


def task_bytes(cfg: PackConfig) -> int:
    """Input bytes per count task for ``cfg``'s inputs: :data:`TASK_BYTES`, or, for inputs of fewer than
    :data:`MIN_TASKS` x :data:`TASK_BYTES` bytes in all, their total / :data:`MIN_TASKS` (at least
    :data:`MIN_TASK_BYTES`, never above :data:`TASK_BYTES`), so a small run's tasks spread evenly over
    the workers (the 7 MB demo set made four 2 MiB tasks: on two workers one of them waited a second for
    the other). It depends on the inputs' sizes only, never on ``--workers``: counts are reused whatever
    the worker count, and the shards never depend on it. Part of the count key (:func:`count_payload`).
    Raises ``OSError`` when an input cannot be read."""
    total = sum(os.path.getsize(p) for p in cfg.input)
    return min(TASK_BYTES, max(MIN_TASK_BYTES, total // MIN_TASKS))


#: Options that decide the counts and the samples' serialized entries (the count stage).
COUNT_OPTIONS = ("input", "input_format", "input_schema", "text_key", "record_map", "media_root",
                 "allow_absolute_media", "media_lmdb", "media_check", "special_tokens", "model", "max_member_bytes",
                 "max_media_bytes", "layout", *PROCESSOR_FIELDS)


@dataclass(frozen=True)
class CountOptions:
    """What the count stage uses of :data:`COUNT_OPTIONS` besides the inputs (which come as task
    ranges, :mod:`vlmpack.pack.nodes`): the model directory, the media rules (``media_root`` the
    folder relative references resolve in, absolute references allowed or not, LMDB stores as
    ``(name, env path)`` pairs, ``media_check`` ``"header"`` | ``"verify"`` | ``"decode"``), the record
    layout (``input_schema``, ``text_key``, ``record_map``: a registry's column and tag mapping) and the
    ``special_tokens`` policy (``"reject"`` | ``"split"``), the output ``layout`` (a sample it cannot
    hold is rejected), the ``processor`` options (canonical JSON, :mod:`vlmpack.models.options`; ``""``:
    none) and the input caps in bytes (``max_member_bytes``: a WebDataset ``json`` member,
    ``max_media_bytes``: a media item; larger ones are rejected unread). ``token_limit`` (tokens,
    ``--seq-len``): a sample whose text alone needs more under any tokenization is rejected
    ``overlong`` before tokenizing (:func:`vlmpack.pack.validate.skip_overlong_texts`); not part of
    the count key: a saved task is reused for another limit while no sample crosses it
    (:meth:`vlmpack.pack.count_task.MeasureResult.fits`). ``split_limit`` (tokens; ``--overlong split``:
    ``--seq-len``, else 0): a longer sample is cut into pieces at turns (:mod:`vlmpack.pack.turn_split`;
    in the count key). Built from a config with :meth:`of`."""

    model: str
    media_root: str
    input_schema: str = "auto"
    text_key: str | None = None
    allow_absolute_media: bool = False
    media_lmdb: tuple[tuple[str, str], ...] = ()
    media_check: str = "verify"
    special_tokens: str = "reject"
    max_member_bytes: int = MAX_MEMBER_BYTES
    max_media_bytes: int = MAX_MEDIA_BYTES
    token_limit: int = 2**31 - 1
    record_map: str | None = None
    layout: str = "vlmpack"
    processor: str = ""
    split_limit: int = 0

    @classmethod
    def of(cls, cfg: PackConfig) -> CountOptions:
        """The count options of ``cfg``."""
        from vlmpack.models.options import processor_json

        split = cfg.seq_len if cfg.overlong == "split" else 0  # pieces are cut to L; their texts are never skipped
        return cls(str(cfg.model), str(cfg.media_root), cfg.input_schema, cfg.text_key, cfg.allow_absolute_media,
                   tuple(sorted(cfg.media_lmdb.items())), cfg.media_check, cfg.special_tokens, cfg.max_member_bytes,
                   cfg.max_media_bytes, 2**31 - 1 if split else cfg.seq_len, cfg.record_map, cfg.layout,
                   processor_json(cfg.processor), split)


@dataclass(frozen=True)
class Workers:
    """How a stage's tasks run (changes no output byte): ``executor`` ``"local"`` (a process pool of
    ``workers`` processes) or ``"ray"`` (``ray_address``), with a progress bar when ``progress``.
    Built from a config with :meth:`of`."""

    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None
    progress: bool = False

    @classmethod
    def of(cls, cfg: PackConfig) -> Workers:
        """The execution options of ``cfg``."""
        return cls(cfg.workers, cfg.executor, cfg.ray_address, cfg.progress)


#: Options that decide the plan, given the counts (the plan stage; ``overlong``: drop or stop).
PLAN_OPTIONS = ("seq_len", "algorithm", "max_samples_per_pack", "max_media_per_pack", "max_media_tokens_per_pack",
                "group_by_kind", "pad_to_multiple_of", "seed", "overlong", "split", "dp_size", "global_batch_size",
                "cp_size", "tp_size", "sequence_parallel", "dedup")
#: Plan options left out of the plan key at these defaults, so plans made before they existed keep theirs.
_PLAN_DEFAULTS = {"dp_size": 1, "global_batch_size": None, "cp_size": 1, "tp_size": 1, "sequence_parallel": False,
                  "dedup": "off"}
@dataclass(frozen=True)
class PlanOptions:
    """What the plan stage uses (:data:`PLAN_OPTIONS`, nothing else): capacity ``seq_len`` and the
    per-pack budgets in tokens, the algorithm name (:data:`vlmpack.packing.ALGORITHMS`), the
    constraints (``pad_to_multiple_of``: the multiple each sample is planned padded to, the config's
    :attr:`~vlmpack.config.PackConfig.sample_multiple` when ``--cp-size`` or sequence parallelism set
    one), the pack-order ``seed``, the ``overlong`` policy (``"drop"`` | ``"error"``), the
    ``split`` shares (:mod:`vlmpack.pack.splits`; None: one split), the data-parallel shape
    (``dp_size``, ``global_batch_size``: :mod:`vlmpack.packing.balance`), the trainer's
    ``cp_size`` / ``tp_size`` / ``sequence_parallel`` (recorded; ``pad_to_multiple_of`` carries their
    multiple) and ``dedup`` (``"exact"``: :mod:`vlmpack.pack.dedup` before planning).
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
    split: tuple[tuple[str, float], ...] | None = None
    dp_size: int = 1
    global_batch_size: int | None = None
    cp_size: int = 1
    tp_size: int = 1
    sequence_parallel: bool = False
    dedup: str = "off"

    @property
    def data_parallel(self) -> bool:
        """``--dp-size`` / ``--global-batch-size`` given: the plan is shaped for them
        (:mod:`vlmpack.packing.balance`)."""
        return self.dp_size > 1 or self.global_batch_size is not None

    @classmethod
    def of(cls, cfg: PackConfig) -> PlanOptions:
        """The plan options of ``cfg``."""
        opts = {k: getattr(cfg, k) for k in PLAN_OPTIONS if k != "split"}
        opts["pad_to_multiple_of"] = planned_multiple(cfg.cp_size, cfg.tp_size, cfg.sequence_parallel,
                                                      cfg.pad_to_multiple_of)  # --cp-size: samples planned padded
        return cls(**opts, split=split_items(cfg.split))


#: Options that decide the shard bytes and names, given the plan (the write stage).
WRITE_OPTIONS = ("pretokenize", "max_packs_per_shard", "max_shard_bytes", "shard_prefix", "num_nodes", "node_rank")


@dataclass(frozen=True)
class WriteOptions:
    """What the write stage uses: the output folder, the capacity ``seq_len`` (tokens; no pack may
    hold more), the shard bounds of :data:`WRITE_OPTIONS` (``max_packs_per_shard`` packs,
    ``max_shard_bytes`` bytes, names ``<prefix>-NNNNNN.tar`` where ``prefix`` already holds the node
    slice, :func:`vlmpack.pack.nodes.shard_prefix`), the model directory when each pack also gets its
    ``input_ids`` (``pretokenize``; else ``None``) with its ``processor`` options, and the media
    rules the writer checks again (``media_root``, ``allow_absolute_media``), and the output
    ``layout`` that makes each pack's members. Built from a config with :meth:`of`."""

    output: str
    seq_len: int
    prefix: str = "shard"
    max_packs_per_shard: int = 1000
    max_shard_bytes: int = 512 << 20
    pretokenize_model: str | None = None
    media_root: str = "."
    allow_absolute_media: bool = False
    layout: str = "vlmpack"
    processor: str = ""

    @classmethod
    def of(cls, cfg: PackConfig, prefix: str) -> WriteOptions:
        """The write options of ``cfg``, shards named with ``prefix``."""
        from vlmpack.models.options import processor_json

        return cls(str(Path(cfg.output)), cfg.seq_len, prefix, cfg.max_packs_per_shard, cfg.max_shard_bytes,
                   str(cfg.model) if cfg.pretokenize else None, str(cfg.media_root), cfg.allow_absolute_media,
                   cfg.layout, processor_json(cfg.processor))


#: Options that change no output byte (where to write, how fast, when to stop, where the cache is;
#: ``dataset`` only picks the files of a dataset_info.json, and the count stage keys the files themselves).
NO_STAGE = ("output", "workers", "executor", "ray_address", "overwrite", "progress", "max_reject_fraction",
            "cache_dir", "dataset", "sample_ratio")  # sample_ratio: recorded in report.json only


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


#: Parts of the vlmpack package whose code does not decide counts or serialized entries (all the
#: other ``.py`` files are hashed into the count key): the training side, the CLI, Energon loading,
#: planning, writing, reports and the output checks.
COUNTING_CODE_EXCLUDE = ("train", "cli", "energon", "packing", "pack/write.py", "pack/report.py",
                         "pack/figures.py", "pack/preflight.py", "check", "check_blend.py", "verify.py",
                         "inspection.py", "export.py", "packfmt/shards.py")


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


_INPUT_SHA: dict[tuple, str] = {}  # (path, size, mtime_ns, ctime_ns, inode) -> sha256, this process only


def input_sha256(path: str) -> str:
    """sha256 (hex) of the bytes of the input file ``path`` (read in 1 MiB pieces, about 1.7 GB/s;
    the demo set's 7 MB in 4 ms), kept for the life of the process while the file's stat (size,
    mtime, ctime, inode) is unchanged, so one run hashes each input once. Raises ``OSError``."""
    from vlmpack.fsio import file_sha256

    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _INPUT_SHA:
        _INPUT_SHA[key] = file_sha256(path)[0]
    return _INPUT_SHA[key]


def count_payload(cfg: PackConfig, payload: dict) -> dict:
    """What the count key hashes: from ``payload`` (:meth:`PackConfig.fingerprint_payload`, so the
    model files are hashed once) the inputs' identity and the model files, the inputs' content
    (:func:`input_sha256`), the inputs' names as given (``input_names``: the counts' records and
    rejections name their file so, and a shard's ``source.file`` is that name: the same file named
    another way, absolute vs relative or from another folder, is counted under its own name), plus
    :data:`COUNT_OPTIONS` (absolute paths), the node slice when ``num_nodes > 1`` (task indices are
    the node's own) and the task size (:func:`task_bytes`). Raises ``OSError``
    when an input cannot be read."""
    opts = payload["options"]
    count_opts = {k: opts.get("schema" if k == "input_schema" else k) for k in COUNT_OPTIONS
                  if k not in PROCESSOR_FIELDS}  # those as one canonical entry, below
    if count_opts["layout"] is None:  # the default layout: the key runs made before --layout existed had
        del count_opts["layout"]
    if processor := processor_options(opts):  # none set: the key runs made before they existed had
        count_opts["processor"] = processor
    if opts.get("overlong") == "split":  # the pieces depend on L (else: the key runs before --overlong split had)
        count_opts["overlong_split"] = opts.get("seq_len")
    if cfg.num_nodes > 1:
        count_opts.update(num_nodes=cfg.num_nodes, node_rank=cfg.node_rank)
    return {"vlmpack": __version__, "code": counting_code_digest(), "stage": "count", "task_bytes": task_bytes(cfg),
            "options": count_opts, "inputs": payload["inputs"], "input_names": [display_path(p) for p in cfg.input],
            "inputs_sha256": [input_sha256(p) for p in cfg.input], "model_files": payload["model_files"]}


def count_key(cfg: PackConfig, payload: dict) -> str:
    """sha256 (hex) of :func:`count_payload`."""
    return _digest(count_payload(cfg, payload))


def split_items(split) -> tuple[tuple[str, float], ...] | None:
    """``--split`` shares as ``((name, share), ...)`` in train / val / test order (from the config's
    mapping or a :class:`PlanOptions`' pairs), None without."""
    if split is None:
        return None
    shares = dict(split)
    return tuple((name, float(shares[name])) for name in ("train", "val", "test") if name in shares)


def plan_key(opts: PlanOptions | PackConfig, manifest_digest: str) -> str:
    """sha256 (hex) of the manifest digest (:func:`vlmpack.pack.manifest.manifest_digest`) and
    :data:`PLAN_OPTIONS` (of a :class:`PlanOptions`, or of a config: the same key): the key of
    ``plan.npz``."""
    if not isinstance(opts, PlanOptions):  # a config: its plan options (the per-sample multiple of --cp-size)
        opts = PlanOptions.of(opts)
    options = {k: getattr(opts, k) for k in PLAN_OPTIONS}
    options["split"] = split_items(options["split"])
    if options["split"] is None:  # no split: the key plans made before --split existed had
        del options["split"]
    for k, v in _PLAN_DEFAULTS.items():  # likewise before --dp-size, --cp-size and --dedup
        if options[k] == v:
            del options[k]
    return _digest({"manifest": manifest_digest, "options": options})


def write_key(cfg: PackConfig, count: str, plan: str, media_files: list) -> str:
    """sha256 (hex) of the count key, the plan key, the media items as counted (``media_files``: the
    digest of their references, sizes and content sha256, :func:`vlmpack.pack.count_stage.media_digest`;
    their bytes are copied into the shards) and :data:`WRITE_OPTIONS`: the key of the shard markers."""
    return _digest({"count": count, "plan": plan, "media": media_files,
                    "options": {k: getattr(cfg, k) for k in WRITE_OPTIONS}})


def count_cache_dir(cfg: PackConfig) -> Path | None:
    """The shared count cache root: ``cfg.cache_dir``, else ``$VLMPACK_CACHE``, else
    ``~/.cache/vlmpack/counts`` (:func:`vlmpack.fsio.cache_root`); ``None`` when it is off (no sharing:
    counts live only in ``OUT/.vlmpack/records``). Counts of one count key are in ``<root>/<key>/``."""
    return cache_root(cfg.cache_dir)
