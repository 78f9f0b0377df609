"""The one reader of the on-disk pack format ``vlmpack.pack/1`` (docs/format.md).

A shard holds one tar sample per pack: members ``<key>.<part>`` grouped by key, the pack object
in ``<key>.json``, media ``<key>.img<i>.<ext>`` / ``<key>.vid<i>.<ext>`` and optionally
``<key>.input_ids.npy``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path


def read_packs(out_dir: str | Path) -> Iterator[dict]:
    """Yield every pack of a vlmpack output as a raw WebDataset dict
    (``{"__key__", "json": bytes, "img0.png": bytes, ...}``), shards in name order."""
    for shard in sorted(Path(out_dir).glob("*.tar")):
        with tarfile.open(shard) as tf:
            cur: dict | None = None
            for m in tf:
                if not m.isfile():
                    continue
                name = m.name.rsplit("/", 1)[-1]
                key, part = name.split(".", 1)
                if cur is None or cur["__key__"] != key:
                    if cur is not None:
                        yield cur
                    cur = {"__key__": key}
                cur[part] = tf.extractfile(m).read()
            if cur is not None:
                yield cur
