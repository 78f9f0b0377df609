"""The ``vlmpack pack`` command: options -> a pack config -> :func:`vlmpack.pack.pipeline.run_pack`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from vlmpack.config import PackConfig
from vlmpack.packing import ALGORITHMS


def _opt(field: str, *decls: str, help: str, default: str | None = None):
    """A ``typer.Option`` for the config field ``field`` (None: not given, so a ``--config`` YAML
    value stands) whose help shows the field's default (or ``default``) or that it is required."""
    info = PackConfig.model_fields[field]
    if default is None:
        value = info.get_default(call_default_factory=True)
        value = None if value in ({}, []) else value
        default = ("on" if value else "off") if isinstance(value, bool) else "none" if value is None else str(value)
    tail = "(required, here or in --config)" if info.is_required() else f"(default: {default})"
    return typer.Option(None, *decls, help=f"{help} {tail}")


def pack_command(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file with the options below; flags override it"),
    input: Optional[list[str]] = _opt(
        "input", "--input", "-i", help="JSONL file (plain/.gz/.zst/.xz/.bz2), WebDataset .tar shard, Parquet/Arrow "
        "file, datasets save_to_disk dir, JSON array / CSV / YAML file, LLaMA-Factory dataset_info.json, directory, "
        "glob or brace pattern (shard-{000..009}.tar); repeatable"),
    output: Optional[str] = _opt("output", "--output", "-o", help="output directory"),
    model: Optional[str] = _opt("model", "--model", help="local HF-format model directory"),
    media_root: Optional[str] = _opt("media_root", "--media-root", help="media paths are relative to it",
                                     default="the first input's folder"),
    seq_len: Optional[int] = _opt("seq_len", "--seq-len", help="capacity L of a pack in tokens"),
    schema: Optional[str] = _opt("input_schema", "--schema", help="auto|llava|messages|alpaca|prompts"),
    input_format: Optional[str] = _opt("input_format", "--input-format",
                                       help="auto|jsonl|wds|parquet|json|csv|yaml: force the inputs' format"),
    dataset: Optional[list[str]] = _opt("dataset", "--dataset", help="a dataset of a LLaMA-Factory dataset_info.json "
                                        "input to pack; repeatable", default="all of them"),
    text_key: Optional[str] = _opt("text_key", "--text-key", help="key of the turns in each record, e.g. texts",
                                   default="conversations / messages / texts"),
    allow_absolute_media: Optional[bool] = _opt(
        "allow_absolute_media", "--allow-absolute-media/--no-allow-absolute-media",
        help="accept media paths outside --media-root"),
    media_lmdb: Optional[list[str]] = _opt(
        "media_lmdb", "--media-lmdb", help="NAME=PATH: an LMDB image store for lmdb://NAME/KEY references; repeatable",
        default="none"),
    media_check: Optional[str] = _opt("media_check", "--media-check", help="header|verify|decode"),
    max_member_bytes: Optional[int] = _opt(
        "max_member_bytes", "--max-member-bytes", help="bytes: a WebDataset sample whose json member is larger is "
        "rejected (member_too_large) without reading it"),
    max_media_bytes: Optional[int] = _opt(
        "max_media_bytes", "--max-media-bytes", help="bytes, at most the default: a sample with a larger media item "
        "(file, tar member, table cell, LMDB value) is rejected (media_too_large) without reading it"),
    overlong: Optional[str] = _opt("overlong", "--overlong", help="drop|error|split: a sample longer than --seq-len "
                                   "is dropped, stops the run, or is cut at turns into pieces that fit (system turns "
                                   "repeated, each piece ending on an assistant turn; a turn that alone is longer is "
                                   "dropped)"),
    dedup: Optional[str] = _opt("dedup", "--dedup", help="off|exact: exact drops later samples whose conversation "
                                "and media bytes equal an earlier one's, whatever their ids (duplicate_content), "
                                "within this run"),
    algorithm: Optional[str] = _opt("algorithm", "--algorithm",
                                    help=f"bin-packing algorithm, one of {', '.join(ALGORITHMS)}"),
    max_samples_per_pack: Optional[int] = _opt("max_samples_per_pack", "--max-samples-per-pack", help="samples"),
    max_media_per_pack: Optional[int] = _opt("max_media_per_pack", "--max-media-per-pack", help="media items"),
    max_media_tokens_per_pack: Optional[int] = _opt("max_media_tokens_per_pack", "--max-media-tokens-per-pack",
                                                    help="media tokens"),
    group_by_kind: Optional[bool] = _opt("group_by_kind", "--group-by-kind/--no-group-by-kind",
                                         help="keep text/image/video packs homogeneous"),
    pad_to_multiple_of: Optional[int] = _opt("pad_to_multiple_of", "--pad-to-multiple-of",
                                             help="plan each sample's length rounded up to this many tokens"),
    cp_size: Optional[int] = _opt("cp_size", "--cp-size", help="the trainer's context-parallel size: each sample "
                                  "is planned padded to a multiple of 2 x CP tokens (Megatron-Core THD)"),
    tp_size: Optional[int] = _opt("tp_size", "--tp-size", help="the trainer's tensor-parallel size: with "
                                  "--sequence-parallel the sample multiple is 2 x CP x TP"),
    sequence_parallel: Optional[bool] = _opt("sequence_parallel", "--sequence-parallel/--no-sequence-parallel",
                                             help="the trainer uses sequence parallelism"),
    dp_size: Optional[int] = _opt("dp_size", "--dp-size", help="the trainer's data-parallel ranks: each micro "
                                  "step's ranks get packs of similar vision load (pack i: rank i mod N)"),
    global_batch_size: Optional[int] = _opt("global_batch_size", "--global-batch-size", help="packs per optimizer "
                                            "step over all ranks, a multiple of --dp-size: the pack count is made a "
                                            "multiple of it by splitting packs", default="--dp-size"),
    seed: Optional[int] = _opt("seed", "--seed", help="seed of the pack order shuffle"),
    split: Optional[str] = _opt("split", "--split", help="train / val / test shares, e.g. "
                                "train=0.98,val=0.01,test=0.01: each sample's split by a hash of its id; packs and "
                                "shards never mix splits; Energon split parts", default="off"),
    val_fraction: Optional[float] = typer.Option(None, "--val-fraction", help="shorthand of --split "
                                                 "train=1-F,val=F; YAML val_fraction (default: off)"),
    min_pixels: Optional[int] = _opt("min_pixels", "--min-pixels", help="pixels: smallest image after resize (the "
                                     "image processor's min_pixels)", default="the model directory's"),
    max_pixels: Optional[int] = _opt("max_pixels", "--max-pixels", help="pixels: largest image after resize (the "
                                     "image processor's max_pixels)", default="the model directory's"),
    patch_size: Optional[int] = _opt("patch_size", "--patch-size", help="pixels: vision patch side, image and video "
                                     "processors (a seed --factor is patch x merge)", default="the model directory's"),
    merge_size: Optional[int] = _opt("merge_size", "--merge-size", help="patches merged per side into one token",
                                     default="the model directory's"),
    fps: Optional[float] = _opt("fps", "--fps", help="video frames sampled per second (frame sampling on)",
                                default="the model directory's"),
    min_frames: Optional[int] = _opt("min_frames", "--min-frames", help="fewest frames sampled of a video",
                                     default="the model directory's"),
    max_frames: Optional[int] = _opt("max_frames", "--max-frames", help="most frames sampled of a video",
                                     default="the model directory's"),
    video_max_pixels: Optional[int] = _opt("video_max_pixels", "--video-max-pixels", help="pixels: largest video "
                                           "frame after resize (Qwen2/2.5-VL)", default="the model directory's"),
    total_pixels: Optional[int] = _opt("total_pixels", "--total-pixels", help="pixels: largest video after resize, "
                                       "its frames together (Qwen3-VL)", default="the model directory's"),
    processor_kwargs: Optional[str] = _opt("processor_kwargs", "--processor-kwargs", help="JSON object: further "
                                           "processor settings as AutoProcessor.from_pretrained(dir, **kwargs) takes "
                                           "them, e.g. '{\"max_patches\": 6}'", default="none"),
    pretokenize: Optional[bool] = _opt("pretokenize", "--pretokenize/--no-pretokenize",
                                       help="also write each pack's input_ids as an int32 .npy part"),
    special_tokens: Optional[str] = _opt(
        "special_tokens", "--special-tokens", help="reject|split: text holding a tokenizer special token "
        "(<|im_end|>, ...) is rejected, or tokenized as plain text by counting and collator alike"),
    max_reject_fraction: Optional[float] = _opt(
        "max_reject_fraction", "--max-reject-fraction", help="stop after counting when a larger share is rejected"),
    max_packs_per_shard: Optional[int] = _opt("max_packs_per_shard", "--max-packs-per-shard", help="shard rollover"),
    max_shard_bytes: Optional[int] = _opt("max_shard_bytes", "--max-shard-bytes", help="shard rollover, bytes"),
    shard_prefix: Optional[str] = _opt("shard_prefix", "--shard-prefix", help="shard names <prefix>-NNNNNN.tar "
                                       "(letters, digits, _ and -): distinct names for outputs blended together",
                                       default="the layout's (shard; pretrain for LLaVA-OneVision-2), or the "
                                       "dataset's name for one NeMo / dataset_info dataset"),
    layout: Optional[str] = _opt("layout", "--layout", help="output layout: vlmpack (vlmpack's TaskEncoder), "
                                 "llava-ov2-captioning (LLaVA-OneVision-2 PackedCaptioningSample), loongforge-mix-qa "
                                 "(LoongForge packed_multi_mix_qa; with --group-by-kind)", default="vlmpack"),
    workers: Optional[int] = _opt("workers", "--workers", "-j", help="processes", default="CPU cores"),
    num_nodes: Optional[int] = _opt("num_nodes", "--num-nodes", help="split the input tasks over this many "
                                    "independent runs, one output each (blend them with vlmpack metadataset)"),
    node_rank: Optional[int] = _opt("node_rank", "--node-rank", help="which slice this run packs, 0..num-nodes-1"),
    executor: Optional[str] = _opt("executor", "--executor", help="local|ray"),
    ray_address: Optional[str] = _opt("ray_address", "--ray-address", help="Ray cluster address, e.g. auto"),
    overwrite: Optional[bool] = _opt("overwrite", "--overwrite/--no-overwrite",
                                     help="replace an output written with another config"),
    progress: Optional[bool] = _opt("progress", "--progress/--no-progress",
                                    help="progress bars on stderr (only on a terminal)"),
    cache_dir: Optional[str] = _opt("cache_dir", "--cache-dir", help="count cache shared with other outputs and "
                                    "`vlmpack plan --input` ('off': counts stay in OUT only)",
                                    default="$VLMPACK_CACHE, else ~/.cache/vlmpack/counts"),
) -> None:
    """Read, validate, count, plan and write packed shards + Energon metadata + report."""
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack
    from vlmpack.pack.report import next_steps, summary_lines

    cfg = load_config(config, input=input or None, output=output, model=model, media_root=media_root,
                      seq_len=seq_len, schema=schema, input_format=input_format, text_key=text_key,
                      dataset=dataset or None, allow_absolute_media=allow_absolute_media, media_lmdb=media_lmdb or None,
                      media_check=media_check, max_member_bytes=max_member_bytes, max_media_bytes=max_media_bytes,
                      overlong=overlong, dedup=dedup, algorithm=algorithm,
                      max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
                      max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
                      pad_to_multiple_of=pad_to_multiple_of, cp_size=cp_size, tp_size=tp_size,
                      sequence_parallel=sequence_parallel, dp_size=dp_size, global_batch_size=global_batch_size,
                      seed=seed, split=split, val_fraction=val_fraction,
                      min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size, merge_size=merge_size,
                      fps=fps, min_frames=min_frames, max_frames=max_frames, video_max_pixels=video_max_pixels,
                      total_pixels=total_pixels, processor_kwargs=processor_kwargs, pretokenize=pretokenize,
                      special_tokens=special_tokens, max_reject_fraction=max_reject_fraction,
                      max_packs_per_shard=max_packs_per_shard, max_shard_bytes=max_shard_bytes,
                      shard_prefix=shard_prefix, layout=layout, workers=workers, num_nodes=num_nodes,
                      node_rank=node_rank,
                      executor=executor, ray_address=ray_address, overwrite=overwrite, progress=progress,
                      cache_dir=cache_dir)
    report = run_pack(cfg)
    table = Table(title=f"vlmpack pack -> {cfg.output}", show_header=False)
    for label, value in summary_lines(report):
        table.add_row(label, value)
    console = Console()
    console.print(table)
    for label, value in next_steps(cfg.output):  # plain lines: a path or command copied whole
        console.print(f"{label + ':':<9}{value}", highlight=False, markup=False, soft_wrap=True)
