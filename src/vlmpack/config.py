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
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vlmpack import __version__
from vlmpack.errors import ConfigError

#: Options that change neither the plan nor the bytes written (left out of the fingerprint).
_NOT_FINGERPRINTED = {"workers", "overwrite", "progress", "output", "executor", "ray_address", "max_reject_fraction"}


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
    seq_len: int = Field(8192, gt=0, description="capacity L of a pack, in tokens")
    input_schema: Literal["auto", "llava", "messages", "prompts"] = Field("auto", alias="schema")
    allow_absolute_media: bool = False
    media_check: Literal["header", "verify", "decode"] = "verify"
    overlong: Literal["drop", "error"] = "drop"
    algorithm: str = "bfd"
    max_samples_per_pack: int | None = Field(None, gt=0)
    max_media_per_pack: int | None = Field(None, gt=0)
    max_media_tokens_per_pack: int | None = Field(None, gt=0)
    group_by_kind: bool = False
    pad_to_multiple_of: int | None = Field(None, gt=0)
    seed: int = 0
    pretokenize: bool = Field(False, description="also write each pack's input_ids (int32 .npy part)")
    special_tokens: Literal["reject", "split"] = Field(
        "reject", description="text holding a tokenizer special token: reject the sample, or split it as plain text")
    max_reject_fraction: float = Field(0.05, ge=0, le=1, description="stop after counting when more records "
                                       "than this share are rejected")
    max_packs_per_shard: int = Field(1000, gt=0)
    max_shard_bytes: int = Field(512 << 20, gt=0)
    shard_prefix: str = Field("shard", pattern=r"^[A-Za-z0-9_-]+$")
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, gt=0)
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = Field(None, description="Ray cluster address ('auto' = the running one)")
    overwrite: bool = False
    progress: bool = True

    @field_validator("input", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _defaults(self) -> PackConfig:
        if self.media_root is None:
            self.media_root = str(Path(self.input[0]).parent)
        return self

    def fingerprint_payload(self) -> dict:
        """The canonical content hashed into :meth:`fingerprint` (also saved in the run dir)."""
        from vlmpack.models import COUNTING_FILES

        opts = self.model_dump(by_alias=True, exclude=_NOT_FINGERPRINTED)
        opts["input"] = [os.path.abspath(p) for p in self.input]
        opts["media_root"] = os.path.abspath(str(self.media_root))
        opts["model"] = os.path.abspath(self.model)
        inputs = []
        for p in self.input:
            st = os.stat(p)
            inputs.append({"path": os.path.abspath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        model_files = {}
        for name in COUNTING_FILES:
            f = Path(self.model) / name
            if f.is_file():
                model_files[name] = hashlib.sha256(f.read_bytes()).hexdigest()
        return {"vlmpack": __version__, "options": opts, "inputs": inputs, "model_files": model_files}

    def fingerprint(self) -> str:
        """sha256 (hex) of :meth:`fingerprint_payload` as canonical JSON."""
        blob = json.dumps(self.fingerprint_payload(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def load_config(yaml_path: str | Path | None = None, **overrides: Any) -> PackConfig:
    """Build a :class:`PackConfig` from a YAML file (optional) with ``overrides`` on top.

    ``None`` overrides are ignored (an unset CLI flag). Keys may use dashes or underscores.
    Raises :class:`ConfigError` for an unreadable file, unknown keys or invalid values, and when
    an input file or the model directory does not exist.
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
    if "input_schema" in data:
        data["schema"] = data.pop("input_schema")
    try:
        cfg = PackConfig(**data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "config"
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise ConfigError(f"invalid option {where!r}: {first['msg']}{more}") from None
    for p in cfg.input:
        if not Path(p).is_file():
            raise ConfigError(f"input file not found: {p}")
    if not Path(cfg.model).is_dir():
        raise ConfigError(f"model directory not found: {cfg.model}")
    return cfg
