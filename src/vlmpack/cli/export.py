"""The ``vlmpack export`` command (see :mod:`vlmpack.export`)."""

from __future__ import annotations

from pathlib import Path

import typer


def export_command(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    dest: Path = typer.Argument(..., help="folder for the Parquet files (one per shard)"),
    check: bool = typer.Option(True, "--check/--no-check", help="export only an output vlmpack check passes"),
    workers: int = typer.Option(2, "--workers", "-j", help="Energon loader processes of the check"),
) -> None:
    """Write the packs as Parquet files (one row per pack: samples JSON + media bytes) that Hugging
    Face datasets loads with load_dataset("parquet", data_files="DEST/*.parquet")."""
    from vlmpack.export import export_parquet

    res = export_parquet(output, dest, check=check, num_workers=workers)
    typer.echo(f"exported {res['packs']:,} packs ({res['samples']:,} samples) into {res['files']} Parquet files, "
               f"{res['bytes'] / 1e6:.1f} MB: {dest}")
