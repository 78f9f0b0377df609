"""NeMo Automodel's VLM meta file as an input: several datasets, each a ShareGPT / messages file with
its media folder and a sampling ratio (``--input meta.json``, all of its datasets or those chosen with
``--dataset NAME``).

The format, as ``make_meta_dataset`` of ``nemo_automodel/components/datasets/vlm/datasets.py`` reads
it (NVIDIA-NeMo/Automodel, 2026): a JSON object mapping each dataset name to an entry with

- ``file_name`` (required): the annotation file, relative to the meta file's folder or absolute; a
  ``.jsonl`` file or a JSON array of records;
- ``columns`` (optional): ``messages`` (default ``"messages"``), ``images``, ``videos``: which key of
  a record holds what;
- ``tags`` (optional): ``role_tag`` / ``content_tag`` / ``user_tag`` / ``assistant_tag`` /
  ``system_tag`` (defaults role / content / user / assistant / system; ShareGPT files map them to
  from / value / human / gpt);
- ``media_dir`` (optional): the folder relative media paths are joined to (itself relative to the
  working directory, as NeMo opens it);
- ``sample_ratio`` (optional, default 1.0): how many times the dataset's records are drawn per
  epoch (below 1 a seeded random subset, above 1 repeats).

Images may be ``<lmdb_dir>::<key>``: the value of ``key`` (UTF-8) in the LMDB environment
``lmdb_dir`` (:func:`vlmpack.media.resolve.resolve_ref` reads them).

How vlmpack maps it: the records are read with vlmpack's own layouts (:mod:`vlmpack.layouts`),
which take the default names and the ShareGPT ones; an entry naming other columns or tags has its
records rewritten to those first (:mod:`vlmpack.layouts.mapping`); one holding a key NeMo does not
read is refused with one :class:`~vlmpack.errors.ConfigError` line.
``media_dir`` becomes the run's media root (``--media-root``), and ``sample_ratio`` is not applied by
drawing records (a repeat would be a ``duplicate_id``): it is recorded in ``report.json`` and
multiplies the weight ``vlmpack metadataset`` gives the output in its Energon blend. So the datasets
of one run must share ``media_dir`` and ``sample_ratio``; datasets that differ are packed one per
output (``--dataset NAME``) and blended with ``vlmpack metadataset``. Pure apart from reading the
meta file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from vlmpack.errors import ConfigError
from vlmpack.fsio import printable_path
from vlmpack.sources.dataset_info import REGISTRY, REMOTE, entry_map

#: The keys of an entry (``make_meta_dataset`` reads no other).
KEYS = ("file_name", "columns", "tags", "media_dir", "sample_ratio")
#: NeMo's default columns and tags (``make_meta_dataset``): ``messages`` of ``role`` / ``content`` with
#: ``user`` / ``assistant`` / ``system``.
_DEFAULTS = ({"messages": "messages"}, {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                         "assistant_tag": "assistant", "system_tag": "system"})
_MAX_BYTES = 16 << 20  # a meta file is a short listing; more is no meta file


@dataclass(frozen=True)
class MetaSelection:
    """The chosen datasets of a meta file: ``names`` (in the file's order), their annotation ``files``
    (absolute paths), the shared ``media_dir`` (absolute, or None: the entries set none),
    ``sample_ratio`` (float > 0) and record mapping (:mod:`vlmpack.layouts.mapping`, None: none)."""

    names: tuple[str, ...]
    files: tuple[str, ...]
    media_dir: str | None
    sample_ratio: float
    record_map: str | None = None


def _load(path: str) -> object:
    if os.path.basename(path) == REGISTRY or not path.endswith(".json") or not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_meta(path: str) -> bool:
    """True when ``path`` is a ``.json`` file (not LLaMA-Factory's ``dataset_info.json``) holding a
    non-empty JSON object whose every value is an entry with a ``file_name`` string (a JSON array
    file, or a single record, is no meta file; :func:`meta_selection` judges the entries)."""
    obj = _load(path)
    return isinstance(obj, dict) and bool(obj) and all(
        isinstance(v, dict) and isinstance(v.get("file_name"), str) for v in obj.values())


def meta_selection(path: str, names: list[str] | None = None) -> MetaSelection:
    """The datasets ``names`` of the meta file at ``path`` (every dataset, in the file's order, when
    ``names`` is empty). Raises :class:`ConfigError` (one line) for an unknown name, an entry vlmpack
    does not read as it is (module docstring), a ``file_name`` that is no file, or chosen datasets
    whose ``media_dir`` or ``sample_ratio`` differ."""
    meta = _load(path)
    where = printable_path(path)
    if not isinstance(meta, dict):
        raise ConfigError(f"{where} is no NeMo meta file (a JSON object of dataset entries)")
    unknown = [n for n in names or () if n not in meta]
    if unknown:
        raise ConfigError(f"{where} has no dataset {unknown[0]!r} (it has {', '.join(sorted(meta)[:8])})")
    chosen = list(names or meta)
    base = os.path.dirname(os.path.abspath(path))
    files, dirs, ratios, maps = [], {}, {}, {}
    for name in chosen:
        file_name, dirs[name], ratios[name], maps[name] = _entry(meta[name], name, base, where)
        files.append(file_name)
    a = chosen[0]
    for what, values in (("media_dir", dirs), ("sample_ratio", ratios), ("columns / tags", maps)):
        if (b := next((n for n in chosen if values[n] != values[a]), None)) is not None:
            raise ConfigError(f"{where}: datasets {a!r} and {b!r} have different {what} ({values[a]} and {values[b]});"
                              " pack each to its own output with --dataset NAME, then blend the outputs with "
                              "vlmpack metadataset (it weighs each by its sample_ratio)")
    return MetaSelection(tuple(chosen), tuple(files), dirs[a], ratios[a], maps[a])


def _entry(entry: dict, name: str, base: str, where: str) -> tuple[str, str | None, float, str | None]:
    """``(annotation file, media_dir or None, sample_ratio, record mapping or None)`` of one entry
    (checked)."""
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{where}: dataset {name!r} {why}")

    if extra := sorted(set(entry) - set(KEYS)):
        hint = (f"; a LLaMA-Factory registry is read when it is named {REGISTRY}"
                if set(extra) & {"formatting", "ranking", *REMOTE} else "")
        raise refuse(f"has the key {extra[0]!r}, which NeMo's meta format does not have ({', '.join(KEYS)}){hint}")
    mapping = entry_map(entry, "sharegpt", refuse, _DEFAULTS)
    ratio = entry.get("sample_ratio", 1.0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < float("inf"):
        raise refuse(f"has sample_ratio {ratio!r}; give a number above 0")
    media_dir = entry.get("media_dir")
    if media_dir is not None and (not isinstance(media_dir, str) or not media_dir):
        raise refuse(f"has media_dir {media_dir!r}; give a folder path or leave it out")
    if media_dir is not None:
        media_dir = os.path.abspath(media_dir)  # NeMo joins it as it is: relative to the working directory
        if not os.path.isdir(media_dir):
            raise refuse(f"has media_dir {printable_path(media_dir)}, which is no folder")
    file_name = entry["file_name"]
    target = os.path.join(base, file_name)
    if not file_name or not os.path.isfile(target):
        raise refuse(f"names file_name {file_name!r}, which is no file beside the meta file")
    return target, media_dir, float(ratio), mapping

