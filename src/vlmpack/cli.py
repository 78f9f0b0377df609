"""The ``vlmpack`` command line: a thin layer over the Python API.

Commands: ``pack`` (the main job), ``plan`` (pre-flight bin-packing table), ``check`` (load an
output through Energon and check it), ``demo`` (build the real demo data + model directory).
Every vlmpack error ends the command with one line on stderr and exit code 2.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from vlmpack.cli_plan import register as register_plan
from vlmpack.errors import VlmpackError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pack multimodal SFT data into padding-free sequences for Megatron-Energon.")
err = Console(stderr=True)


@app.command()
def pack(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file with the options below; flags override it"),
    input: Optional[list[str]] = typer.Option(None, "--input", "-i", help="JSONL file (plain/.gz/.zst); repeatable"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="output directory"),
    model: Optional[str] = typer.Option(None, "--model", help="local HF-format model directory"),
    media_root: Optional[str] = typer.Option(None, "--media-root", help="media paths are relative to it"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="capacity L of a pack in tokens [8192]"),
    schema: Optional[str] = typer.Option(None, "--schema", help="auto|llava|messages|prompts [auto]"),
    allow_absolute_media: Optional[bool] = typer.Option(None, "--allow-absolute-media/--no-allow-absolute-media"),
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
    from vlmpack.pipeline import run_pack
    from vlmpack.report import summary_lines

    cfg = load_config(config, input=input or None, output=output, model=model, media_root=media_root,
                      seq_len=seq_len, schema=schema, allow_absolute_media=allow_absolute_media,
                      media_check=media_check, overlong=overlong, algorithm=algorithm,
                      max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
                      max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
                      pad_to_multiple_of=pad_to_multiple_of, seed=seed, pretokenize=pretokenize,
                      max_packs_per_shard=max_packs_per_shard,
                      max_shard_bytes=max_shard_bytes, workers=workers,
                      executor=executor, ray_address=ray_address, overwrite=overwrite, progress=progress)
    report = run_pack(cfg)
    table = Table(title=f"vlmpack pack -> {cfg.output}", show_header=False)
    for label, value in summary_lines(report):
        table.add_row(label, value)
    Console().print(table)


@app.command()
def check(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    workers: int = typer.Option(2, "--workers", help="Energon loader workers"),
) -> None:
    """Load OUTPUT through Megatron-Energon and check every pack (ids once, tokens <= seq_len)."""
    from vlmpack.check import check_output

    res = check_output(output, num_workers=workers)
    Console().print(f"energon: {res['packs']:,} packs, {res['samples']:,} samples ({res['unique_ids']:,} unique ids), "
                    f"{res['tokens']:,} tokens, largest pack {res['max_pack_tokens']:,} tokens")
    if res["problems"]:
        for p in res["problems"][:20]:
            err.print(f"problem: {p}")
        raise typer.Exit(1)
    Console().print("check passed: every pack loads, every sample id exactly once, every pack within seq_len")


@app.command()
def demo(
    out: Path = typer.Option(Path("demo"), "--out", help="folder for real_data/ and model/"),
) -> None:
    """Build the real demo data set and the Qwen2.5-VL model directory (tokenizer + processor)."""
    from vlmpack.demo import build_demo_data
    from vlmpack.fixtures import build_qwen2_5_vl_model_dir

    data = build_demo_data(out / "real_data")
    model_dir = build_qwen2_5_vl_model_dir(out / "model")
    Console().print(f"demo data: {data}  model directory: {model_dir}")


register_plan(app)


def main() -> None:
    """Entry point of the ``vlmpack`` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except VlmpackError as e:
        print(f"vlmpack: error: {e}", file=sys.stderr)  # one line, never wrapped
        sys.exit(2)
