"""The ``vlmpack metadataset`` command (see :mod:`vlmpack.energon.metadataset`)."""

from __future__ import annotations

from pathlib import Path

import typer


def metadataset_command(
    outputs: list[Path] = typer.Argument(..., help="vlmpack output directories (e.g. the N outputs of "
                                         "vlmpack pack --num-nodes N)"),
    out: Path = typer.Option(..., "--output", "-o", help="the MetadatasetV2 YAML file to write"),
    weight: str = typer.Option("samples", "--weight", help="blend weight of each output from its report.json: "
                               "samples (packed)|tokens|packs|records (read: the input's line count, "
                               "LLaVA-OneVision-2's rule)"),
    subflavor: list[str] = typer.Option([], "--subflavor", help="KEY=VALUE for every output, or I:KEY=VALUE for "
                                        "the I-th output (from 0); repeatable"),
) -> None:
    """Write an Energon MetadatasetV2 blending OUTPUTS (absolute paths, weights from their reports).

    Refuses, with one line (exit 2), outputs with an unfinished report, another seq_len or model,
    shards that are byte for byte in two outputs, a per-node split with a node missing, or a sample id accepted by two
    nodes of one split. Load it with get_train_dataset(BLEND.yaml, ...); check it with
    vlmpack check BLEND.yaml.
    """
    from vlmpack.energon import metadataset as mds
    from vlmpack.errors import ConfigError

    if weight not in mds.WEIGHTS:
        raise ConfigError(f"--weight {weight!r}: choose one of {', '.join(mds.WEIGHTS)}")
    flavors = mds.parse_subflavors(subflavor, len(outputs))
    loaded = []
    for o in outputs:
        path, rep, problem = mds.load_output(o)
        if problem is not None:
            raise ConfigError(problem)
        loaded.append((path, rep))
    problems = mds.blend_problems(loaded, mds.split_ids(loaded))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)
    doc = mds.build_metadataset(loaded, weight, flavors)
    mds.write_metadataset(out, doc)
    total = sum(e["weight"] for e in doc["splits"]["train"]["blend"])
    for e in doc["splits"]["train"]["blend"]:
        typer.echo(f"{e['path']}: weight {e['weight']:,} {weight} ({100 * e['weight'] / total:.1f} %)")
    typer.echo(f"wrote {out}: MetadatasetV2 blend of {len(loaded)} outputs, seq_len {loaded[0][1]['seq_len']}; "
               f"load it with get_train_dataset({str(out)!r}, ...)")
