"""docs/format.md is the on-disk contract: every key a real pack holds is documented there, and
the documented invariants hold on a real output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_sources_wds import _pack

from vlmpack.packfmt import read_packs

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
    for raw in read_packs(tmp_path / "o"):
        key = raw.pop("__key__")
        assert re.fullmatch(r"pack\d{9}", key)
        obj = json.loads(raw.pop("json"))
        seen |= set(obj)
        assert obj["format"] == "vlmpack.pack/1"
        assert obj["num_tokens"] == sum(s["num_tokens"] for s in obj["samples"]) <= obj["seq_len"]
        assert sorted(m["part"] for s in obj["samples"] for m in s["media"]) == sorted(raw)
        for s in obj["samples"]:
            n += 1
            seen |= {f"samples[].{k}" for k in s}
    assert n > 70
    assert seen <= documented, f"written but not in docs/format.md: {sorted(seen - documented)}"
