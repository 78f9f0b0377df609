"""Energon: the vlmpack TaskEncoders on real data, through get_train_dataset / get_savable_loader.

- offline packs written by ``vlmpack pack`` from the real demo set: every batch equals the
  collator's output on the same packs read with plain ``tarfile`` (Energon's PIL decoding gives
  the same pixels), and ``save_state_rank`` -> ``restore_state_rank`` in a new loader continues
  with exactly the same batches;
- online packing of the unpacked real demo WebDataset (``energon prepare``d as CrudeWebdataset):
  packs fit ``seq_len``, every sample's tokens equal ``family.encode``, and resume is exact too.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.energon")

from demo_data.packs import demo_packs  # noqa: E402
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset  # noqa: E402

from vlmpack.energon.task_encoder import VlmpackOnlineTaskEncoder, VlmpackTaskEncoder  # noqa: E402
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _loader(path, te, **kw):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=1)
    args = dict(batch_size=2, shuffle_buffer_size=8, max_samples_per_sequence=4, worker_config=wc,
                task_encoder=te) | kw
    return get_savable_loader(get_train_dataset(str(path), **args))


def _same(a: dict, b: dict) -> bool:
    keys = ("input_ids", "labels", "position_ids", "cu_seqlens", "pixel_values", "image_grid_thw")
    return a.get("__keys__") == b.get("__keys__") and a["sample_ids"] == b["sample_ids"] and all(
        (k not in a and k not in b) or torch.equal(a[k], b[k]) for k in keys)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _check_resume(path, make_te, **kw):
    loader = _loader(path, make_te(), **kw)
    it = iter(loader)
    first = _take(it, 3)
    state = pickle.loads(pickle.dumps(loader.save_state_rank()))
    expected = _take(it, 3)
    loader2 = _loader(path, make_te(), **kw)
    loader2.restore_state_rank(state)
    got = _take(iter(loader2), 3)
    assert all(_same(a, b) for a, b in zip(expected, got)), ([e["__keys__"] for e in expected],
                                                             [g["__keys__"] for g in got])
    return first + expected


@pytest.fixture(scope="module")
def packed(real_data, model_dir):
    return demo_packs(real_data, model_dir, seq_len=512, n_lines=300)


def test_offline_batches_equal_direct_collation_and_resume_exactly(packed, model_dir):
    batches = _check_resume(packed, lambda: VlmpackTaskEncoder(str(model_dir), position_layout=4))
    raw = {p["__key__"]: p for p in read_packs(packed)}
    direct = PackCollator(model_dir, position_layout=4)
    assert any("pixel_values" in b for b in batches)
    for b in batches:
        ref = direct.batch([raw[k] for k in b["__keys__"]])
        ref["__keys__"] = b["__keys__"]
        assert _same(b, ref)
        assert b["input_ids"].shape[1] == sum(json.loads(raw[k]["json"])["num_tokens"] for k in b["__keys__"])


@pytest.fixture(scope="module")
def crude_wds(real_data, tmp_path_factory):
    """One shard of the real unpacked demo WebDataset, prepared by the real ``energon prepare``."""
    out = tmp_path_factory.mktemp("crude")
    src = sorted((Path(real_data) / "wds").glob("*.tar"))[-1]
    shutil.copy(src, out / src.name)
    energon = Path(sys.executable).with_name("energon")
    subprocess.run([str(energon), "prepare", str(out), "--non-interactive", "--split-ratio", "1,0,0",
                    "--sample-type", "CrudeWebdataset", "--no-progress"], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)
    return out


def test_online_packing_energon(crude_wds, model_dir):
    seq_len = 1024

    def make_te():
        return VlmpackOnlineTaskEncoder(str(model_dir), seq_len=seq_len, rope_impl="numpy")

    batches = _check_resume(crude_wds, make_te, batch_size=1, packing_buffer_size=12)
    fam = make_te().collator.family
    multi = 0
    for b in batches:
        cu = b["cu_seqlens"].tolist()
        assert cu[-1] <= seq_len and b["input_ids"].shape[1] == cu[-1]
        multi += len(cu) > 2
        # the image-pad runs of each sample hold exactly its grids' features
        grids = b["image_grid_thw"].prod(-1) // 4 if "image_grid_thw" in b else torch.zeros(0)
        pads = int((b["input_ids"] == fam.image_token_id).sum())
        assert pads == int(grids.sum())
    assert multi > 0, "online packing put several samples into a pack"


def test_measure_item_equals_vlmpack_pack_counts(packed, model_dir):
    """The online count is the one ``vlmpack pack`` recorded, for every sample of the real packs."""
    from vlmpack.models import load_model
    from vlmpack.train.encode import read_pack
    from vlmpack.train.online import measure_item

    fam = load_model(str(model_dir))
    n = 0
    for raw in read_packs(packed):
        for item in read_pack(raw).items:
            assert measure_item(fam, item) == item.recorded_tokens, item.id
            n += 1
    assert n > 100
