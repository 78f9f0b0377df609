"""``vlmpack check``: a gate that ``OUT`` is exactly what ``vlmpack pack`` wrote, and that it loads.

Checks, cheapest first; every finding is one line in ``problems`` and nothing raises:

1. ``OUT`` is an existing, non-empty directory with a readable ``report.json`` (an object with
   ``shard_sha256``) and ``.nv-meta/`` whose every file equals what vlmpack writes for it
   (``.info.json`` with ``shard_counts``, ``split.yaml``, and the output layout's ``dataset.yaml``
   and ``sample_loader.py``, :mod:`~vlmpack.check.nvmeta`): Energon imports and runs what they
   name, so a differing, foreign or missing file is a problem and nothing is loaded.
2. Shard lists: ``.info.json`` and ``report.json`` list the same shards, each of them exists
   as a regular file of ``OUT`` (a name with ``/`` or ``..``, or a symbolic link, is a problem and
   is not read), and no ``<prefix>-*`` file (a tar, an ``.idx``, a ``.tmp``) listed by neither lies in ``OUT``.
3. Per shard: the sha256 (streamed) equals ``report.json``'s, the size the run dir marker's,
   and all sizes sum to ``shard_bytes``; the tar reads to its end-of-archive zero blocks (not
   truncated, nothing appended); every member is a regular file ``<key>.<part>`` with contiguous,
   globally unique keys; each key has a ``json`` part of format ``vlmpack.pack/1`` and exactly
   the media parts it references; ``<shard>.idx`` exists and holds N+1 offsets equal to the
   tar's sample header offsets and its end-of-archive offset, N = ``.info.json``'s count.
4. Token counts: in each pack the samples' ``num_tokens`` sum to the pack's ``num_tokens``
   ``<= seq_len`` (= ``report.json``'s), also with every sample padded to ``report.json``'s
   ``alignment.sample_multiple`` (``--cp-size``: what a THD trainer pads); with ``report.json``'s
   ``dedup`` (``--dedup exact``) no two packed samples share a :func:`vlmpack.packfmt.content_key`
   (needs the run dir, as the content checks of 5b); each sample's
   ``num_tokens`` equals the manifest's; the totals equal ``report.json``'s ``packs``,
   ``samples_packed`` and ``tokens``.
4b. Data-parallel shape (``report.json``'s ``data_parallel``, ``--dp-size``): the packs in output
   order fill whole global batches and their per-step, per-rank vision tokens and tokens are the
   ``after`` figures the report records (:func:`vlmpack.packing.balance.rank_step_loads`).
5. Completeness against the run dir ``OUT/.vlmpack`` (``manifest.parquet``: columns ``id``,
   ``num_tokens``, optional int8 ``id_kind``; ``plan.npz``: :class:`vlmpack.packing.PackPlan`
   whose ``overlong`` rows were dropped): every manifest id not overlong is in exactly one pack,
   and no other id is. Ids are compared as ``(kind, id)`` with kind ``"str"|"int"|"line"``
   (manifest ``id_kind`` 0/1/2, pack JSON ``"id_kind"``; missing means ``"str"``). A missing run
   dir is a problem unless ``run_dir=False``.
5b. The run's record of what it wrote (with the run dir, :mod:`~vlmpack.check.content`):
   ``.vlmpack/hashes.json`` (sealed) holds the sha256 of ``report.json``, ``rejects.jsonl``,
   ``.vlmpack/config.json``, ``manifest.parquet``, ``plan.npz`` and every shard and ``.tar.idx``,
   each hashed again; each sample's content sha256 (:func:`vlmpack.packfmt.sample_digest` of its
   pack-object entry and media bytes) is one the writer recorded for its pack in the shard's sealed
   marker; each media part's sha256 is the one the count stage recorded for that sample
   (``.vlmpack/records/``): a count taken for other bytes is a problem.
6. Energon (when ``.nv-meta`` is as vlmpack writes it and no link or oversized member was found):
   one pass of Energon's own ``get_train_dataset(VIEW, repeat=False, auto_decode=False)``, ``VIEW``
   a temporary folder with ``.nv-meta`` written from vlmpack's own bytes (never the files of ``OUT``)
   and links to ``OUT``'s shards (:func:`vlmpack.energon.load.energon_view`); every pack found in
   the tars comes out exactly once with
   the same sample ids, nothing else comes out, and every media part decodes with the training
   side's :func:`vlmpack.train.encode.open_image` (each distinct part once, by kind, extension and
   sha256; accepted formats only: a shard never makes
   ``check`` open an EPS). Samples Energon fails on (in training it
   logs and skips them) and exceptions it raises become problem lines naming shard and key.

Crafted outputs: nothing is read through a symbolic link (:func:`vlmpack.fsio.open_inside`), no
tar member over :func:`vlmpack.packfmt.part_limit` is read, JSON nests at most
:data:`vlmpack.packfmt.MAX_JSON_DEPTH` deep and a pack object's fields have their types
(:func:`vlmpack.packfmt.parse_pack`): each is a problem line, never an internal error.

Modules, by concern: :mod:`~vlmpack.check.findings` (what a check has found so far),
:mod:`~vlmpack.check.records` (steps 1, 2, 5: ``report.json``, the run dir, shard lists,
completeness), :mod:`~vlmpack.check.content` (step 5b: files, samples, media against the run
record), :mod:`~vlmpack.check.nvmeta` (step 1: ``.nv-meta`` as vlmpack writes it),
:mod:`~vlmpack.check.shards` (steps 3, 4: hashes, tars, packs, ``.tar.idx``) and
:mod:`~vlmpack.check.load` (step 6: Energon).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from vlmpack.check.content import check_files, finish, load_hashes
from vlmpack.check.findings import Findings
from vlmpack.check.load import check_energon
from vlmpack.check.records import check_totals, load_records, load_run_dir, shard_names
from vlmpack.check.shards import SHARDS_STEP, check_data_parallel, check_shard
from vlmpack.energon.load import iter_energon_packs, one_line

__all__ = ["check_output", "iter_energon_packs"]


def check_output(out_dir: str | Path, *, num_workers: int = 2, run_dir: bool = True, progress=None) -> dict:
    """Check ``out_dir`` as described in the module docstring; never raises for a bad output.

    ``num_workers``: Energon loader worker processes (0 = in this process). ``run_dir=False``:
    check without ``OUT/.vlmpack`` (no completeness, no per-sample token counts). ``progress``:
    called ``progress(label, advance, total)`` per pack read (tars, then Energon), for a progress bar.
    Returns ``{"packs", "samples", "unique_ids", "tokens", "max_pack_tokens", "duplicates",
    "problems", "ids", "shards", "shard_counts"}``: counts as Energon yielded them (``ids``: Counter
    id -> times yielded, ``duplicates``: ``(kind, id)`` pairs yielded more than once), ``problems``,
    a list of one-line strings, empty when everything holds, ``shards`` the names of the shards
    read (regular files of ``out``) and ``shard_counts`` what ``.info.json`` records (or None).
    """
    out = Path(out_dir)
    f = Findings(out, progress=progress)
    res = {"packs": 0, "samples": 0, "unique_ids": 0, "tokens": 0, "max_pack_tokens": 0, "duplicates": 0,
           "problems": f.problems, "ids": Counter(), "shards": [], "shard_counts": None}
    try:
        if not out.is_dir():
            f.add(f"{out} does not exist" if not out.exists() else f"{out} is not a directory")
            return res
        if not any(out.iterdir()):
            f.add(f"{out} is empty: not a vlmpack output (run vlmpack pack first)")
            return res
        if not load_records(f):
            return res
        if run_dir:
            load_run_dir(f)
            load_hashes(f)
        res["shards"] = shard_names(f)
        f.tick(SHARDS_STEP, 0, sum((f.counts or {}).values()) or None)
        for name in res["shards"]:
            try:
                check_shard(f, name)
            except OSError as e:
                f.add(f"{name}: cannot be read ({one_line(e)})")
        check_totals(f)
        check_data_parallel(f)
        check_files(f, res["shards"])
    except OSError as e:  # e.g. an unreadable directory
        f.add(f"{out}: cannot be read ({one_line(e)})")
        return res
    finally:
        finish(f)
    res["shard_counts"] = f.counts
    if f.meta_ok and f.load_ok:
        res.update(check_energon(f, num_workers))
    return res
