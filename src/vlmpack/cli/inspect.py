"""The ``vlmpack inspect`` command (see :mod:`vlmpack.inspection`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vlmpack.cli.progress import progress_option, verbose_option


def inspect_command(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    pack: Optional[str] = typer.Option(None, "--pack", help="pack key, e.g. pack000000017 (default: the first pack)"),
    sample: Optional[str] = typer.Option(None, "--sample", help="the pack holding this sample id"),
    random_n: int = typer.Option(0, "--random", help="N packs drawn at random (default: 0, i.e. off)"),
    seed: int = typer.Option(0, "--seed", help="seed of --random (default: 0)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write an HTML page with the images inline "
                                        "(default: none)"),
    model: Optional[str] = typer.Option(None, "--model", help="model directory (default: the one recorded in "
                                        "OUTPUT/.vlmpack/config.json)"),
    plain: bool = typer.Option(False, "--plain", help="no colours: trained tokens marked [[ like this ]] (the "
                               "default when stdout is no terminal)"),
    progress: bool = progress_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Show packs as the model sees them: samples, sources, token counts and shares, media, and the
    rendered text with the trained (label) tokens highlighted: in colour on a terminal, else (and
    with --plain) between [[ and ]]."""
    import sys

    from vlmpack.cli.progress import Bars, library_warnings
    from vlmpack.inspection import find_packs, inspect_pack, model_of, render_html, render_terminal
    from vlmpack.verify import recorded_run

    model_dir = model_of(output, model)
    processor = recorded_run(output)[1]
    plain = plain or not sys.stdout.isatty()
    with library_warnings(verbose):
        found = find_packs(output, pack=pack, sample=sample, random_n=random_n, seed=seed)
        done = []
        with Bars(progress) as bars:  # encoded first, printed after: the bar never mixes with the packs
            bars("encode packs", 0, len(found))
            for shard, key, parts in found:
                samples = inspect_pack(parts, model_dir, where=f"{output / shard} {key}", processor=processor)
                done.append((shard, key, parts, samples))
                bars("encode packs")
        for shard, key, _parts, samples in done:
            render_terminal(shard, key, samples, plain=plain)
        if html is not None:
            render_html(done, html)
            typer.echo(f"wrote {html}", err=True)
