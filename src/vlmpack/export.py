"""``vlmpack export``: an output's packs as Parquet files that Hugging Face ``datasets`` reads as they are.

``datasets.load_dataset("webdataset", ...)`` cannot read a vlmpack output: its packs hold different
numbers of media members (``img0``, ``img1``, ...), and that loader requires every tar sample to have
the same ones. :func:`export_parquet` writes each shard of an output as one Parquet file of the same
name (``shard-000000.parquet``), one row per pack, in the order of the shard (docs/format.md for the
pack object; the same rows for every layout, read through the output's layout,
:func:`vlmpack.sinks.sink_of`):

========== ================ =================================================================
column     type             value
========== ================ =================================================================
key        string           the pack's tar key
seq_len    int32            capacity L (tokens)
num_tokens int32            tokens of the pack (<= seq_len)
samples    string           the pack object's ``samples`` as JSON (ids, sources, messages,
                            media entries, token counts)
media      list<binary>     the original bytes of each media part, in the pack's order
media_parts list<string>    their part names (``img0.png``, ...), as the samples name them
========== ================ =================================================================

Loading::

    from datasets import load_dataset
    ds = load_dataset("parquet", data_files="EXPORT/*.parquet", split="train")
    row = ds[0]; samples = json.loads(row["samples"]); images = row["media"]  # bytes

The export reads the shards only after ``vlmpack check`` passes on the output (``check=False`` skips
it), so what it writes is what Energon would load; each file is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vlmpack.errors import InputError
from vlmpack.fsio import atomic_write
from vlmpack.packfmt import ShardPacks, shard_paths
from vlmpack.sinks import sink_of

#: The schema of every exported file (module docstring).
SCHEMA = pa.schema([("key", pa.string()), ("seq_len", pa.int32()), ("num_tokens", pa.int32()),
                    ("samples", pa.string()), ("media", pa.list_(pa.binary())), ("media_parts", pa.list_(pa.string()))])


def _rows(shard: Path, sink) -> tuple[dict[str, list], int]:
    """The columns of one shard's packs (read through ``sink``) and the number of samples they hold."""
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    samples = 0
    for pack in ShardPacks(shard):
        obj, parts = sink.read_pack(pack.parts)
        names = [m["part"] for s in obj["samples"] for m in s["media"]]
        cols["key"].append(pack.key)
        cols["seq_len"].append(obj["seq_len"])
        cols["num_tokens"].append(obj["num_tokens"])
        cols["samples"].append(json.dumps(obj["samples"], ensure_ascii=False))
        cols["media"].append([parts[n] for n in names])
        cols["media_parts"].append(names)
        samples += len(obj["samples"])
    return cols, samples


def export_parquet(out_dir: str | Path, dest: str | Path, *, check: bool = True, num_workers: int = 2) -> dict:
    """Write each shard of the output ``out_dir`` as ``dest/<shard stem>.parquet`` (module docstring).

    Returns ``{"files", "packs", "samples", "bytes"}`` (Parquet bytes written). Raises
    :class:`InputError` when ``out_dir`` has no shard, when ``vlmpack check`` finds a problem
    (``check=True``; the first problem line is named) or when a pack cannot be read, and ``OSError``
    when ``dest`` cannot be written."""
    out, dest = Path(out_dir), Path(dest)
    shards = shard_paths(out)
    if not shards:
        raise InputError(f"{out} holds no shard (*.tar); give a vlmpack output directory")
    if check:
        from vlmpack.check import check_output

        problems = check_output(out, num_workers=num_workers)["problems"]
        if problems:
            raise InputError(f"{out} does not pass vlmpack check ({len(problems)} problems, first: {problems[0]}); "
                             "nothing exported")
    dest.mkdir(parents=True, exist_ok=True)
    sink = sink_of(out)
    res = {"files": 0, "packs": 0, "samples": 0, "bytes": 0}
    for shard in shards:
        try:
            cols, samples = _rows(shard, sink)
            table = pa.table(cols, schema=SCHEMA)
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"{shard}: a pack cannot be read ({' '.join(str(e).split())})") from None
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        data = buf.getvalue().to_pybytes()
        atomic_write(dest / f"{shard.stem}.parquet", data)
        res["files"] += 1
        res["packs"] += table.num_rows
        res["samples"] += samples
        res["bytes"] += len(data)
    return res
