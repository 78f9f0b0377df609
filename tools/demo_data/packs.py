"""Small real outputs of ``vlmpack pack`` for the training-side tests and benchmarks.

:func:`demo_packs` runs the real pipeline on the first lines of the demo set (cached per process).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_CACHE: dict[tuple, Path] = {}


def demo_packs(real_data: str | Path, model_dir: str | Path, *, seq_len: int = 1024, n_lines: int = 300,
               group_by_kind: bool = True, out: str | Path | None = None, **kw) -> Path:
    """Run ``vlmpack pack`` on the first ``n_lines`` records of ``real_data/real_sft.jsonl``.

    Returns the output directory (an Energon dataset of ``vlmpack.pack/1`` packs). Cached per
    process and argument set; without ``out``, in a temporary folder removed when the process exits.
    """
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    key = (str(real_data), str(model_dir), seq_len, n_lines, group_by_kind, str(out), tuple(sorted(kw.items())))
    if key in _CACHE:
        return _CACHE[key]
    if out is None:  # a folder of this process's own, removed when it exits
        out = tempfile.mkdtemp(prefix="vlmpack-train-")
        atexit.register(shutil.rmtree, out, ignore_errors=True)
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    src = base / "input.jsonl"
    with open(Path(real_data) / "real_sft.jsonl", "rb") as f, open(src, "wb") as g:
        for i, line in enumerate(f):
            if i >= n_lines:
                break
            g.write(line)
    dest = base / "packs"
    cfg = load_config(input=[str(src)], media_root=str(real_data), model=str(model_dir), output=str(dest),
                      seq_len=seq_len, progress=False, workers=1, group_by_kind=group_by_kind, **kw)
    run_pack(cfg)
    _CACHE[key] = dest
    return dest


def first_image_packs(out: str | Path, n: int = 2) -> list[dict]:
    """The first ``n`` packs of the output ``out`` (raw WebDataset dicts, in shard order) that hold
    >= 2 samples and >= 2 images together (the training-side equivalence tests of the Qwen3-VL,
    InternVL and GLM-4.1V families). ``AssertionError`` when the output holds fewer."""
    import json

    from vlmpack.packfmt import read_packs

    packs = []
    for p in read_packs(out):
        samples = json.loads(p["json"])["samples"]
        if sum(len(s["media"]) for s in samples) >= 2 and len(samples) >= 2:
            packs.append(p)
            if len(packs) == n:
                return packs
    raise AssertionError("the demo subset must give multi-sample image packs")


def multi_sample_image_packs(out: str | Path) -> list[dict]:
    """Two real multi-sample image packs of the output ``out`` (raw WebDataset dicts): the first
    with a multi-image sample, the next with >= 3 samples (the training-side equivalence tests).
    ``AssertionError`` when the output holds no such pair."""
    import json

    from vlmpack.packfmt import read_packs

    multi = many = None
    for p in read_packs(out):
        samples = json.loads(p["json"])["samples"]
        if len(samples) >= 2 and all(s["media"] for s in samples):
            if multi is None and any(len(s["media"]) > 1 for s in samples):
                multi = p
            elif many is None and len(samples) >= 3:
                many = p
    assert multi is not None and many is not None, "the demo subset must give multi-sample image packs"
    return [multi, many]
