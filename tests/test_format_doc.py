"""docs/format.md is the on-disk contract: every key a real pack holds is documented there, and
the documented invariants hold on a real output."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

from test_sources_wds import _pack

DOC = Path(__file__).resolve().parents[1] / "docs" / "format.md"


def test_every_written_key_is_documented(tmp_path, real_data, model_dir):
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()[:80]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _pack([tmp_path / "in.jsonl"], tmp_path / "o", model_dir, real_data, workers=1)
    doc = DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_\[\].]+)` \|", doc, flags=re.M))
    seen, n = set(), 0
    for shard in sorted((tmp_path / "o").glob("*.tar")):
        assert re.fullmatch(r"shard-\d{6}\.tar", shard.name)
        with tarfile.open(shard) as tf:
            members = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
        for name, data in members.items():
            if not name.endswith(".json"):
                continue
            key = name[:-5]
            assert re.fullmatch(r"pack\d{9}", key)
            obj = json.loads(data)
            seen |= set(obj)
            assert obj["format"] == "vlmpack.pack/1"
            assert obj["num_tokens"] == sum(s["num_tokens"] for s in obj["samples"]) <= obj["seq_len"]
            parts = [m["part"] for s in obj["samples"] for m in s["media"]]
            assert sorted(f"{key}.{p}" for p in parts) == sorted(m for m in members if m.startswith(key + ".")
                                                                 and not m.endswith(".json"))
            for s in obj["samples"]:
                n += 1
                seen |= {f"samples[].{k}" for k in s}
    assert n > 70
    assert seen <= documented, f"written but not in docs/format.md: {sorted(seen - documented)}"
