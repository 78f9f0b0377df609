"""The ``vlmpack`` command line: a thin layer over the Python API.

Commands: ``pack`` (the main job), ``plan`` (pre-flight bin-packing table), ``check`` (load an
output through Energon and check it), ``demo`` (build the real demo data + model directory).
Every error ends the command with one line on stderr and a documented exit code (:func:`main`).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from vlmpack import signals
from vlmpack.cli_plan import register as register_plan
from vlmpack.errors import VlmpackError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pack multimodal SFT data into padding-free sequences for Megatron-Energon.")
err = Console(stderr=True)


@app.command()
def pack(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file with the options below; flags override it"),
    input: Optional[list[str]] = typer.Option(
        None, "--input", "-i", help="JSONL file (plain/.gz/.zst/.xz/.bz2), WebDataset .tar shard, Parquet/Arrow file, "
        "directory, glob or brace pattern (shard-{000..009}.tar); repeatable"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="output directory"),
    model: Optional[str] = typer.Option(None, "--model", help="local HF-format model directory"),
    media_root: Optional[str] = typer.Option(None, "--media-root", help="media paths are relative to it"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="capacity L of a pack in tokens [8192]"),
    schema: Optional[str] = typer.Option(None, "--schema", help="auto|llava|messages|prompts [auto]"),
    input_format: Optional[str] = typer.Option(None, "--input-format",
                                               help="auto|jsonl|wds|parquet: force the inputs' format [auto: sniffed]"),
    allow_absolute_media: Optional[bool] = typer.Option(None, "--allow-absolute-media/--no-allow-absolute-media"),
    media_lmdb: Optional[list[str]] = typer.Option(
        None, "--media-lmdb", help="NAME=PATH: an LMDB image store for lmdb://NAME/KEY references; repeatable"),
    media_check: Optional[str] = typer.Option(None, "--media-check", help="header|verify|decode [verify]"),
    overlong: Optional[str] = typer.Option(None, "--overlong", help="drop|error [drop]"),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="bin-packing algorithm [bfd]"),
    max_samples_per_pack: Optional[int] = typer.Option(None, "--max-samples-per-pack"),
    max_media_per_pack: Optional[int] = typer.Option(None, "--max-media-per-pack"),
    max_media_tokens_per_pack: Optional[int] = typer.Option(None, "--max-media-tokens-per-pack"),
    group_by_kind: Optional[bool] = typer.Option(None, "--group-by-kind/--no-group-by-kind",
                                                 help="keep text/image/video packs homogeneous"),
    pad_to_multiple_of: Optional[int] = typer.Option(None, "--pad-to-multiple-of"),
    seed: Optional[int] = typer.Option(None, "--seed", help="seed of the pack order shuffle [0]"),
    pretokenize: Optional[bool] = typer.Option(None, "--pretokenize/--no-pretokenize",
                                               help="also write each pack's input_ids as an int32 .npy part"),
    special_tokens: Optional[str] = typer.Option(
        None, "--special-tokens", help="reject|split: text holding a tokenizer special token (<|im_end|>, ...) is "
        "rejected, or tokenized as plain text by counting and collator alike [reject]"),
    max_reject_fraction: Optional[float] = typer.Option(
        None, "--max-reject-fraction", help="stop after counting when a larger share of records is rejected [0.05]"),
    max_packs_per_shard: Optional[int] = typer.Option(None, "--max-packs-per-shard"),
    max_shard_bytes: Optional[int] = typer.Option(None, "--max-shard-bytes"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="processes [cores]"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local|ray [local]"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address, e.g. auto"),
    overwrite: Optional[bool] = typer.Option(None, "--overwrite/--no-overwrite",
                                             help="replace another config's output"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Read, validate, count, plan and write packed shards + Energon metadata + report."""
    from vlmpack.config import load_config
    from vlmpack.pipeline import run_pack
    from vlmpack.report import summary_lines

    cfg = load_config(config, input=input or None, output=output, model=model, media_root=media_root,
                      seq_len=seq_len, schema=schema, input_format=input_format,
                      allow_absolute_media=allow_absolute_media, media_lmdb=media_lmdb or None,
                      media_check=media_check, overlong=overlong, algorithm=algorithm,
                      max_samples_per_pack=max_samples_per_pack, max_media_per_pack=max_media_per_pack,
                      max_media_tokens_per_pack=max_media_tokens_per_pack, group_by_kind=group_by_kind,
                      pad_to_multiple_of=pad_to_multiple_of, seed=seed, pretokenize=pretokenize,
                      special_tokens=special_tokens, max_reject_fraction=max_reject_fraction,
                      max_packs_per_shard=max_packs_per_shard,
                      max_shard_bytes=max_shard_bytes, workers=workers,
                      executor=executor, ray_address=ray_address, overwrite=overwrite, progress=progress)
    report = run_pack(cfg)
    table = Table(title=f"vlmpack pack -> {cfg.output}", show_header=False)
    for label, value in summary_lines(report):
        table.add_row(label, value)
    Console().print(table)


@app.command()
def check(
    output: Path = typer.Argument(..., help="a vlmpack output directory"),
    workers: int = typer.Option(2, "--workers", help="Energon loader workers (0 = in this process)"),
    no_run_dir: bool = typer.Option(False, "--no-run-dir", help="check without OUTPUT/.vlmpack (no completeness)"),
) -> None:
    """Check OUTPUT against its report and run record, then load it through Megatron-Energon.

    Shard sha256 and sizes, tar structure and .tar.idx, token counts, every accepted sample id
    exactly once (see vlmpack.check). Each finding is one 'problem: ...' line on stderr; exit 1.
    """
    from vlmpack.check import check_output

    res = check_output(output, num_workers=workers, run_dir=not no_run_dir)
    problems = res["problems"]
    if res["packs"] or not problems:
        typer.echo(f"energon: {res['packs']:,} packs, {res['samples']:,} samples ({res['unique_ids']:,} unique ids), "
                   f"{res['tokens']:,} tokens, largest pack {res['max_pack_tokens']:,} tokens")
    if problems:
        for p in problems[:50]:
            typer.echo(f"problem: {p}", err=True)
        if len(problems) > 50:
            typer.echo(f"problem: ... and {len(problems) - 50} more problems", err=True)
        raise typer.Exit(1)
    typer.echo("check passed: shards match report.json, every accepted sample exactly once, every pack within "
               "seq_len, every pack loads through Energon" + ("" if not no_run_dir else " (run record not checked)"))


@app.command()
def demo(
    out: Path = typer.Option(Path("demo"), "--out", help="folder for real_data/ and model/"),
) -> None:
    """Build the real demo data set and the Qwen2.5-VL model directory (tokenizer + processor)."""
    from vlmpack.demo import build_demo_data
    from vlmpack.fixtures import build_qwen2_5_vl_model_dir

    data = build_demo_data(out / "real_data")
    model_dir = build_qwen2_5_vl_model_dir(out / "model")
    Console().print(f"demo data: {data}  model directory: {model_dir}")


register_plan(app)


#: Exit codes of every command (also in the README).
EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR, EXIT_RUN_FAILED, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_SIGINT, EXIT_SIGTERM = 130, 143

_OS_HINTS = {
    errno.ENOSPC: "free some space (or choose another --output), then run the same command again to resume",
    errno.EDQUOT: "free some quota (or choose another --output), then run the same command again to resume",
    errno.EFBIG: "the file size limit (ulimit -f) was reached; raise it or lower --max-shard-bytes",
    errno.EROFS: "the file system is read-only; choose a writable --output",
    errno.EACCES: "check the permissions of this path",
    errno.EPERM: "check the permissions of this path",
    errno.ENOTDIR: "a part of this path is a file, not a directory",
    errno.EISDIR: "this path is a directory where a file was expected",
    errno.ENOENT: "check the path",
}


def _os_error_line(e: OSError) -> str:
    """One line for an ``OSError``: the path, the system's words and what to do."""
    from vlmpack.records import display_path

    path = display_path(str(e.filename)) if e.filename is not None else "(no path)"
    hint = _OS_HINTS.get(e.errno or 0, "")
    return f"{path}: {e.strerror or e}" + (f"; {hint}" if hint else "")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vlmpack`` console script: the one error boundary of every command.

    Exit codes: 0 success; 1 ``check`` found problems; 2 an error (bad option, config, input,
    output directory, disk/OS error), one line on stderr; 3 a ``pack`` run that finished but
    failed (more rejections than ``--max-reject-fraction``, or nothing packed); 70 an internal
    error (one line; the traceback with ``VLMPACK_DEBUG=1``); 130 SIGINT and 143 SIGTERM (one line:
    run the same command again to resume; worker processes are stopped at once).
    """
    from vlmpack.errors import Interrupted, RunFailedError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signals.install()
    if hasattr(signal, "SIGXFSZ"):  # a file size limit gives EFBIG (one line), not a core dump
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resume = "interrupted; run the same command again to resume"
    try:
        rv = app(args=argv, standalone_mode=False)
        code = rv if isinstance(rv, int) else EXIT_OK
    except typer.Exit as e:
        code = e.exit_code
    except (typer.Abort, KeyboardInterrupt, Interrupted) as e:
        # everything on disk is consistent (atomic files); skip the interpreter's teardown of
        # torch / tokenizers / Energon (~2 s) so the command ends at once
        print(f"vlmpack: {resume}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + e.signum if isinstance(e, Interrupted) else EXIT_SIGINT)
    except RunFailedError as e:
        print(f"vlmpack: failed: {e}", file=sys.stderr)
        code = EXIT_RUN_FAILED
    except VlmpackError as e:
        print(f"vlmpack: error: {_oneline(e)}", file=sys.stderr)  # one line, never wrapped
        code = EXIT_ERROR
    except OSError as e:
        print(f"vlmpack: error: {_oneline(_os_error_line(e))}", file=sys.stderr)
        code = EXIT_ERROR
    except Exception as e:  # noqa: BLE001 - a bug: still one line, the traceback on request
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):  # a usage error (typer's click)
            e.show()
            sys.exit(EXIT_ERROR)
        if os.environ.get("VLMPACK_DEBUG"):
            traceback.print_exc()
        print(f"vlmpack: internal error: {type(e).__name__}: {_oneline(e)} (set VLMPACK_DEBUG=1 for the traceback "
              "and report it)", file=sys.stderr)
        code = EXIT_INTERNAL
    sys.stdout.flush()
    sys.exit(code)


def _oneline(e: object) -> str:
    text = " ".join(str(e).split())
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
