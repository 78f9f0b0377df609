"""The ``vlmpack check`` command (see :mod:`vlmpack.check`)."""

from __future__ import annotations

from pathlib import Path

import typer

from vlmpack.cli.progress import progress_option, verbose_option


def check_command(
    output: Path = typer.Argument(..., help="a vlmpack output directory, or a MetadatasetV2 YAML blending several"),
    workers: int = typer.Option(2, "--workers", help="Energon loader workers (0 = in this process)"),
    no_run_dir: bool = typer.Option(False, "--no-run-dir", help="check without OUTPUT/.vlmpack (no completeness)"),
    progress: bool = progress_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Check OUTPUT against its report and run record, then load it through Megatron-Energon.

    Shard sha256 and sizes, tar structure and .tar.idx, token counts, every accepted sample id
    exactly once (see vlmpack.check). A blend YAML (vlmpack metadataset): every dataset so, plus
    one seq_len and model, no colliding shard names or duplicate ids across nodes, weights as
    recorded, and Energon loads the blend (see vlmpack.check_blend). Each finding is one
    'problem: ...' line on stderr; exit 1.
    """
    from vlmpack.check import check_output
    from vlmpack.cli.progress import Bars, library_warnings

    if output.is_file():
        with library_warnings(verbose):
            return _check_blend(output, workers, no_run_dir)

    with library_warnings(verbose), Bars(progress) as bars:
        res = check_output(output, num_workers=workers, run_dir=not no_run_dir, progress=bars)
    problems = res["problems"]
    if res["packs"] or not problems:
        typer.echo(f"energon: {res['packs']:,} packs, {res['samples']:,} samples ({res['unique_ids']:,} unique ids), "
                   f"{res['tokens']:,} tokens, largest pack {res['max_pack_tokens']:,} tokens")
    exit_on_problems(problems)
    typer.echo("check passed: shards match report.json, every accepted sample exactly once, every pack within "
               "seq_len, every pack loads through Energon" + ("" if not no_run_dir else " (run record not checked)"))


def _check_blend(path: Path, workers: int, no_run_dir: bool) -> None:
    from vlmpack.check_blend import check_blend

    res = check_blend(path, num_workers=workers, run_dir=not no_run_dir)
    for d in res["datasets"]:
        typer.echo(f"{d['path']}: weight {d['weight']:,}, energon: {d['packs']:,} packs, {d['samples']:,} samples, "
                   f"{d['tokens']:,} tokens")
    exit_on_problems(res["problems"])
    drawn = ", ".join(f"{v} from {k}" for k, v in sorted(res["drawn"].items()))
    typer.echo(f"check passed: {len(res['datasets'])} datasets pass, one seq_len and model, no colliding shard names "
               f"or ids, weights = recorded {res['weight']}, Energon loads the blend (packs drawn: {drawn})")


def exit_on_problems(problems: list[str], limit: int = 50) -> None:
    """Print one ``problem: ...`` line per finding on stderr (the first ``limit``, then how many
    more) and exit 1; nothing when ``problems`` is empty."""
    if not problems:
        return
    for p in problems[:limit]:
        typer.echo(f"problem: {p}", err=True)
    if len(problems) > limit:
        typer.echo(f"problem: ... and {len(problems) - limit} more problems", err=True)
    raise typer.Exit(1)
