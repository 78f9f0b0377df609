"""The ``vlmpack plan`` command: pre-flight bin-packing table (see :mod:`vlmpack.pack.preflight`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vlmpack.errors import VlmpackError
from vlmpack.packing import ALGORITHMS


def plan_command(
    source: Path = typer.Argument(..., help="OUT dir of a `pack` run, its manifest.parquet, or a lengths file "
                                  "(.npy or one integer per line)."),
    seq_len: list[int] = typer.Option([8192], "--seq-len", "-L", help="Pack capacity in tokens; repeat to compare."),
    algorithm: str = typer.Option("bfd", "--algorithm", help=f"One of {', '.join(ALGORITHMS)}."),
    max_samples_per_pack: int | None = typer.Option(None, "--max-samples-per-pack"),
    max_media_per_pack: int | None = typer.Option(None, "--max-media-per-pack"),
    max_media_tokens_per_pack: int | None = typer.Option(None, "--max-media-tokens-per-pack"),
    group_by_kind: bool = typer.Option(False, "--group-by-kind/--no-group-by-kind",
                                       help="Keep text / image / video packs homogeneous."),
    pad_to_multiple_of: int | None = typer.Option(None, "--pad-to-multiple-of"),
    window: int | None = typer.Option(None, "--window", help="Window size of the `window` algorithm."),
    seed: int = typer.Option(0, "--seed"),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG with the length and pack-fill histograms."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
) -> None:
    """Pre-flight: how the dataset would pack for each --seq-len (writes no shards)."""
    from vlmpack.pack import preflight

    try:
        data = preflight.load_plan_input(source)
        rows, plans = preflight.plan_table(
            data, list(seq_len), algorithm=algorithm, max_samples_per_pack=max_samples_per_pack,
            max_media_per_pack=max_media_per_pack, max_media_tokens_per_pack=max_media_tokens_per_pack,
            group_by_kind=group_by_kind, pad_to_multiple_of=pad_to_multiple_of, window=window, seed=seed,
        )
    except VlmpackError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(rows, indent=1) if as_json else preflight.format_table(rows))
    if plot is not None:
        preflight.plot(data, rows, plans, plot)
        typer.echo(f"wrote {plot}", err=True)
