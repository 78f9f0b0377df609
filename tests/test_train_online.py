"""Online packing without Energon: the resumable IterableDataset (vlmpack.packing.StreamingPacker), on the
real demo samples read by vlmpack's own reader (canonical ``records.Sample`` with media paths)."""

from __future__ import annotations

import pickle

import pytest
import torch

from vlmpack.train import PackCollator
from vlmpack.train.online import OnlinePackedDataset, measure_item

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def samples(real_data):
    """The first 120 records of the real demo set in canonical form (vlmpack's schema converter)."""
    return _read_samples(real_data, 120)


def _read_samples(real_data, n):
    import json

    from vlmpack.layouts import to_canonical
    from vlmpack.records import Locator, Media, Sample

    out = []
    with open(real_data / "real_sft.jsonl") as f:
        for i, line in enumerate(f):
            if len(out) >= n:
                break
            obj = json.loads(line)
            msgs, media = to_canonical(obj)
            out.append(Sample(id=obj["id"], messages=msgs, locator=Locator("real_sft.jsonl", i + 1, 0),
                              media=[Media(kind=k, ref=r, path=str(real_data / r)) for k, r in media]))
    return out


def _same(a, b):
    return a["sample_ids"] == b["sample_ids"] and all(
        torch.equal(a[k], b[k]) for k in ("input_ids", "labels", "position_ids", "cu_seqlens"))


def test_online_dataset_packs_and_resumes_exactly(samples, model_dir):
    collator = PackCollator(model_dir, rope_impl="numpy")
    ds = OnlinePackedDataset(samples, collator, seq_len=1024, buffer_size=8)
    it = iter(ds)
    first = [next(it) for _ in range(4)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    rest = list(it)
    ds2 = OnlinePackedDataset(lambda: iter(samples), collator, seq_len=1024, buffer_size=8)
    ds2.load_state_dict(state)
    rest2 = list(ds2)
    assert len(rest) == len(rest2) > 0 and all(_same(a, b) for a, b in zip(rest, rest2))
    batches = first + rest
    ids = [s for b in batches for s in b["sample_ids"]]
    assert len(ids) == len(set(ids))
    assert len(ids) + ds.state_dict()["dropped"] == len(samples)
    assert all(b["cu_seqlens"][-1] <= 1024 for b in batches)
    assert sum(len(b["sample_ids"]) > 1 for b in batches) > len(batches) // 2
    # token counts equal the exact measure
    fam = collator.family
    from vlmpack.train.encode import read_pack
    by_id = {s.id: s for s in samples}
    for b in batches[:5]:
        lens = torch.diff(b["cu_seqlens"]).tolist()
        for sid, n in zip(b["sample_ids"], lens):
            assert measure_item(fam, read_pack([by_id[sid]]).items[0]) == n


def test_online_dataset_data_parallel_ranks_are_disjoint(samples, model_dir):
    collator = PackCollator(model_dir, mrope=False)
    got = []
    for r in range(2):
        ds = OnlinePackedDataset(samples[:40], collator, seq_len=2048, buffer_size=8, rank=r, world_size=2)
        got.append({s for b in ds for s in b["sample_ids"]})
    assert not (got[0] & got[1]) and len(got[0] | got[1]) <= 40
