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
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of packs, utilization, samples and tokens "
                                     "lost to overlong, samples and media tokens per pack against L, over the "
                                     "--seq-len values plus a grid 1024..131072; the recommended L is marked."),
    sweep: bool = typer.Option(False, "--sweep", help="Also plan a grid of L (1024, 1536, 2048, ... 131072, and up "
                               "to the longest sample) for the recommendation; implied by --plot."),
    max_drop: float = typer.Option(0.001, "--max-drop", help="Share of samples (a fraction) the recommended L may "
                                   "drop as overlong: the smallest L planned with fewer drops is recommended."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
) -> None:
    """Pre-flight: how the dataset would pack for each --seq-len (writes no shards), and which L to pick."""
    from vlmpack.pack import preflight

    try:
        data = preflight.load_plan_input(source)
        user = [int(x) for x in seq_len]
        rows, _plans = preflight.plan_table(
            data, preflight.sweep_lengths(data, user, grid=sweep or plot is not None), algorithm=algorithm,
            max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
            max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
            pad_to_multiple_of=pad_to_multiple_of, window=window, seed=seed,
        )
        best = preflight.recommend_seq_len(rows, max_drop)
    except VlmpackError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    by_len = {r["seq_len"]: r for r in rows}
    shown = [by_len[L] for L in dict.fromkeys(user)]
    if as_json:
        typer.echo(json.dumps(shown, indent=1))
    else:
        if best is not None and best["seq_len"] not in user:
            shown.append(best)
        typer.echo(preflight.format_table(shown))
        typer.echo(preflight.recommendation_line(best, rows, max_drop))
    if plot is not None:
        try:
            preflight.plot(data, rows, plot, best=best, max_drop=max_drop, marked=user)
        except OSError as exc:
            typer.echo(f"error: cannot write --plot {plot} ({exc.strerror or exc}); choose a writable path", err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"wrote {plot}", err=True)
