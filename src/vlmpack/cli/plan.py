"""The ``vlmpack plan`` command: pre-flight bin-packing table (see :mod:`vlmpack.pack.preflight`).

Counts come from a finished ``pack`` (``SOURCE``: its OUT dir or manifest), a lengths file, or the
inputs and model themselves (``--input`` + ``--model``, no ``SOURCE``): then they are counted
through ``pack``'s count stage and cache (:func:`vlmpack.pack.count_stage.count_inputs`), writing no
shard, and a later ``vlmpack pack`` with the same count options reuses them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from vlmpack.cli.helptext import choices
from vlmpack.errors import ConfigError, VlmpackError
from vlmpack.packing import ALGORITHMS
from vlmpack.packing.alignment import planned_multiple


def plan_command(
    source: Optional[Path] = typer.Argument(None, help="OUT dir of a `pack` run, its manifest.parquet, or a lengths "
                                            "file (.npy or one integer per line); or none, with --input and --model."),
    seq_len: list[int] = typer.Option([8192], "--seq-len", "-L", help="Pack capacity in tokens; repeat to compare."),
    algorithm: str = typer.Option("bfd", "--algorithm", help=f"Bin-packing algorithm, one of {', '.join(ALGORITHMS)}."),
    max_samples_per_pack: int | None = typer.Option(None, "--max-samples-per-pack", help="As `pack "
                                                    "--max-samples-per-pack`: at most this many samples a pack."),
    max_media_per_pack: int | None = typer.Option(None, "--max-media-per-pack", help="As `pack --max-media-per-pack`: "
                                                  "at most this many media items a pack."),
    max_media_tokens_per_pack: int | None = typer.Option(None, "--max-media-tokens-per-pack", help="As `pack "
                                                         "--max-media-tokens-per-pack`: at most this many media "
                                                         "tokens a pack."),
    group_by_kind: bool = typer.Option(False, "--group-by-kind/--no-group-by-kind",
                                       help="Keep text / image / video packs homogeneous."),
    pad_to_multiple_of: int | None = typer.Option(None, "--pad-to-multiple-of", help="Plan each sample's length "
                                                  "rounded up to this many tokens."),
    cp_size: int = typer.Option(1, "--cp-size", help="As `pack --cp-size`: each sample planned padded to a "
                                "multiple of 2 x CP tokens."),
    tp_size: int = typer.Option(1, "--tp-size", help="As `pack --tp-size`."),
    sequence_parallel: bool = typer.Option(False, "--sequence-parallel/--no-sequence-parallel",
                                           help="As `pack --sequence-parallel`."),
    window: int | None = typer.Option(None, "--window", help="Window size of the `window` algorithm."),
    seed: int = typer.Option(0, "--seed", help="As `pack --seed`: seed of the pack order shuffle."),
    dp_size: int = typer.Option(1, "--dp-size", help="As `pack --dp-size`: also print, per --seq-len, the ranks' "
                                "loads per step before and after the data-parallel shape."),
    global_batch_size: int | None = typer.Option(None, "--global-batch-size", help="As `pack --global-batch-size` "
                                                 "(default: --dp-size)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of packs, utilization, samples and tokens "
                                     "lost to overlong, samples and media tokens per pack against L, over the "
                                     "--seq-len values plus a grid 1024..131072; the recommended L is marked."),
    sweep: bool = typer.Option(False, "--sweep", help="Also plan a grid of L (1024, 1536, 2048, ... 131072, and up "
                               "to the longest sample) for the recommendation; implied by --plot."),
    max_drop: float = typer.Option(0.001, "--max-drop", help="Share of samples (a fraction) the recommended L may "
                                   "drop as overlong: the smallest L planned with fewer drops is recommended."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
    config: Optional[Path] = typer.Option(None, "--config", help="A `vlmpack pack` YAML: its input and counting "
                                          "options (flags below override it); implies counting from the inputs."),
    input: Optional[list[str]] = typer.Option(None, "--input", "-i", help="Count these inputs (as `pack --input`; "
                                              "repeatable) instead of reading SOURCE; needs --model."),
    model: Optional[str] = typer.Option(None, "--model", help="Model directory whose rules count the inputs."),
    media_root: Optional[str] = typer.Option(None, "--media-root", help="As `pack --media-root`."),
    schema: Optional[str] = typer.Option(None, "--schema", help=f"As `pack --schema`: {choices('input_schema')}."),
    input_format: Optional[str] = typer.Option(None, "--input-format", help="As `pack --input-format`: "
                                               f"{choices('input_format')}."),
    text_key: Optional[str] = typer.Option(None, "--text-key", help="As `pack --text-key`."),
    allow_absolute_media: Optional[bool] = typer.Option(None, "--allow-absolute-media/--no-allow-absolute-media",
                                                        help="As `pack --allow-absolute-media`."),
    media_lmdb: Optional[list[str]] = typer.Option(None, "--media-lmdb", help="As `pack --media-lmdb`."),
    media_check: Optional[str] = typer.Option(None, "--media-check", help="As `pack --media-check`: "
                                              f"{choices('media_check')}."),
    max_member_bytes: Optional[int] = typer.Option(None, "--max-member-bytes", help="As `pack --max-member-bytes`."),
    max_media_bytes: Optional[int] = typer.Option(None, "--max-media-bytes", help="As `pack --max-media-bytes`."),
    special_tokens: Optional[str] = typer.Option(None, "--special-tokens", help="As `pack --special-tokens`: "
                                                 f"{choices('special_tokens')}."),
    min_pixels: Optional[int] = typer.Option(None, "--min-pixels", help="As `pack --min-pixels`."),
    max_pixels: Optional[int] = typer.Option(None, "--max-pixels", help="As `pack --max-pixels`."),
    patch_size: Optional[int] = typer.Option(None, "--patch-size", help="As `pack --patch-size`."),
    merge_size: Optional[int] = typer.Option(None, "--merge-size", help="As `pack --merge-size`."),
    fps: Optional[float] = typer.Option(None, "--fps", help="As `pack --fps`."),
    min_frames: Optional[int] = typer.Option(None, "--min-frames", help="As `pack --min-frames`."),
    max_frames: Optional[int] = typer.Option(None, "--max-frames", help="As `pack --max-frames`."),
    video_max_pixels: Optional[int] = typer.Option(None, "--video-max-pixels", help="As `pack --video-max-pixels`."),
    total_pixels: Optional[int] = typer.Option(None, "--total-pixels", help="As `pack --total-pixels`."),
    processor_kwargs: Optional[str] = typer.Option(None, "--processor-kwargs", help="As `pack --processor-kwargs`."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="Counting processes (default: CPU cores)."),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="Count cache shared with `pack` (default: "
                                            "$VLMPACK_CACHE, else ~/.cache/vlmpack/counts; 'off': none)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress bars on stderr."),
) -> None:
    """Pre-flight: how the dataset would pack for each --seq-len (writes no shards), and which L to pick."""
    from vlmpack.pack import preflight

    counting = config is not None or bool(input) or model is not None
    try:
        if counting and source is not None:
            raise ConfigError(f"give either SOURCE ({source}) or --input/--model/--config, not both")
        if counting:  # texts that cannot fit the largest L planned are rejected untokenized (overlong)
            longest = max([int(x) for x in seq_len] + ([preflight.GRID_MAX] if sweep or plot is not None else []))
            data = _count(config, seq_len=longest, input=input or None, model=model, media_root=media_root,
                          schema=schema,
                          input_format=input_format, text_key=text_key, allow_absolute_media=allow_absolute_media,
                          media_lmdb=media_lmdb or None, media_check=media_check, special_tokens=special_tokens,
                          max_member_bytes=max_member_bytes, max_media_bytes=max_media_bytes,
                          min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size, merge_size=merge_size,
                          fps=fps, min_frames=min_frames, max_frames=max_frames, video_max_pixels=video_max_pixels,
                          total_pixels=total_pixels, processor_kwargs=processor_kwargs,
                          workers=workers, cache_dir=cache_dir, progress=progress)
        elif source is None:
            raise ConfigError("nothing to plan: give SOURCE (a pack OUT dir, manifest or lengths file) or "
                              "--input ... --model DIR")
        else:
            data = preflight.load_plan_input(source)
        user = [int(x) for x in seq_len]
        multiple = planned_multiple(cp_size, tp_size, sequence_parallel, pad_to_multiple_of)  # as pack plans it
        rows, _plans = preflight.plan_table(
            data, preflight.sweep_lengths(data, user, grid=sweep or plot is not None), algorithm=algorithm,
            max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
            max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
            pad_to_multiple_of=multiple, window=window, seed=seed,
        )
        best = preflight.recommend_seq_len(rows, max_drop)
        dp_rows = []
        if dp_size > 1 or global_batch_size is not None:
            from vlmpack.pack.data_parallel import data_parallel_rows

            by_len = {r["seq_len"]: plan for r, plan in zip(rows, _plans)}
            dp_rows = data_parallel_rows(data.lengths, data.media_tokens, {L: by_len[L] for L in dict.fromkeys(user)},
                                         dp_size=dp_size, global_batch_size=global_batch_size, seed=seed,
                                         pad_to_multiple_of=multiple)
    except VlmpackError as exc:
        typer.echo(f"vlmpack: error: {' '.join(str(exc).split())}", err=True)  # as every command: one line
        raise typer.Exit(2) from exc
    by_len = {r["seq_len"]: r for r in rows}
    shown = [by_len[L] for L in dict.fromkeys(user)]
    if as_json:
        typer.echo(json.dumps([r | ({"data_parallel": dp_rows[i]} if dp_rows else {}) for i, r in enumerate(shown)],
                              indent=1))
    else:
        if best is not None and best["seq_len"] not in user:
            shown.append(best)
        typer.echo(preflight.format_table(shown))
        typer.echo(preflight.recommendation_line(best, rows, max_drop))
        if dp_rows:
            from vlmpack.pack.data_parallel import format_data_parallel

            typer.echo(format_data_parallel(dp_rows))
    if plot is not None:
        try:
            preflight.plot(data, rows, plot, best=best, max_drop=max_drop, marked=user)
        except OSError as exc:
            typer.echo(f"vlmpack: error: cannot write --plot {plot} ({exc.strerror or exc}); choose a writable path",
                       err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"wrote {plot}", err=True)


def _count(config: Path | None, **overrides):
    """Count the inputs of ``overrides`` (+ ``config``) through the count stage and its cache;
    returns the :class:`vlmpack.pack.preflight.PlanInput`. One line on stderr says what was read,
    rejected and reused. Raises :class:`ConfigError` / :class:`vlmpack.errors.InputError`."""
    from vlmpack.config import load_config
    from vlmpack.pack.count_stage import count_inputs
    from vlmpack.pack.preflight import plan_input_from_table

    if not overrides.get("input") and config is None:
        raise ConfigError("--input is needed to count (or a --config with input:), e.g. --input data.jsonl")
    if not overrides.get("model") and config is None:
        raise ConfigError("--model is needed to count the inputs, e.g. --model /models/Qwen2.5-VL-7B-Instruct")
    # plan writes no OUT: the config's required output is a placeholder, never written
    cfg = load_config(config, output=".", **overrides)
    counted = count_inputs(cfg)
    u = counted.reuse
    where = counted.store if counted.store is not None else "nowhere (cache off)"
    typer.echo(f"counted {counted.stats.records:,} records: {counted.manifest.num_rows:,} samples, "
               f"{len(counted.rejections):,} rejected; {u['count_tasks_reused']}/{u['count_tasks']} count tasks "
               f"reused; counts kept in {where}", err=True)
    return plan_input_from_table(counted.manifest, ", ".join(cfg.input))
