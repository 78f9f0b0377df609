"""The configuration of a ``vlmpack pack`` run: one validated object, loadable from YAML, fingerprinted.

Flags override the YAML file (``vlmpack pack --config pack.yaml --seq-len 4096``). The
fingerprint is the sha256 of the canonical JSON of the options that decide the output bytes,
the identity of the input files (path, size, mtime), the model directory's counting files
(tokenizer, template, processor, config) and the vlmpack version. A run directory remembers it,
so a re-run resumes only when nothing that matters changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vlmpack import __version__
from vlmpack.errors import ConfigError, VlmpackError
from vlmpack.records import MAX_MEDIA_BYTES, MAX_MEMBER_BYTES
from vlmpack.sources.paths import check_paths, expand_inputs

#: Options that change neither the plan nor the bytes written (left out of the fingerprint).
_NOT_FINGERPRINTED = {"workers", "overwrite", "progress", "output", "executor", "ray_address", "max_reject_fraction",
                      "cache_dir", "dataset"}  # dataset: the input files it picks are fingerprinted

#: Options left out of the fingerprint at their defaults, so that runs made before they existed keep
#: theirs (see ``fingerprint_payload``): the input size caps, the blend weight factor, the record mapping,
#: the output layout, the split and ``--dedup``.
_CAPS = ("max_member_bytes", "max_media_bytes", "sample_ratio", "record_map", "layout", "split", "dedup")
#: The trainer's parallel layout: left out of the fingerprint at its defaults (no per-sample alignment), like the caps.
_PARALLEL = ("cp_size", "tp_size", "sequence_parallel", "dp_size", "global_batch_size")
#: The processor options (:mod:`vlmpack.models.options`): left out of the fingerprint when unset, like the caps.
PROCESSOR_FIELDS = ("min_pixels", "max_pixels", "patch_size", "merge_size", "fps", "min_frames", "max_frames",
                    "video_max_pixels", "total_pixels", "processor_kwargs")


class PackConfig(BaseModel):
    """Options of ``vlmpack pack`` (the CLI flags have the same names with dashes).

    Units: ``seq_len`` and all token budgets in tokens, ``max_shard_bytes`` in bytes.
    Raises :class:`ConfigError` (from :func:`load_config`) with a one-line message on bad values.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    input: list[str] = Field(min_length=1, description="JSONL files (plain, .gz, .zst)")
    output: str = Field(description="output directory: shards + Energon metadata + report")
    model: str = Field(description="local HF-format model directory (tokenizer, processor, config)")
    media_root: str | None = Field(None, description="media paths are relative to it (default: 1st input's folder)")
    seq_len: int = Field(8192, gt=0, le=2**31 - 1, description="capacity L of a pack, in tokens (int32 counts)")
    input_schema: Literal["auto", "llava", "messages", "alpaca", "prompts"] = Field("auto", alias="schema")
    input_format: Literal["auto", "jsonl", "wds", "parquet", "json", "csv", "yaml"] = Field(
        "auto", description="format of the inputs (auto: sniffed per file; see vlmpack.sources)")
    dataset: list[str] = Field(default_factory=list, description="the datasets of a LLaMA-Factory dataset_info.json "
                               "or NeMo meta file input to pack (default: all)")
    sample_ratio: float = Field(1.0, gt=0, allow_inf_nan=False, description="multiplies the weight vlmpack "
                                "metadataset gives this output (set from a NeMo meta file's sample_ratio)")
    record_map: str | None = Field(None, description="column and tag mapping of the records (set from a "
                                   "dataset_info.json or NeMo meta entry, vlmpack.layouts.mapping)")
    text_key: str | None = Field(None, min_length=1, description="key of the turns in each record (default: "
                                 "conversations / messages / texts by schema detection)")
    allow_absolute_media: bool = False
    media_lmdb: dict[str, str] = Field(
        default_factory=dict, description="LMDB image stores: NAME -> env path, for lmdb://NAME/KEY references")
    media_check: Literal["header", "verify", "decode"] = "verify"
    max_member_bytes: int = Field(MAX_MEMBER_BYTES, gt=0, description="a WebDataset json member larger than this "
                                  "is rejected unread (member_too_large)")
    max_media_bytes: int = Field(MAX_MEDIA_BYTES, gt=0, le=MAX_MEDIA_BYTES, description="a media item larger than "
                                 "this is rejected unread (media_too_large); at most what vlmpack check reads")
    overlong: Literal["drop", "error", "split"] = Field("drop", description="a sample longer than seq_len: drop "
                                                       "it, stop the run, or split it at turns into pieces that fit "
                                                       "(vlmpack.pack.turn_split)")
    dedup: Literal["off", "exact"] = Field("off", description="exact: a sample whose conversation and media bytes "
                                           "equal an earlier one's (ids aside) is rejected duplicate_content")
    algorithm: str = "bfd"
    max_samples_per_pack: int | None = Field(None, gt=0)
    max_media_per_pack: int | None = Field(None, gt=0)
    max_media_tokens_per_pack: int | None = Field(None, gt=0)
    group_by_kind: bool = False
    pad_to_multiple_of: int | None = Field(None, gt=0)
    cp_size: int = Field(1, gt=0, description="the trainer's context-parallel size: each sample is planned padded "
                         "to a multiple of 2 x cp_size tokens (Megatron-Core THD, vlmpack.packing.alignment)")
    tp_size: int = Field(1, gt=0, description="the trainer's tensor-parallel size (multiplies the sample multiple "
                         "with sequence_parallel)")
    sequence_parallel: bool = Field(False, description="the trainer uses sequence parallelism")
    dp_size: int = Field(1, gt=0, description="the trainer's data-parallel ranks: packs ordered so each micro "
                         "step's ranks get similar vision load (vlmpack.packing.balance)")
    global_batch_size: int | None = Field(None, gt=0, description="packs per optimizer step over all data-parallel "
                                          "ranks (Megatron's --global-batch-size; default: dp_size): the pack count "
                                          "is made a multiple of it")
    seed: int = 0
    split: dict[str, float] | None = Field(None, description="train / val / test shares: each sample's split by a "
                                           "hash of its id (vlmpack.pack.splits); None: every pack in train")
    min_pixels: int | None = Field(None, gt=0, description="smallest image after resize, in pixels (the image "
                                   "processor's min_pixels; default: the model directory's)")
    max_pixels: int | None = Field(None, gt=0, description="largest image after resize, in pixels (the image "
                                   "processor's max_pixels; default: the model directory's)")
    patch_size: int | None = Field(None, gt=0, description="vision patch side in pixels, image and video processors "
                                   "(the seed pipeline's --factor is patch x merge)")
    merge_size: int | None = Field(None, gt=0, description="patches merged per side into one token, image and video "
                                   "processors")
    fps: float | None = Field(None, gt=0, allow_inf_nan=False, description="video frames sampled per second (the "
                              "video processor's fps, frame sampling on)")
    min_frames: int | None = Field(None, gt=0, description="fewest frames sampled of a video")
    max_frames: int | None = Field(None, gt=0, description="most frames sampled of a video")
    video_max_pixels: int | None = Field(None, gt=0, description="largest video frame after resize, in pixels "
                                         "(Qwen2/2.5-VL's video max_pixels)")
    total_pixels: int | None = Field(None, gt=0, description="largest video after resize, its frames together, in "
                                     "pixels (Qwen3-VL's video size.longest_edge)")
    processor_kwargs: dict[str, Any] = Field(default_factory=dict, description="further settings for the "
                                             "processors, as AutoProcessor.from_pretrained(dir, **kwargs) takes them")
    pretokenize: bool = Field(False, description="also write each pack's input_ids (int32 .npy part)")
    special_tokens: Literal["reject", "split"] = Field(
        "reject", description="text holding a tokenizer special token: reject the sample, or split it as plain text")
    max_reject_fraction: float = Field(0.05, ge=0, le=1, description="stop after counting when more records "
                                       "than this share are rejected")
    max_packs_per_shard: int = Field(1000, gt=0)
    max_shard_bytes: int = Field(512 << 20, gt=0)
    shard_prefix: str = Field("shard", pattern=r"^[A-Za-z0-9_-]+$", description="shard names <prefix>-NNNNNN.tar "
                              "(default: shard; the layout's own, e.g. pretrain, when the layout has one)")
    layout: str = Field("vlmpack", pattern=r"^[a-z0-9-]+$", description="output layout (vlmpack.sinks.SINKS): "
                        "vlmpack, llava-ov2-captioning, loongforge-mix-qa")
    num_nodes: int = Field(1, gt=0, description="split the input tasks over this many independent runs "
                           "(vlmpack.pack.nodes)")
    node_rank: int = Field(0, ge=0, description="which of the num_nodes slices this run packs (0-based)")
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, gt=0)
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = Field(None, description="Ray cluster address ('auto' = the running one)")
    overwrite: bool = False
    progress: bool = True
    cache_dir: str | None = Field(None, description="shared count cache (vlmpack.pack.stages.count_cache_dir): "
                                  "default $VLMPACK_CACHE, else ~/.cache/vlmpack/counts; 'off': counts in OUT only")

    @field_validator("input", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("media_lmdb", mode="before")
    @classmethod
    def _name_eq_path(cls, v: Any) -> Any:
        """``["NAME=PATH", ...]`` (repeated ``--media-lmdb``) or a mapping."""
        if isinstance(v, (list, tuple)):
            out = {}
            for item in v:
                name, sep, path = str(item).partition("=")
                if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
                    raise ValueError(f"--media-lmdb {item!r}: expected NAME=PATH (NAME of letters, digits, _.-)")
                out[name] = path
            return out
        return v

    @field_validator("split", mode="before")
    @classmethod
    def _shares(cls, v: Any) -> Any:
        """``"train=0.99,val=0.01"`` (``--split``) or a mapping; names train / val / test, shares > 0
        summing to 1."""
        if v is None:
            return v
        if isinstance(v, str):
            out = {}
            for item in v.split(","):
                name, sep, share = item.strip().partition("=")
                try:
                    out[name] = float(share) if sep else float("nan")
                except ValueError:
                    raise ValueError(f"--split {v!r}: expected NAME=SHARE,... (e.g. train=0.99,val=0.01)") from None
            v = out
        if not isinstance(v, dict) or not v or set(v) - {"train", "val", "test"}:
            raise ValueError(f"--split {v!r}: the splits are train, val and test")
        if not all(isinstance(x, (int, float)) and 0 < x <= 1 for x in v.values()) or abs(sum(v.values()) - 1) > 1e-9:
            raise ValueError(f"--split {v!r}: each share in (0, 1], summing to 1")
        return {k: float(x) for k, x in v.items()}

    @field_validator("processor_kwargs", mode="before")
    @classmethod
    def _json_object(cls, v: Any) -> Any:
        """``--processor-kwargs '{"max_patches": 6}'`` (a JSON object) or a mapping."""
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError as e:
                raise ValueError(f"--processor-kwargs {v!r}: not JSON ({e})") from None
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"--processor-kwargs {v!r}: expected a JSON object")
        return v

    @property
    def processor(self) -> dict:
        """The processor options set, canonical (:func:`vlmpack.models.options.canonical`); ``{}``: the
        model directory's processors as they are."""
        return processor_options(self.model_dump())

    @property
    def sample_multiple(self) -> int:
        """Tokens each sample's length is planned padded to (:func:`vlmpack.packing.alignment.sample_multiple`
        of ``cp_size``, ``tp_size``, ``sequence_parallel`` and ``pad_to_multiple_of``); 1: none."""
        from vlmpack.packing.alignment import sample_multiple

        return sample_multiple(self.cp_size, self.tp_size, self.sequence_parallel, self.pad_to_multiple_of)

    @field_validator("node_rank")
    @classmethod
    def _rank_below_nodes(cls, v: int, info) -> int:
        n = info.data.get("num_nodes")
        if isinstance(n, int) and v >= n:
            raise ValueError(f"--node-rank {v} is not below --num-nodes {n} (ranks are 0..{n - 1})")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> PackConfig:
        if self.media_root is None:
            self.media_root = str(Path(self.input[0]).parent)
        return self

    def fingerprint_payload(self) -> dict:
        """The canonical content hashed into :meth:`fingerprint` (also saved in the run dir)."""
        from vlmpack.models import COUNTING_FILES, FAMILIES, model_type

        # a single-node run keeps the fingerprint it had before per-node packing existed, and a run
        # with the default input caps the one it had before the caps existed
        opts = self.model_dump(by_alias=True, exclude=_NOT_FINGERPRINTED | (
            {"num_nodes", "node_rank"} if self.num_nodes == 1 else set()) | {
            k for k in (*_CAPS, *_PARALLEL, *PROCESSOR_FIELDS)
            if getattr(self, k) == type(self).model_fields[k].get_default(call_default_factory=True)})
        opts["input"] = [os.path.abspath(p) for p in self.input]
        opts["media_root"] = os.path.abspath(str(self.media_root))
        opts["model"] = os.path.abspath(self.model)
        opts["media_lmdb"] = {k: os.path.abspath(v) for k, v in sorted(self.media_lmdb.items())}
        inputs = []
        for p in self.input:
            st = os.stat(p)
            inputs.append({"path": os.path.abspath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        model_files = {}
        try:  # the family's own list (a class attribute: no tokenizer is loaded here)
            names = getattr(FAMILIES.get(model_type(self.model)), "counting_files", COUNTING_FILES)
        except VlmpackError:  # no / broken config.json: refused with one line when the model is loaded
            names = COUNTING_FILES
        for name in names:
            f = Path(self.model) / name
            if f.is_file():
                model_files[name] = hashlib.sha256(f.read_bytes()).hexdigest()
        return {"vlmpack": __version__, "options": opts, "inputs": inputs, "model_files": model_files}

    def fingerprint(self, payload: dict | None = None) -> str:
        """sha256 (hex) of :meth:`fingerprint_payload` (or of ``payload``, one already made) as
        canonical JSON."""
        blob = json.dumps(payload if payload is not None else self.fingerprint_payload(), sort_keys=True,
                          separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def processor_options(options: dict) -> dict:
    """The canonical processor options (:func:`vlmpack.models.options.canonical`) of a config's
    options (a :class:`PackConfig` dump, or the ``options`` of a run's saved fingerprint payload,
    where unset ones are absent). Raises :class:`ConfigError` for bad values."""
    from vlmpack.models.options import canonical

    return canonical({k: options.get(k) for k in PROCESSOR_FIELDS[:-1]}, options.get("processor_kwargs") or None)


def load_config(yaml_path: str | Path | None = None, **overrides: Any) -> PackConfig:
    """Build a :class:`PackConfig` from a YAML file (optional) with ``overrides`` on top.

    ``None`` overrides are ignored (an unset CLI flag). Keys may use dashes or underscores.
    Raises :class:`ConfigError` for an unreadable file, unknown keys or invalid values, and when
    an input file or the model directory does not exist (input and output paths: see
    :func:`vlmpack.sources.paths.check_paths`); :class:`~vlmpack.errors.InputError` when an input's content is not
    JSONL or its compressed head is corrupt.
    """
    data: dict[str, Any] = {}
    if yaml_path is not None:
        try:
            loaded = yaml.safe_load(Path(yaml_path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{yaml_path}: cannot read the config ({e})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{yaml_path}: the config must be a mapping of option: value")
        data = {k.replace("-", "_"): v for k, v in loaded.items()}
    data.update({k.replace("-", "_"): v for k, v in overrides.items() if v is not None})
    vf = data.pop("val_fraction", None)
    if vf is not None:  # --val-fraction F: train 1-F, val F
        if not isinstance(vf, (int, float)) or not 0 < vf < 1:
            raise ConfigError(f"invalid option 'val_fraction': {vf!r} is not a share in (0, 1)")
        if data.get("split") is not None:
            raise ConfigError("give --val-fraction or --split, not both")
        data["split"] = {"train": 1 - float(vf), "val": float(vf)}
    if isinstance(data.get("input"), (str, list)):
        _apply_registries(data, [data["input"]] if isinstance(data["input"], str) else data["input"])
        data["input"] = expand_inputs([data["input"]] if isinstance(data["input"], str) else data["input"],
                                      data.get("dataset") or None)
    if "input_schema" in data:
        data["schema"] = data.pop("input_schema")
    try:
        cfg = PackConfig(**data)
    except ValidationError as e:
        required = [str(x["loc"][0]) for x in e.errors() if x["type"] == "missing" and len(x["loc"]) == 1]
        if required:  # name them as the flags that give them
            raise ConfigError(f"missing {', '.join('--' + k.replace('_', '-') for k in required)} (or give "
                              f"{'them' if len(required) > 1 else 'it'} in --config)") from None
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "config"
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise ConfigError(f"invalid option {where!r}: {first['msg']}{more}") from None
    check_paths(cfg.input, cfg.output, cfg.input_format)
    for name, env in cfg.media_lmdb.items():
        if not os.path.exists(env):
            raise ConfigError(f"--media-lmdb {name}={env}: no LMDB environment there; give its directory (data.mdb)")
    if not Path(cfg.model).is_dir():
        raise ConfigError(f"model directory not found: {cfg.model}")
    return cfg


def _apply_registries(data: dict, inputs: list) -> None:
    """The options dataset registries among ``inputs`` set: the record mapping of their chosen
    datasets' columns and tags (``record_map``, :mod:`vlmpack.layouts.mapping`; LLaMA-Factory's
    ``dataset_info.json`` and NeMo meta files), and of a NeMo meta file (:mod:`vlmpack.sources.nemo_meta`) its
    chosen datasets' ``media_dir`` (without one: ``--media-root`` if given, else the working
    directory, as NeMo) as ``media_root`` and their
    ``sample_ratio``, and, for one dataset, its name as ``shard_prefix`` (characters outside
    ``[A-Za-z0-9_-]`` as ``_``), so that outputs of several datasets blend. Raises
    :class:`ConfigError` when meta files disagree, or ``media_root`` / ``sample_ratio`` are also
    given with other values."""
    from vlmpack.sources.dataset_info import is_registry, registry_map
    from vlmpack.sources.nemo_meta import is_meta, meta_selection

    names = data.get("dataset") or None
    paths = [p for p in inputs if isinstance(p, str) and "\x00" not in p]
    maps = {registry_map(p, names) for p in paths if is_registry(p)}
    picked = [meta_selection(p, names) for p in paths if is_meta(p)]
    maps |= {m.record_map for m in picked}
    if len(maps) > 1:
        raise ConfigError("the dataset registries among the inputs name their columns or tags differently; pack "
                          "each to its own output")
    if maps and (value := maps.pop()) is not None:
        data["record_map"] = value
    if not picked:
        return
    if len({(m.media_dir, m.sample_ratio) for m in picked}) > 1:
        raise ConfigError("the NeMo meta inputs give different media_dir or sample_ratio; pack each to its own "
                          "output")
    sel = picked[0]
    if sel.media_dir is None and data.get("media_root") is None:  # NeMo opens them from the working directory
        data["media_root"] = os.getcwd()
    for key, value in (("media_root", sel.media_dir), ("sample_ratio", sel.sample_ratio)):
        if value is None:
            continue
        given = data.get(key)
        if given is not None and (os.path.abspath(str(given)) if key == "media_root" else float(given)) != value:
            flag = "--media-root" if key == "media_root" else key
            raise ConfigError(f"{flag} {given} differs from the {key.replace('root', 'dir')} "
                              f"{value} of the NeMo meta file's datasets {', '.join(sel.names)}; leave it out")
        data[key] = value
    if len(sel.names) == 1 and data.get("shard_prefix") is None:  # blends of per-dataset outputs need distinct names
        data["shard_prefix"] = re.sub(r"[^A-Za-z0-9_-]", "_", sel.names[0])[:64]
