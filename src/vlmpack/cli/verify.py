"""The ``vlmpack verify`` command (see :mod:`vlmpack.verify`): the last step before training."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vlmpack.cli.progress import progress_option, verbose_option


def verify_command(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    model: Optional[str] = typer.Option(None, "--model", help="model directory the output was packed with "
                                        "(default: the one recorded in OUTPUT/.vlmpack/config.json)"),
    decode: bool = typer.Option(False, "--decode/--no-decode", help="also encode every pack from decoded pixels "
                                "through the model's image processor, as the collator does (default: off)"),
    workers: int = typer.Option(2, "--workers", "-j", help="processes for the recount, over shards (default: 2; "
                                 "the Energon pass runs in this process)"),
    no_run_dir: bool = typer.Option(False, "--no-run-dir", help="without OUTPUT/.vlmpack: no completeness check "
                                    "(default: off)"),
    progress: bool = progress_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Re-derive every count of OUTPUT from its shard bytes, check it against report.json and the run
    record, and load it through Megatron-Energon. One 'problem: ...' line per finding; exit 1."""
    from vlmpack.cli.check import exit_on_problems
    from vlmpack.cli.progress import Bars, library_warnings
    from vlmpack.verify import verify_output

    with library_warnings(verbose):  # a wrong --model fails here, in a second, before the Energon load and recount
        _load_model(output, model)
    with library_warnings(verbose), Bars(progress) as bars:
        res = verify_output(output, model=model, decode=decode, workers=workers, run_dir=not no_run_dir,
                            progress=bars)
    problems = res["problems"]
    typer.echo(f"verify: {res['recounted_shards']} shards recounted; energon: {res['packs']:,} packs, "
               f"{res['samples']:,} samples ({res['unique_ids']:,} unique ids), {res['tokens']:,} tokens")
    exit_on_problems(problems)
    typer.echo("verify passed: every sample recounted from the shard bytes equals its recorded count, every media "
               "part matches its header, shards match report.json, every accepted id is there once, Energon loads it")


def _load_model(output: Path, model: str | None) -> None:
    """Load the model directory ``verify`` recounts with (``--model``, else the one recorded in
    ``output``; with the recorded processor options), cached for the recount. Raises
    :class:`vlmpack.errors.ConfigError` (one line) for a missing or broken directory; nothing when
    none is given or recorded (:func:`vlmpack.verify.verify_output` says so)."""
    from vlmpack.models import load_model
    from vlmpack.verify import recorded_run

    recorded, processor = recorded_run(output)
    if model or recorded:
        load_model(model or recorded, processor)
