"""``vlmpack check`` on an output written before a media kind was registered: its
``.nv-meta/sample_loader.py`` holds the loader bytes an earlier vlmpack wrote (``part_filter`` over
``("img", "vid")``), which pass by their sha256 (:data:`vlmpack.energon.meta.EARLIER_SAMPLE_LOADERS`);
any other bytes are still refused.

``fixtures/sample_loader_image_video.py.txt``: the loader bytes vlmpack wrote for image + video
(saved from :data:`vlmpack.energon.meta.SAMPLE_LOADER_SOURCE` before audio was to be added).
It is read as bytes only, never imported or run.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from vlmpack.check import check_output
from vlmpack.energon.meta import EARLIER_SAMPLE_LOADERS

OLD_LOADER = (Path(__file__).parent / "fixtures" / "sample_loader_image_video.py.txt").read_bytes()


@pytest.fixture(scope="module")
def small_out(tmp_path_factory, real_data, model_dir) -> Path:
    """One output of the first 40 demo records (L = 4096), written by this vlmpack."""
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    tmp = tmp_path_factory.mktemp("earlier_loader")
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    (tmp / "sub.jsonl").write_text("".join(lines), encoding="utf-8")
    out = tmp / "out"
    run_pack(load_config(input=[str(tmp / "sub.jsonl")], media_root=str(real_data), model=str(model_dir),
                         seq_len=4096, output=str(out), workers=1, progress=False))
    return out


def _with_loader(src: Path, dst: Path, loader: bytes) -> Path:
    shutil.copytree(src, dst)
    (dst / ".nv-meta" / "sample_loader.py").write_bytes(loader)
    return dst


def test_the_saved_loader_is_an_earlier_image_video_loader():
    assert hashlib.sha256(OLD_LOADER).hexdigest() in EARLIER_SAMPLE_LOADERS
    assert b'part.startswith(("img", "vid"))' in OLD_LOADER


def test_an_output_with_the_earlier_loader_passes(small_out, tmp_path):
    assert check_output(small_out, num_workers=0)["problems"] == []
    out = _with_loader(small_out, tmp_path / "old", OLD_LOADER)
    assert check_output(out, num_workers=0)["problems"] == []


def test_an_edited_earlier_loader_is_refused(small_out, tmp_path):
    out = _with_loader(small_out, tmp_path / "edited", OLD_LOADER + b"import os\n")
    problems = check_output(out, num_workers=0)["problems"]
    assert any("sample_loader.py differs from what vlmpack writes" in p for p in problems), problems
