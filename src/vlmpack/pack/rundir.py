"""The run directory ``OUT/.vlmpack/``: atomic files, an exclusive lock, and what ``--overwrite`` may delete.

Rules (so that a run directory survives a kill, a full disk or a second run at any moment):

- every file vlmpack writes goes through :func:`atomic_write` (temp file + ``fsync`` + rename +
  ``fsync`` of the folder): a reader sees the old file or the whole new one, never a part;
- state is data, never code: JSON (sealed with its own sha256, :func:`vlmpack.fsio.sealed_json_bytes`,
  except ``config.json``, which holds the fingerprint of the config it records), Arrow / Parquet and
  NumPy files read with ``allow_pickle=False``, each named with its sha256 in a sealed file
  (``stages.json``: manifest and plan; a count result: its part and arrays files); nothing in a
  run directory or count cache is ever unpickled or executed;
- a stage file that cannot be read (empty, truncated, foreign) or does not match its checksum counts
  as missing: the task that wrote it is done again (:func:`vlmpack.fsio.read_sealed_json` returns
  ``None``);
- :func:`lock_output` takes an exclusive ``flock`` on ``.vlmpack/lock`` for the whole run; a
  second run on the same ``OUT`` fails at once with one line naming the holder's PID (the lock
  goes with the process, also when it is SIGKILLed);
- :func:`prepare_output` refuses a non-empty ``OUT`` that holds no vlmpack run record, even with
  ``--overwrite``; with ``--overwrite`` it deletes only what the run record says vlmpack wrote
  (:data:`OWNED` + the shards listed in ``.vlmpack/outputs.json``, ``.nv-meta/.info.json`` and
  the shard markers) and keeps the stage files :data:`STAGE_FILES` (counts, manifest, plan,
  figures), which the next run reuses only under their own stage key;
- vlmpack writes no symbolic link into ``OUT`` and follows none: :func:`prepare_output` refuses
  an ``OUT`` where one stands in place of what it writes or deletes (``.vlmpack``, its lock and
  records, ``.nv-meta``, the reports, the shards) with one line, and ``--overwrite`` deletes
  only regular files found by ``lstat`` (:func:`vlmpack.fsio.remove_regular`), never a folder.

Stage keys (:mod:`vlmpack.pack.stages`): each stage is keyed by its own inputs, so a change re-runs
that stage and the ones after it only.

======== =========================================================== ==========================
stage    key (sha256 of)                                             kept in
======== =========================================================== ==========================
count    vlmpack version, task size, inputs (path, size, mtime,     ``records/`` (stamp
         content sha256), model dir + its counting files' sha256,    ``records/count.json``)
         ``input_format``, ``schema``, ``text_key``, ``media_root``, and the count cache
         ``media_lmdb``, ``allow_absolute_media``, ``media_check``,  ``<cache-dir>/<key>/``
         ``special_tokens``, ``max_member_bytes``, ``max_media_bytes``
         (+ ``num_nodes``/``node_rank`` if > 1);
         each task also re-checks its media items' content sha256
         (:mod:`vlmpack.media.fingerprint`)
plan     manifest digest (the counts), ``seq_len``, ``algorithm``,   ``plan.npz``,
         ``max_samples_per_pack``, ``max_media_per_pack``,           ``manifest.parquet``
         ``max_media_tokens_per_pack``, ``group_by_kind``,           (key in ``stages.json``)
         ``pad_to_multiple_of``, ``seed``, ``overlong``
write    count key, plan key, media items as counted (sha256),       ``shards/<name>.json``
         ``pretokenize``, ``max_packs_per_shard``,                   markers (+ each sample's
         ``max_shard_bytes``, ``shard_prefix``, ``num_nodes``,       content sha256) + the
         ``node_rank``                                               shards
(none)   ``output``, ``workers``, ``executor``, ``ray_address``,     -
         ``overwrite``, ``progress``, ``max_reject_fraction``,
         ``cache_dir``
======== =========================================================== ==========================

A finished run writes ``hashes.json`` last (:mod:`vlmpack.pack.seal`): the sha256 of the reports,
``config.json``, manifest, plan and every shard and ``.tar.idx``, what ``vlmpack check`` compares.

``config.json`` keeps the fingerprint of the whole config (every keyed option): a run on an
``OUT`` made with other options needs ``--overwrite``, which then re-plans and rewrites without
counting when only plan or write options changed; the refusal names the options that differ (the
record keeps them, :func:`describe_change`). A run that failed at start-up or at the reject gate
(:func:`did_work`: it wrote no output) is no previous run: the corrected command needs no ``--overwrite``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from vlmpack.errors import RunDirError
from vlmpack.fsio import atomic_write, json_bytes, links_under, read_json, read_sealed_json, remove_regular

RUN_DIR = ".vlmpack"
#: Files and folders of ``OUT`` that belong to vlmpack besides the shards.
OWNED = ("rejects.jsonl", "report.json", "report.html", ".nv-meta")
#: Files and folders of ``OUT/.vlmpack`` that ``--overwrite`` keeps: each is reused only under its stage key.
STAGE_FILES = ("records", "manifest.parquet", "plan.npz", "stages.json", "figures.json")
_LOCK = "lock"
_held: dict[str, int] = {}  # OUT -> fd of its lock file, for the life of the process


def lock_output(out: Path) -> None:
    """Take the exclusive lock of ``out`` (``out/.vlmpack/lock``) for the rest of the process.

    Raises :class:`RunDirError` (one line with the holder's PID) when another process holds it.
    Idempotent within a process."""
    import fcntl

    key = os.path.realpath(out)
    if key in _held:
        return
    run = out / RUN_DIR
    run.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(run / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunDirError(f"{run / _LOCK} is a symbolic link; vlmpack follows none: remove it") from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunDirError(f"{out} is in use by another vlmpack run (pid {holder}); wait for it to finish "
                              "or choose another --output") from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = fd


def unlock_output(out: Path) -> None:
    """Release the lock taken by :func:`lock_output` (no-op when not held)."""
    fd = _held.pop(os.path.realpath(out), None)
    if fd is not None:
        os.close(fd)


def is_run_dir(out: Path) -> bool:
    """True when ``out`` holds a vlmpack run directory (``.vlmpack/``, its record readable or not)."""
    return (out / RUN_DIR).is_dir()


def written_shards(out: Path) -> set[str]:
    """Names of the shards the run record of ``out`` says vlmpack wrote (outputs list, Energon
    ``.info.json``, shard markers)."""
    names: set[str] = set()
    listed = read_sealed_json(out / RUN_DIR / "outputs.json")
    if isinstance(listed, dict):
        names.update(str(n) for n in listed.get("shards", []))
    info = read_json(out / ".nv-meta" / ".info.json")
    if isinstance(info, dict) and isinstance(info.get("shard_counts"), dict):
        names.update(str(n) for n in info["shard_counts"])
    markers = out / RUN_DIR / "shards"
    if markers.is_dir():
        names.update(p.name[:-len(".json")] for p in markers.glob("*.json"))
    return {n for n in names if n and "/" not in n and n not in (".", "..")}


def prepare_output(out: Path, fingerprint: str, payload: dict, *, overwrite: bool) -> Path:
    """Check, lock and (re)initialise ``out`` for a run with ``fingerprint``; returns ``out/.vlmpack``.

    - ``out`` a file -> :class:`RunDirError`; missing or empty -> a new run;
    - non-empty without a run record -> :class:`RunDirError`, also with ``overwrite`` (vlmpack
      never deletes files it did not write);
    - same fingerprint -> resume; another (or an unreadable) record -> :class:`RunDirError` naming
      the options that differ (:func:`describe_change`) unless ``overwrite``, which deletes only
      vlmpack's own files first;
    - the record of a run that failed at start-up or at the reject gate (:func:`did_work`) is no
      previous run: replaced without ``overwrite``.
    """
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--output {out} is a file, not a directory; choose a directory")
    refuse_links(out)
    if out.is_dir() and any(out.iterdir()) and not is_run_dir(out):
        hint = "" if not overwrite else " (--overwrite only replaces vlmpack's own outputs)"
        raise RunDirError(f"{out} is not empty and holds no vlmpack run record; choose a new or empty --output"
                          + hint)
    lock_output(out)
    run = out / RUN_DIR
    cfg_file = run / "config.json"
    if cfg_file.exists():
        old = read_json(cfg_file)
        old_fp = old.get("fingerprint") if isinstance(old, dict) else None
        if old_fp == fingerprint:
            _ensure_dirs(run)
            return run
        if not overwrite and did_work(out):
            change = describe_change(old, payload) if isinstance(old_fp, str) else None
            what = (f"a run of another config: {change}" if change else
                    f"a run of another config (fingerprint {old_fp[:12]} != {fingerprint[:12]})"
                    if isinstance(old_fp, str) else "a run record that cannot be read (.vlmpack/config.json)")
            raise RunDirError(f"{out} holds {what}; pass --overwrite to start over or choose another --output")
        clear_output(out)
    _ensure_dirs(run)
    atomic_write(cfg_file, json_bytes({"fingerprint": fingerprint, **payload}, indent=1, sort_keys=True))
    return run


def did_work(out: Path) -> bool:
    """Whether the run recorded in ``out`` is a previous run that ``--overwrite`` must be asked to
    replace: it wrote an output (outputs list, shard marker, a report) or finished a count task
    (``.vlmpack/records/part-*.result.json``). False for a run that failed at start-up (a wrong
    ``--model``: nothing counted) or was stopped by the reject gate (a missing ``--media-root``: its
    report says ``failed`` at ``count``); its counts stay, under their count key, as with ``--overwrite``."""
    run = out / RUN_DIR
    if any((run / "shards").glob("*.json")) or (run / "outputs.json").exists():
        return True
    report = read_json(out / "report.json")
    if isinstance(report, dict) and report.get("status") == "failed" and report.get("stage") == "count":
        return False
    return (out / "report.json").exists() or any((run / "records").glob("part-*.result.json"))


def describe_change(old: dict, payload: dict, *, most: int = 4) -> str | None:
    """What differs between a saved run record ``old`` and ``payload`` (both
    :meth:`vlmpack.config.PackConfig.fingerprint_payload` shaped), as flags, e.g.
    ``--model /a -> /b, --seq-len 4096 -> 8192`` (at most ``most``, then ``and N more``); the
    changed input files, model files or vlmpack version when no option differs. ``None`` when the
    record holds no ``options`` (made by an older vlmpack) or nothing can be named."""
    was, now = old.get("options"), payload.get("options", {})
    if not isinstance(was, dict):
        return None
    missing = object()
    diffs = [f"--{k.replace('_', '-')} {_show(was.get(k, missing), missing)} -> {_show(now.get(k, missing), missing)}"
             for k in sorted(set(was) | set(now)) if was.get(k, missing) != now.get(k, missing)]
    if not diffs:
        listed = old.get("inputs") if isinstance(old.get("inputs"), list) else []
        old_inputs = {str(i.get("path")): i for i in listed if isinstance(i, dict)}
        diffs = [f"input {i['path']} changed since (size or mtime)" for i in payload.get("inputs", [])
                 if old_inputs.get(i["path"]) != i]
    if not diffs and old.get("model_files") != payload.get("model_files"):
        was_files, now_files = old.get("model_files"), payload.get("model_files", {})
        was_files = was_files if isinstance(was_files, dict) else {}
        names = sorted(n for n in set(was_files) | set(now_files) if was_files.get(n) != now_files.get(n))
        diffs = [f"model files changed: {', '.join(names)}"]
    if not diffs and old.get("vlmpack") != payload.get("vlmpack"):
        diffs = [f"vlmpack {old.get('vlmpack')} -> {payload.get('vlmpack')}"]
    if not diffs:
        return None
    more = f", and {len(diffs) - most} more" if len(diffs) > most else ""
    return ", ".join(diffs[:most]) + more


def _show(value: object, missing: object) -> str:
    if value is missing:
        return "default"
    text = ",".join(map(str, value)) if isinstance(value, list) else json_bytes(value).decode() if isinstance(
        value, dict) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: Files of ``.nv-meta`` vlmpack writes (:func:`vlmpack.energon.meta.write_metadata`, ``vlmpack`` layout).
_META_FILES = (".info.json", "split.yaml", "dataset.yaml", "sample_loader.py")
#: Files of the run directory besides :data:`STAGE_FILES` and the shard markers.
_RUN_FILES = ("config.json", "outputs.json", "hashes.json")


def refuse_links(out: Path) -> None:
    """Raise :class:`RunDirError` (one line) when a symbolic link stands in ``out`` where vlmpack
    writes or deletes: ``.vlmpack`` and its lock, records and stage files, ``.nv-meta`` and its
    files, :data:`OWNED`, and the shards the run record lists (+ ``.idx``). Nothing is followed."""
    first = [RUN_DIR, *OWNED, *(f"{RUN_DIR}/{n}" for n in (_LOCK, *_RUN_FILES, "shards", *STAGE_FILES)),
             *(f".nv-meta/{n}" for n in _META_FILES)]
    links = links_under(out, first) or links_under(out, [x for n in written_shards(out) for x in (n, n + ".idx")])
    if links:
        raise RunDirError(f"{links[0]} is a symbolic link; vlmpack writes none into an output and follows none: "
                          "remove it, or choose another --output")


def clear_output(out: Path) -> None:
    """Delete what vlmpack wrote in ``out`` (keeping the lock file and the stage files
    :data:`STAGE_FILES`): its shards and their ``.idx``/``.tmp``, :data:`OWNED` and the rest of
    the run directory (config record, shard markers, outputs list). Only regular files named by
    the run record are deleted, each found by ``lstat`` (a link is never followed, a folder never
    removed with what it holds; ``.nv-meta`` goes when it is left empty)."""
    shards = written_shards(out)
    names = [x for n in shards for x in (n, n + ".idx")] + [n for n in OWNED if n != ".nv-meta"]
    names += [f".nv-meta/{n}" for n in _META_FILES] + [f"{RUN_DIR}/{n}" for n in _RUN_FILES]
    names += [f"{RUN_DIR}/shards/{n}.json" for n in shards]
    for name in names:
        if not links_under(out, [name]):
            remove_regular(out / name)
            remove_regular(out / (name + ".tmp"))
    with contextlib.suppress(OSError):  # not empty (a file vlmpack did not write), or a link: kept
        if not (out / ".nv-meta").is_symlink():
            (out / ".nv-meta").rmdir()


def _ensure_dirs(run: Path) -> None:
    (run / "records").mkdir(parents=True, exist_ok=True)
    (run / "shards").mkdir(exist_ok=True)
