"""``vlmpack metadataset``: blend vlmpack outputs (e.g. the N outputs of ``vlmpack pack --num-nodes N``)
into one Megatron-Energon ``MetadatasetV2`` YAML.

Format (``shared/docs/energon_format.md`` section 3, verified against megatron-energon 7.4.1;
``megatron.energon.metadataset.metadataset_v2``: ``MetadatasetV2`` -> ``splits`` -> ``MetadatasetBlend``
-> ``blend: [BlendDatasetReference(weight: float, path, subflavors)]``)::

    __module__: megatron.energon
    __class__: MetadatasetV2
    splits:
      train:
        blend:
        - weight: 2891          # the output's report.json count (--weight samples|tokens|packs|records)
          path: "/abs/OUT_1"    # absolute: Energon resolves a relative path against the YAML's folder
          subflavors: {"source": "llava"}   # optional, reaches sample.__subflavors__

Weights are relative: Energon draws each pack from dataset i with probability ``w_i / sum(w)``
(``MetadatasetBlend.get_datasets``). Every string value is double-quoted, since Energon's YAML
reader casts unquoted ``yes``, ``1e5`` or ``0123`` to bool / float / int.

Rules of a blend (:func:`blend_problems`, pure; ``vlmpack metadataset`` refuses, ``vlmpack check
BLEND.yaml`` reports): every output has a finished report (``status: ok``); all share the output
layout (``report.json`` ``layout``, ``vlmpack`` when absent), ``seq_len``
and the model fingerprint (same tokenizer, template, processor, config); no output is given twice
and no shard is in two outputs byte for byte (shard names may repeat: each output is read by its
own path); outputs of one per-node split (same ``nodes.split_id``,
:mod:`vlmpack.pack.nodes`) hold every rank once and accept no sample id twice (a single run would
reject the second as ``duplicate_id``). Reading the reports and manifests and writing the YAML are
the I/O edges (:func:`load_output`, :func:`split_ids`, :func:`write_metadataset`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import yaml

from vlmpack.energon.load import frozen_gc
from vlmpack.errors import ConfigError
from vlmpack.fsio import LinkRefused, links_under, read_inside
from vlmpack.packfmt import loads_json

__all__ = ["HEADER", "WEIGHTS", "blend_problems", "build_metadataset", "iter_blend", "load_output",
           "parse_subflavors", "read_metadataset", "refusal", "split_ids", "write_metadataset"]

#: ``--weight`` name -> the ``report.json`` count used as the blend weight.
WEIGHTS = {"samples": "samples_packed", "tokens": "tokens", "packs": "packs",
           "records": "records_read"}  # records: the input's record count, LLaVA-OneVision-2's rule (its line count)
#: First line of every YAML this module writes (an existing file without it is never replaced).
HEADER = "# written by vlmpack metadataset: an Energon MetadatasetV2 blend of vlmpack outputs\n"
_RUN_DIR = ".vlmpack"  # = vlmpack.pack.rundir.RUN_DIR (not imported: it would load the pack stack)
_MAX_BYTES = 64 << 20  # the most bytes read of a blend YAML or an output's record file


# ------------------------------------------------------------------------------------------- reading outputs
def load_output(out: str | Path) -> tuple[str, dict | None, str | None]:
    """``(absolute path, report, problem)`` of the vlmpack output ``out``: ``report`` is its
    ``report.json`` with ``model_fingerprint`` filled in from the run record
    (``.vlmpack/config.json`` ``model_files``) for outputs packed before reports held it;
    ``problem`` a one-line reason it cannot be blended (missing, unreadable or failed report, no
    Energon metadata), in which case ``report`` is ``None``. Never raises."""
    path = os.path.abspath(os.fspath(out))
    rp = Path(path) / "report.json"
    try:
        rep = loads_json(read_inside(path, "report.json", _MAX_BYTES))
    except FileNotFoundError:
        return path, None, f"{rp} is missing: {path} is not a finished vlmpack output (run vlmpack pack first)"
    except LinkRefused as e:
        return path, None, str(e)
    except (OSError, ValueError) as e:
        return path, None, f"{rp} cannot be read ({type(e).__name__}: {' '.join(str(e).split())}); pack {path} again"
    if not isinstance(rep, dict) or not isinstance(rep.get("shard_sha256"), dict):
        return path, None, f"{rp} is not a vlmpack report (no shard_sha256)"
    if rep.get("status") != "ok":
        return path, None, f"{rp} records an unfinished or failed run (status {rep.get('status')!r}); finish it first"
    if not (Path(path) / ".nv-meta" / ".info.json").is_file():
        return path, None, f"{path}/.nv-meta/.info.json is missing: Energon cannot load {path}"
    if not isinstance(rep.get("model_fingerprint"), str):
        try:
            files = loads_json(read_inside(path, f"{_RUN_DIR}/config.json", _MAX_BYTES))["model_files"]
            rep["model_fingerprint"] = hashlib.sha256(
                json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        except (OSError, ValueError, KeyError, TypeError):
            return path, None, (f"{rp} records no model fingerprint and {path}/{_RUN_DIR}/config.json cannot tell it; "
                                "pack it again with this vlmpack")
    return path, rep, None


def _split(rep: dict) -> tuple[str, int, int] | None:
    """``(split_id, num_nodes, node_rank)`` of a per-node output, ``None`` for a single run."""
    nodes = rep.get("nodes")
    if not isinstance(nodes, dict) or not isinstance(nodes.get("num_nodes"), int) or nodes["num_nodes"] < 2:
        return None
    return str(nodes.get("split_id")), nodes["num_nodes"], int(nodes.get("node_rank", -1))


def split_ids(outputs: list[tuple[str, dict]]) -> dict[str, set[tuple[int, str]]]:
    """For every output that shares a per-node split with another one: path -> its accepted
    ``(id_kind, id)`` pairs (run record ``manifest.parquet`` minus the ``plan.npz`` overlong rows).
    An output whose run record cannot be read is left out (``vlmpack check`` on it says why)."""
    import numpy as np
    import pyarrow.parquet as pq

    from vlmpack.packing import PackPlan

    by_split = Counter(s[0] for _, r in outputs if (s := _split(r)) is not None)
    out: dict[str, set[tuple[int, str]]] = {}
    for path, rep in outputs:
        s = _split(rep)
        if s is None or by_split[s[0]] < 2 or links_under(path, [f"{_RUN_DIR}/{n}" for n in ("manifest.parquet",
                                                                                          "plan.npz")]):
            continue  # (a link is not followed: vlmpack check on the output says so)
        try:
            table = pq.read_table(Path(path) / _RUN_DIR / "manifest.parquet", columns=["id", "id_kind"])
            keep = np.ones(table.num_rows, bool)
            keep[PackPlan.from_npz(Path(path) / _RUN_DIR / "plan.npz").overlong] = False
        except Exception:  # noqa: BLE001 - an unreadable run record: nothing to compare
            continue
        kinds = table.column("id_kind").to_numpy().tolist()
        out[path] = {(k, i) for i, k, ok in zip(table.column("id").to_pylist(), kinds, keep.tolist()) if ok}
    return out


# ------------------------------------------------------------------------------------------- rules
def _eg(items: list, n: int = 3) -> str:
    return ", ".join(str(x) for x in items[:n]) + (", ..." if len(items) > n else "")


def blend_problems(outputs: list[tuple[str, dict]], ids: dict[str, set[tuple[int, str]]] | None = None) -> list[str]:
    """The rules of a blend (module docstring) over ``outputs`` = ``[(absolute path, report)]``;
    ``ids``: :func:`split_ids` (the duplicate-id rule is skipped without it). Returns one-line
    problems, empty when the outputs may be blended. Pure."""
    problems: list[str] = []
    seen = Counter(p for p, _ in outputs)
    if twice := [p for p, n in seen.items() if n > 1]:
        problems.append(f"output given more than once: {_eg(twice)}; give each output once")
    for key, what in (("seq_len", "seq_len"), ("model_fingerprint", "model fingerprint")):
        values = defaultdict(list)
        for p, r in outputs:
            values[r.get(key)].append(p)
        if len(values) > 1:
            desc = "; ".join(f"{str(v)[:12]} in {_eg(ps, 2)}" for v, ps in values.items())
            problems.append(f"the outputs disagree on {what} ({desc}): packs of another capacity or model cannot be "
                            "blended; pack them with the same --seq-len and --model")
    layouts = defaultdict(list)
    for p, r in outputs:
        layouts[r.get("layout", "vlmpack")].append(p)
    if len(layouts) > 1:
        desc = "; ".join(f"{v} in {_eg(ps, 2)}" for v, ps in layouts.items())
        problems.append(f"the outputs disagree on the output layout ({desc}): one trainer reads one sample class; "
                        "pack them with the same --layout")
    # Energon reads each output by its own path, so equal shard names are no problem; equal bytes are
    owner: dict[str, tuple[str, str]] = {}  # shard sha256 -> (output, shard name)
    clash = []
    for p, r in outputs:
        for name, digest in r.get("shard_sha256", {}).items():
            if owner.setdefault(digest, (p, name))[0] != p:
                clash.append(f"{owner[digest][1]} of {owner[digest][0]} = {name} of {p}")
    if clash:
        problems.append(f"{len(clash)} shards are in two outputs byte for byte ({_eg(clash, 2)}): their packs "
                        "would be drawn twice; give each output once")
    splits: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    size: dict[str, int] = {}
    for p, r in outputs:
        if (s := _split(r)) is not None:
            splits[s[0]][s[2]].append(p)
            size[s[0]] = s[1]
    for sid, ranks in splits.items():
        missing = sorted(set(range(size[sid])) - set(ranks))
        if missing:
            problems.append(f"the {size[sid]}-node split of {_eg(sorted(p for ps in ranks.values() for p in ps), 2)} "
                            f"lacks node(s) {_eg(missing)}: their samples would be missing; add their outputs")
        members = [p for ps in ranks.values() for p in ps if ids is not None and p in ids]
        first: dict[tuple[int, str], str] = {}
        dups = []
        for p in members:
            for pair in ids[p]:  # type: ignore[index]
                if first.setdefault(pair, p) != p:
                    dups.append(f"{pair[1]!r} in {first[pair]} and {p}")
        if dups:
            problems.append(f"{len(dups)} sample ids are accepted by two nodes of one split (a single run rejects the "
                            f"second as duplicate_id): {_eg(sorted(dups), 2)}; remove the duplicates from the input")
    return problems


def parse_subflavors(specs: list[str], num_outputs: int) -> list[dict[str, str]]:
    """``--subflavor`` values -> one subflavors dict per output. ``KEY=VALUE`` applies to every
    output, ``I:KEY=VALUE`` to the I-th output (0-based, in command-line order) and wins over the
    former. Values are strings. Raises :class:`ConfigError` (one line) for a malformed value or
    an index out of range."""
    import re

    every: dict[str, str] = {}
    each: list[dict[str, str]] = [{} for _ in range(num_outputs)]
    for spec in specs:
        m = re.fullmatch(r"(?:(\d+):)?([A-Za-z_][A-Za-z0-9_.-]*)=(.*)", spec, flags=re.S)
        if m is None:
            raise ConfigError(f"--subflavor {spec!r}: expected KEY=VALUE or I:KEY=VALUE (I = the output's position "
                              "from 0)")
        idx, key, value = m.groups()
        if idx is None:
            every[key] = value
        elif int(idx) >= num_outputs:
            raise ConfigError(f"--subflavor {spec!r}: output {idx} does not exist (outputs are 0..{num_outputs - 1})")
        else:
            each[int(idx)][key] = value
    return [{**every, **d} for d in each]


def build_metadataset(outputs: list[tuple[str, dict]], weight: str = "samples",
                      subflavors: list[dict] | None = None) -> dict:
    """The ``MetadatasetV2`` document (module docstring) blending ``outputs`` = ``[(absolute path,
    report)]`` in that order, weight of each = ``report[WEIGHTS[weight]]`` (an int: samples,
    tokens or packs), times the report's ``sample_ratio`` when it has one (a float then: the output
    was packed from a NeMo meta file's dataset, :mod:`vlmpack.sources.nemo_meta`; a dataset of N
    samples with ratio r stands for N * r of them per epoch, as NeMo draws it), ``subflavors[i]``
    on entry i when not empty. Pure; raises
    :class:`ConfigError` for an unknown ``weight`` or a relative path."""
    if weight not in WEIGHTS:
        raise ConfigError(f"--weight {weight!r}: choose one of {', '.join(WEIGHTS)}")
    blend = []
    for i, (path, rep) in enumerate(outputs):
        if not os.path.isabs(path):
            raise ConfigError(f"{path}: a blend needs absolute paths")
        count = int(rep[WEIGHTS[weight]])
        ratio = rep.get("sample_ratio", 1.0)  # a NeMo meta file's sample_ratio (vlmpack.sources.nemo_meta)
        entry: dict = {"weight": count if ratio == 1.0 else count * float(ratio), "path": path}
        if subflavors and subflavors[i]:
            entry["subflavors"] = dict(subflavors[i])
        blend.append(entry)
    return {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": {"train": {"blend": blend}}}


# ------------------------------------------------------------------------------------------- YAML I/O
class _Key(str):
    """A mapping key: written plain (values are quoted)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style='"'))
_Dumper.add_representer(_Key, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", str(s)))


def _keys(obj):
    if isinstance(obj, dict):
        return {_Key(k): _keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_keys(v) for v in obj]
    return obj


def dump_metadataset(doc: dict) -> str:
    """``doc`` as YAML text: :data:`HEADER`, plain keys, double-quoted string values."""
    return HEADER + yaml.dump(_keys(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                              allow_unicode=True, width=1 << 16)


def write_metadataset(path: str | Path, doc: dict) -> None:
    """Write ``doc`` to ``path`` atomically (:func:`vlmpack.pack.rundir.atomic_write`). Refuses
    (:class:`ConfigError`) to replace a file that vlmpack did not write (no :data:`HEADER`) or a
    directory. Raises ``OSError`` for a path that cannot be written."""
    from vlmpack.fsio import atomic_write

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"-o {p} is a directory; give the path of a .yaml file")
    if p.exists():
        with open(p, "rb") as f:
            if f.read(len(HEADER)) != HEADER.encode():
                raise ConfigError(f"-o {p} exists and was not written by vlmpack metadataset; choose another path")
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(p, dump_metadataset(doc).encode("utf-8"))


def read_metadataset(path: str | Path) -> tuple[list[tuple[str, float, dict]], list[str]]:
    """The blend of a ``MetadatasetV2`` YAML as ``[(absolute dataset path, weight, subflavors)]``
    (relative paths resolved against the YAML's folder, as Energon does) and one-line problems for
    what is not such a blend (another class, no ``splits.train.blend`` list, an entry without a
    path or a numeric weight). A YAML that names code outside its header, or holds keys the
    blend form has not (:func:`refusal`), is one problem and no entry: nothing of it is loaded.
    Never raises (the file is read with PyYAML's safe loader, at most 64 MiB)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            text = f.read(_MAX_BYTES + 1)
        if len(text) > _MAX_BYTES:
            raise ValueError(f"more than {_MAX_BYTES:,} bytes")
        doc = yaml.safe_load(text.decode("utf-8"))
    except RecursionError:
        return [], [f"{p} cannot be read as YAML (nested too deep)"]
    except (OSError, ValueError, yaml.YAMLError) as e:
        return [], [f"{p} cannot be read as YAML ({type(e).__name__}: {' '.join(str(e).split())})"]
    if (refused := refusal(doc)) is not None:
        return [], [f"{p}: {refused}; refused, nothing loaded"]
    blend = None
    if isinstance(doc, dict) and doc.get("__class__") == "MetadatasetV2":
        blend = ((doc.get("splits") or {}).get("train") or {}).get("blend") if isinstance(doc.get("splits"), dict) \
            else None
    if not isinstance(blend, list) or not blend:
        return [], [f"{p} is not a MetadatasetV2 with a splits.train.blend list (the form vlmpack metadataset writes)"]
    entries, problems = [], []
    for i, e in enumerate(blend):
        w = e.get("weight", 1.0) if isinstance(e, dict) else None
        if not isinstance(e, dict) or not isinstance(e.get("path"), str) or not isinstance(w, (int, float)) \
                or isinstance(w, bool) or w <= 0:
            problems.append(f"{p}: blend entry {i} lacks a path or a positive numeric weight")
            continue
        ds = e["path"] if os.path.isabs(e["path"]) else os.path.normpath(os.path.join(p.parent.absolute(), e["path"]))
        entries.append((ds, w, e.get("subflavors") or {}))
    return entries, problems


#: Keys of the blend form, by where they may stand (what ``vlmpack metadataset`` writes).
_FORM = {(): {"__module__", "__class__", "splits"}, ("splits",): {"train"}, ("splits", "train"): {"blend"},
         ("splits", "train", "blend", "*"): {"path", "weight", "subflavors"}}
_CODE_KEYS = ("__module__", "__class__", "__function__")


def _items(doc):
    """``(path of keys / indexes, key, value)`` of every entry of the parsed YAML ``doc``, each
    container once (YAML aliases may share them; iterative, no recursion)."""
    seen, stack = set(), [((), doc)]
    while stack:
        where, node = stack.pop()
        if id(node) in seen or not isinstance(node, (dict, list)):
            continue
        seen.add(id(node))
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            yield where, key, value
            stack.append(((*where, key), value))


def refusal(doc) -> str | None:
    """Why the parsed blend ``doc`` must not reach Energon, or None. Energon's YAML reader imports
    ``__module__`` and instantiates ``__class__`` / calls ``__function__`` wherever they stand, and
    follows ``dataset_config`` / ``split_config`` / ``aux`` to other files: so only the
    ``MetadatasetV2`` header (``__module__: megatron.energon``) may name code, and only the keys of
    the blend form (:data:`_FORM`; ``subflavors`` a mapping of plain values) may appear. Pure."""
    if isinstance(doc, dict) and doc.get("__module__", "megatron.energon") != "megatron.energon":
        return f"its header names __module__ {str(doc['__module__'])[:80]!r}, not megatron.energon"
    at = lambda where, key: ".".join(str(k)[:80] for k in (*where, key))  # noqa: E731
    for where, key, value in _items(doc):
        if isinstance(value, dict) and (code := [str(value[k])[:60] for k in _CODE_KEYS if k in value]):
            return (f"{at(where, key)} names code to import ({'.'.join(code)}): a blend may name classes only "
                    "in its MetadatasetV2 header")
    for where, key, value in _items(doc):
        form = tuple("*" if isinstance(k, int) else k for k in where)
        if isinstance(key, str) and form in _FORM and key not in _FORM[form]:
            return f"{at(where, key)} is not a key of the blend form vlmpack checks ({', '.join(sorted(_FORM[form]))})"
        if form[-1:] == ("subflavors",) and isinstance(value, (dict, list)):
            return f"{at(where, key)} is not a plain value (subflavors map names to strings or numbers)"
    return None


def iter_blend(path: str | Path, *, num_workers: int = 0, seed: int = 0):
    """Yield packs (``VlmpackPack``, media as raw bytes) drawn by Energon's own
    ``get_train_dataset(path)`` from the blend ``path``: an endless stream, each pack from
    dataset i with probability ``w_i / sum(w)``; ``pack.__subflavors__`` names its entry's
    subflavors. Garbage collection skips the objects alive before the stream until it is closed
    (:func:`vlmpack.energon.load.frozen_gc`). Raises :class:`ConfigError` without megatron-energon,
    and whatever Energon raises for a blend it cannot load."""
    try:
        from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    except ImportError:
        raise ConfigError("loading a blend needs megatron-energon: pip install 'vlmpack[train]'") from None
    wc = WorkerConfig(rank=0, world_size=1, num_workers=num_workers, seed_offset=seed)
    ds = get_train_dataset(str(path), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
                           worker_config=wc, auto_decode=False)
    with frozen_gc():
        yield from get_loader(ds)
