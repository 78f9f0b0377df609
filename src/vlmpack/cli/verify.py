"""The ``vlmpack verify`` command (see :mod:`vlmpack.verify`): the last step before training."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def verify_command(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    model: Optional[str] = typer.Option(None, "--model", help="model directory the output was packed with "
                                        "(default: the one recorded in OUTPUT/.vlmpack/config.json)"),
    decode: bool = typer.Option(False, "--decode/--no-decode", help="also encode every pack from decoded pixels "
                                "through the model's image processor, as the collator does (default: off)"),
    workers: int = typer.Option(2, "--workers", "-j", help="processes (default: 2)"),
    no_run_dir: bool = typer.Option(False, "--no-run-dir", help="without OUTPUT/.vlmpack: no completeness check "
                                    "(default: off)"),
) -> None:
    """Re-derive every count of OUTPUT from its shard bytes, check it against report.json and the run
    record, and load it through Megatron-Energon. One 'problem: ...' line per finding; exit 1."""
    from vlmpack.cli.check import exit_on_problems
    from vlmpack.verify import verify_output

    res = verify_output(output, model=model, decode=decode, workers=workers, run_dir=not no_run_dir)
    problems = res["problems"]
    typer.echo(f"verify: {res['recounted_shards']} shards recounted; energon: {res['packs']:,} packs, "
               f"{res['samples']:,} samples ({res['unique_ids']:,} unique ids), {res['tokens']:,} tokens")
    exit_on_problems(problems)
    typer.echo("verify passed: every sample recounted from the shard bytes equals its recorded count, every media "
               "part matches its header, shards match report.json, every accepted id is there once, Energon loads it")
