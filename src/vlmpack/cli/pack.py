"""The ``vlmpack pack`` command: options -> a pack config -> :func:`vlmpack.pack.pipeline.run_pack`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table


def pack_command(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file with the options below; flags override it"),
    input: Optional[list[str]] = typer.Option(
        None, "--input", "-i", help="JSONL file (plain/.gz/.zst/.xz/.bz2), WebDataset .tar shard, Parquet/Arrow file, "
        "directory, glob or brace pattern (shard-{000..009}.tar); repeatable"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="output directory"),
    model: Optional[str] = typer.Option(None, "--model", help="local HF-format model directory"),
    media_root: Optional[str] = typer.Option(None, "--media-root", help="media paths are relative to it"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="capacity L of a pack in tokens [8192]"),
    schema: Optional[str] = typer.Option(None, "--schema", help="auto|llava|messages|prompts [auto]"),
    input_format: Optional[str] = typer.Option(None, "--input-format",
                                               help="auto|jsonl|wds|parquet: force the inputs' format [auto: sniffed]"),
    text_key: Optional[str] = typer.Option(
        None, "--text-key", help="key of the turns in each record, e.g. texts (WDS-native packer schema) [auto]"),
    allow_absolute_media: Optional[bool] = typer.Option(None, "--allow-absolute-media/--no-allow-absolute-media"),
    media_lmdb: Optional[list[str]] = typer.Option(
        None, "--media-lmdb", help="NAME=PATH: an LMDB image store for lmdb://NAME/KEY references; repeatable"),
    media_check: Optional[str] = typer.Option(None, "--media-check", help="header|verify|decode [verify]"),
    overlong: Optional[str] = typer.Option(None, "--overlong", help="drop|error [drop]"),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="bin-packing algorithm [bfd]"),
    max_samples_per_pack: Optional[int] = typer.Option(None, "--max-samples-per-pack"),
    max_media_per_pack: Optional[int] = typer.Option(None, "--max-media-per-pack"),
    max_media_tokens_per_pack: Optional[int] = typer.Option(None, "--max-media-tokens-per-pack"),
    group_by_kind: Optional[bool] = typer.Option(None, "--group-by-kind/--no-group-by-kind",
                                                 help="keep text/image/video packs homogeneous"),
    pad_to_multiple_of: Optional[int] = typer.Option(None, "--pad-to-multiple-of"),
    seed: Optional[int] = typer.Option(None, "--seed", help="seed of the pack order shuffle [0]"),
    pretokenize: Optional[bool] = typer.Option(None, "--pretokenize/--no-pretokenize",
                                               help="also write each pack's input_ids as an int32 .npy part"),
    special_tokens: Optional[str] = typer.Option(
        None, "--special-tokens", help="reject|split: text holding a tokenizer special token (<|im_end|>, ...) is "
        "rejected, or tokenized as plain text by counting and collator alike [reject]"),
    max_reject_fraction: Optional[float] = typer.Option(
        None, "--max-reject-fraction", help="stop after counting when a larger share of records is rejected [0.05]"),
    max_packs_per_shard: Optional[int] = typer.Option(None, "--max-packs-per-shard"),
    max_shard_bytes: Optional[int] = typer.Option(None, "--max-shard-bytes"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="processes [cores]"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local|ray [local]"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, e.g. auto"),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite/--no-overwrite",
                                             help="replace another config's output"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Read, validate, count, plan and write packed shards + Energon metadata + report."""
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack
    from vlmpack.pack.report import summary_lines

    cfg = load_config(config, input=input or None, output=output, model=model, media_root=media_root,
                      seq_len=seq_len, schema=schema, input_format=input_format, text_key=text_key,
                      allow_absolute_media=allow_absolute_media, media_lmdb=media_lmdb or None,
                      media_check=media_check, overlong=overlong, algorithm=algorithm,
                      max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
                      max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
                      pad_to_multiple_of=pad_to_multiple_of, seed=seed, pretokenize=pretokenize,
                      special_tokens=special_tokens, max_reject_fraction=max_reject_fraction,
                      max_packs_per_shard=max_packs_per_shard,
                      max_shard_bytes=max_shard_bytes, workers=workers,
                      executor=executor, ray_address=ray_address, overwrite=overwrite, progress=progress)
    report = run_pack(cfg)
    table = Table(title=f"vlmpack pack -> {cfg.output}", show_header=False)
    for label, value in summary_lines(report):
        table.add_row(label, value)
    Console().print(table)
