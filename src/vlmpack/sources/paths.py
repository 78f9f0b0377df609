"""Input paths of ``vlmpack pack`` as users give them, made a list of files: directories, glob
and brace patterns (``shard-{000..009}.tar``), ``datasets`` ``save_to_disk`` folders, dataset
registries (LLaMA-Factory ``dataset_info.json``, NeMo meta files); and the check that each input is
a readable file and the output is not one of them (:func:`check_paths`). Used by
:func:`vlmpack.config.load_config`.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any

from vlmpack.errors import ConfigError

__all__ = ["brace_expand", "check_paths", "expand_inputs"]

_GLOB = re.compile(r"[*?\[]")
_BRACE = re.compile(r"\{([^{}]*)\}")
_INPUT_PATTERNS = ("*.jsonl*", "*.tar", "*.parquet", "*.arrow")


def brace_expand(pattern: str) -> list[str]:
    """Bash-style brace expansion of ``pattern``, in order: ``{a,b}`` alternatives and
    ``{000..009}`` integer ranges (zero-padded to the width of the wider bound when either bound
    has a leading zero; descending when start > end), any number of groups (nested groups are not
    supported: the innermost is expanded first). A group without ``,`` or ``..`` (e.g. ``{x}``)
    stays literal. Pure; no errors."""
    for m in _BRACE.finditer(pattern):
        body = m.group(1)
        rng = re.fullmatch(r"(-?\d+)\.\.(-?\d+)", body)
        if rng:
            a, b = rng.groups()
            lo, hi = int(a), int(b)
            width = max(len(a), len(b)) if (a.lstrip("-").startswith("0") or b.lstrip("-").startswith("0")) else 0
            step = 1 if hi >= lo else -1
            alts = [str(i).zfill(width) for i in range(lo, hi + step, step)]
        elif "," in body:
            alts = body.split(",")
        else:
            continue
        head, tail = pattern[:m.start()], pattern[m.end():]
        return [x for alt in alts for x in brace_expand(head + alt + tail)]
    return [pattern]


def expand_inputs(inputs: list[Any], datasets: list[str] | None = None) -> list[Any]:
    """``--input`` values with directories, globs and brace patterns expanded (each in place, in order).

    A directory holding ``.nv-meta`` (an Energon dataset) -> its ``*.tar`` shards (recursively,
    sorted); a ``datasets`` ``save_to_disk`` directory (``state.json``) -> its Arrow files in the
    order ``state.json`` lists them, a saved ``DatasetDict`` (``dataset_dict.json``) -> those of
    each split in its order; any other directory -> its files matching ``*.jsonl*``, ``*.tar``,
    ``*.parquet`` or ``*.arrow`` (not recursive, sorted). A value that is not an existing path: a brace pattern
    (``shard-{000..009}.tar``, :func:`brace_expand`) -> its expansions, then any with glob
    characters (``*?[``) -> ``glob.glob`` matches, sorted. Existing paths and non-strings pass
    unchanged (:func:`check_paths` judges them). LLaMA-Factory's ``dataset_info.json`` -> the
    files of its datasets (``datasets``: the names of ``--dataset``, else all;
    :func:`vlmpack.sources.dataset_info.registry_files`); a NeMo meta file -> the annotation files of
    its datasets (:func:`vlmpack.sources.nemo_meta.meta_selection`). Raises :class:`ConfigError` (one line) for a
    directory without inputs, a pattern that matches nothing, a registry entry vlmpack does not read,
    or ``datasets`` without a registry among the inputs.
    """
    from vlmpack.fsio import printable_path as show
    from vlmpack.sources.dataset_info import is_registry, registry_files
    from vlmpack.sources.nemo_meta import is_meta, meta_selection

    out: list[Any] = []
    registries = 0
    for p in inputs:
        if not isinstance(p, str) or "\x00" in p:
            out.append(p)
        elif is_registry(p):
            registries += 1
            out.extend(registry_files(p, datasets))
        elif is_meta(p):
            registries += 1
            out.extend(meta_selection(p, datasets).files)
        elif os.path.isdir(p):
            if os.path.isdir(os.path.join(p, ".nv-meta")):
                found = sorted(f for f in glob.glob(os.path.join(glob.escape(p), "**", "*.tar"), recursive=True)
                               if os.path.isfile(f))
            elif os.path.isfile(os.path.join(p, "state.json")) or os.path.isfile(os.path.join(p, "dataset_dict.json")):
                found = _saved_dataset_files(p)
            else:
                found = sorted({f for pat in _INPUT_PATTERNS for f in glob.glob(os.path.join(glob.escape(p), pat))
                                if os.path.isfile(f)})
            if not found:
                raise ConfigError(f"input {show(p)} is a directory without input files (*.jsonl*, *.tar, *.parquet, "
                                  "*.arrow; an Energon dataset: *.tar shards); give the files or another directory")
            out.extend(found)
        elif not os.path.lexists(p) and (_GLOB.search(p) or _BRACE.search(p)):
            found = []
            for q in brace_expand(p):
                found.extend(sorted(glob.glob(q)) if _GLOB.search(q) else [q])
            if not found:
                raise ConfigError(f"input pattern {show(p)} (glob or braces) matches no file; check the pattern")
            out.extend(found)
        else:
            out.append(p)
    if datasets and not registries:
        raise ConfigError("--dataset names datasets of a LLaMA-Factory dataset_info.json or a NeMo meta file, but no "
                          "--input is one")
    return out


def _saved_dataset_files(path: str) -> list[str]:
    """The Arrow files of a ``datasets`` ``save_to_disk`` directory, in the dataset's row order:
    ``state.json``'s ``_data_files`` (a ``Dataset``), or each split of ``dataset_dict.json``'s
    ``splits`` in turn (a ``DatasetDict``). Layout as written by ``datasets`` >= 2.x
    (``Dataset.save_to_disk``). Raises :class:`ConfigError` (one line) for a listing that cannot be
    read or that names a missing file."""
    from vlmpack.fsio import printable_path as show

    try:
        if os.path.isfile(os.path.join(path, "dataset_dict.json")):
            with open(os.path.join(path, "dataset_dict.json"), encoding="utf-8") as f:
                splits = json.load(f)["splits"]
            return [x for s in splits for x in _saved_dataset_files(os.path.join(path, str(s)))]
        with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
            names = [str(d["filename"]) for d in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"input {show(path)} looks like a datasets save_to_disk directory but its listing (state.json"
                          f" / dataset_dict.json) cannot be read ({type(e).__name__}: {e}); save it again") from None
    files = [os.path.join(path, n) for n in names]
    missing = [n for n, f in zip(names, files) if not os.path.isfile(f) or os.sep in n or n.startswith("..")]
    if missing or not files:
        raise ConfigError(f"input {show(path)}: state.json lists {len(names)} Arrow file(s), missing or not in the "
                          f"directory: {missing[:3]}; save the dataset again")
    return files


def check_paths(inputs: list[str], output: str, input_format: str = "auto") -> None:
    """Check the ``--input`` files and the ``--output`` path before anything is read or written.

    Each input must be an existing regular file (a directory, a glob pattern the shell did not
    expand, a FIFO or device are refused with what to do instead), readable, given once (same
    device + inode, so a symlink or hard link to another input counts as the same file), and
    be readable by its source (:func:`vlmpack.sources.check_input`: a tar is a WebDataset shard,
    anything else must look like JSONL by content). ``output`` must not be an
    existing non-directory, nor lie under one. Names that are not valid UTF-8 (surrogate escapes)
    are shown as ``\\xNN``. Raises :class:`ConfigError` (paths) or
    :class:`~vlmpack.errors.InputError` (content), one line each.
    """
    import stat

    from vlmpack.fsio import printable_path as show
    from vlmpack.sources import check_input

    seen: dict[tuple[int, int], str] = {}
    for p in inputs:
        try:
            st = os.stat(p)
        except ValueError:  # an embedded NUL character
            raise ConfigError(f"input {show(p)} holds a NUL character; give a file path") from None
        except OSError as e:
            if any(c in p for c in "*?[") and not os.path.lexists(p):
                raise ConfigError(f"input {show(p)} does not exist and globs are not expanded yet; "
                                  "let the shell expand them (leave the pattern unquoted)") from None
            if isinstance(e, (FileNotFoundError, NotADirectoryError)):
                raise ConfigError(f"input file not found: {show(p)}") from None
            raise ConfigError(f"cannot access input {show(p)}: {e.strerror or e}; check the path") from None
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"input {show(p)} is a directory; give JSONL files (directories are not supported yet)")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"input {show(p)} is not a regular file (a pipe, socket or device); vlmpack reads "
                              "each input more than once, save it to a file first")
        first = seen.get((st.st_dev, st.st_ino))
        if first is not None:
            same = "" if os.path.abspath(first) == os.path.abspath(p) else f" (the same file as {show(first)})"
            raise ConfigError(f"input {show(p)} is given twice{same}; give each input once")
        seen[(st.st_dev, st.st_ino)] = p
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            raise ConfigError(f"cannot read input {show(p)}: {e.strerror or e}; check its permissions") from None
        check_input(p, input_format)
    out = os.path.abspath(output)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"output {show(output)} is an existing file, not a directory; give a directory path")
    parent = os.path.dirname(out)
    while parent and not os.path.lexists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ConfigError(f"output {show(output)} lies under {show(parent)}, which is a file; give a directory path")
