"""``vlmpack check BLEND.yaml``: the gate of an Energon ``MetadatasetV2`` blend of vlmpack outputs.

Checks (every finding one line in ``problems``; nothing raises):

1. The YAML is a ``MetadatasetV2`` with a ``splits.train.blend`` list of ``{path, weight,
   subflavors}`` entries (:func:`vlmpack.energon.metadataset.read_metadataset`, PyYAML's safe
   loader). A YAML that names code anywhere but its header (``__module__`` / ``__class__`` /
   ``__function__``, which Energon imports and runs) or holds other keys
   (:func:`~vlmpack.energon.metadataset.refusal`) is refused with one problem before anything else.
2. Every dataset of the blend passes :func:`vlmpack.check.check_output` (its problems are
   prefixed with the dataset's path).
3. The blend rules of :func:`vlmpack.energon.metadataset.blend_problems`: finished reports, one
   ``seq_len``, one model fingerprint, no shard in two outputs byte for byte, every node of a per-node split
   present and no sample id accepted by two of its nodes.
4. The weights are as recorded: for one of ``samples``, ``tokens``, ``packs``, ``records`` every entry's
   weight equals that count of its output's ``report.json`` (what ``vlmpack metadataset`` writes).
5. Energon's own ``get_train_dataset`` loads it: ``draws`` packs are drawn and each comes from a
   dataset of the blend (``__sources__``). Energon is given the blend as read in step 1, written
   again by vlmpack (:func:`~vlmpack.energon.metadataset.dump_metadataset`), each dataset as its
   :func:`~vlmpack.energon.load.energon_view` (vlmpack's own ``.nv-meta`` bytes, links to its
   shards): nothing the YAML or an output holds is run.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from vlmpack.check import check_output
from vlmpack.energon.load import energon_view, one_line
from vlmpack.energon.metadataset import (
    WEIGHTS,
    blend_problems,
    dump_metadataset,
    iter_blend,
    load_output,
    read_metadataset,
    split_ids,
)
from vlmpack.sinks import sink_of

__all__ = ["check_blend", "recorded_weight"]


def recorded_weight(entries: list[tuple[str, float]], reports: dict[str, dict]) -> str | None:
    """The ``--weight`` name (``samples``/``tokens``/``packs``/``records``) whose report counts equal every
    entry's weight (``entries``: ``[(path, weight)]``, ``reports``: path -> report), or ``None``.
    Pure."""
    for name, key in WEIGHTS.items():
        if all(p in reports and reports[p].get(key) == w for p, w in entries):
            return name
    return None


def check_blend(path: str | Path, *, num_workers: int = 2, run_dir: bool = True, draws: int = 64) -> dict:
    """Check the blend ``path`` as described in the module docstring.

    Returns ``{"datasets": [{"path", "weight", "packs", "samples", "tokens"}], "weight": name or
    None, "drawn": Counter path -> packs Energon drew from it, "problems": [...]}``; ``problems``
    is empty when everything holds. ``num_workers`` / ``run_dir`` as :func:`vlmpack.check.check_output`.
    """
    entries, problems = read_metadataset(path)
    res: dict = {"datasets": [], "weight": None, "drawn": Counter(), "problems": problems}
    if not entries:
        return res
    loaded, reports, shard_counts = [], {}, []
    for ds, w, _ in entries:
        one = check_output(ds, num_workers=num_workers, run_dir=run_dir)
        shard_counts.append(one["shard_counts"])
        problems.extend(f"{ds}: {p}" for p in one["problems"])
        res["datasets"].append({"path": ds, "weight": w, **{k: one[k] for k in ("packs", "samples", "tokens")}})
        apath, rep, problem = load_output(ds)
        if problem is not None:
            problems.append(problem)
            continue
        loaded.append((apath, rep))
        reports[ds] = rep
    problems.extend(blend_problems(loaded, split_ids(loaded)))
    if len(reports) == len(entries):
        res["weight"] = recorded_weight([(ds, w) for ds, w, _ in entries], reports)
        if res["weight"] is None:
            problems.append(f"{path}: the weights are not the outputs' recorded counts (report.json samples_packed, "
                            "tokens or packs); write the blend again with vlmpack metadataset")
    if problems:
        return res
    known = {os.path.realpath(ds) for ds, _, _ in entries}
    try:  # Energon's prints and pin_memory warnings are noise here
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.ExitStack() as stack:
            warnings.simplefilter("ignore")
            views, blend = {}, []
            for (ds, w, flavors), counts in zip(entries, shard_counts):
                view = stack.enter_context(energon_view(ds, counts, sink_of(ds).check_files()))
                views[str(view)] = ds
                blend.append({"weight": w, "path": str(view), **({"subflavors": flavors} if flavors else {})})
            doc = {"__module__": "megatron.energon", "__class__": "MetadatasetV2",
                   "splits": {"train": {"blend": blend}}}
            yml = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vlmpack-blend-"))) / "blend.yaml"
            yml.write_text(dump_metadataset(doc), encoding="utf-8")
            for _, pack in zip(range(draws), iter_blend(yml)):
                src = str(pack.__sources__[0].dataset_path) if pack.__sources__ else "?"
                src = views.get(src, src)
                res["drawn"][src] += 1
                if os.path.realpath(src) not in known:
                    problems.append(f"Energon drew pack {pack.__key__} from {src}, which is not in the blend")
                    break
    except Exception as e:  # noqa: BLE001 - whatever Energon raises is a finding of the gate
        problems.append(f"Energon cannot load the blend {path}: {one_line(e)}")
    return res
