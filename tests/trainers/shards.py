"""What a trainer's json members hold, read with ``tarfile`` and ``json`` only (never vlmpack's
readers): the ``vlmpack`` pack object each trainer layout's json carries beside the trainer's fields."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path


def pack_objects(out: Path) -> dict[str, dict]:
    """Pack key -> the ``vlmpack`` object of its json member, over the shards of ``out`` in name order."""
    objs = {}
    for shard in sorted(Path(out).glob("*.tar")):
        with tarfile.open(shard) as tf:
            for m in tf:
                if m.name.endswith(".json"):
                    objs[m.name.split(".")[0]] = json.load(tf.extractfile(m))["vlmpack"]
    return objs
