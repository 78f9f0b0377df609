"""``vlmpack pack --pretokenize``: an ``input_ids.npy`` part per pack that the collator uses as is.

On real packs of the demo set: the part equals the samples' ids from the model family, Energon
hands it over, the collator's batch from it is identical to the batch it tokenizes itself, and a
part that disagrees with the recorded counts or the images raises one line naming the pack.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from demo_data.packs import demo_packs

from vlmpack.errors import PackMismatchError
from vlmpack.models import load_model
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator


@pytest.fixture(scope="module")
def both(real_data, model_dir):
    plain = demo_packs(real_data, model_dir, seq_len=2048, n_lines=200, group_by_kind=False)
    pre = demo_packs(real_data, model_dir, seq_len=2048, n_lines=200, group_by_kind=False, pretokenize=True)
    return list(read_packs(plain)), list(read_packs(pre)), pre


def _ids(pack: dict) -> np.ndarray:
    return np.load(io.BytesIO(pack["input_ids.npy"]), allow_pickle=False)


def test_part_equals_family_encode(both, model_dir):
    import json

    plain, pre, _ = both
    family = load_model(str(model_dir))
    assert [p["__key__"] for p in plain] == [p["__key__"] for p in pre]
    assert all("input_ids.npy" not in p for p in plain)
    for pack in pre:
        meta = json.loads(pack["json"])
        ids = _ids(pack)
        assert ids.dtype == np.int32 and len(ids) == meta["num_tokens"]
        want = [family.encode([{**m, "content": [{"type": c["type"]} if "part" in c else c for c in m["content"]]}
                               for m in s["messages"]], [x["num_tokens"] for x in s["media"]])
                for s in meta["samples"]]
        assert np.array_equal(ids, np.concatenate(want))


def test_collator_batches_are_identical_with_and_without_tokenizing(both, model_dir):
    plain, pre, _ = both
    collator = PackCollator(str(model_dir))
    for a, b in zip(plain[:8], pre[:8]):
        ba, bb = collator(a), collator(b)
        assert ba.keys() == bb.keys()
        for k in ba:
            if isinstance(ba[k], torch.Tensor):
                assert torch.equal(ba[k], bb[k]), k
            else:
                assert ba[k] == bb[k], k


def test_energon_hands_over_the_ids(both):
    from vlmpack.check import iter_energon_packs

    _, pre, out = both
    by_key = {p["__key__"]: _ids(p) for p in pre}
    seen = 0
    for pack in iter_energon_packs(out, num_workers=0):
        assert np.array_equal(np.asarray(pack.input_ids), by_key[pack.__key__])
        seen += 1
    assert seen == len(pre)


def test_inconsistent_part_raises_one_line(both, model_dir):
    _, pre, _ = both
    collator = PackCollator(str(model_dir))
    pack = dict(pre[0])
    buf = io.BytesIO()
    np.save(buf, _ids(pack)[:-1])
    pack["input_ids.npy"] = buf.getvalue()
    with pytest.raises(PackMismatchError, match=rf"pack '{pack['__key__']}': input_ids part holds") as e:
        collator(pack)
    assert "\n" not in str(e.value)
    image_pack = next(p for p in pre if any(k.startswith("img") for k in p))
    pack = dict(image_pack)
    ids = _ids(pack).copy()
    family = load_model(str(model_dir))
    pos = int(np.flatnonzero(ids == family.image_token_id)[0])
    ids[pos] = family.tokenizer.convert_tokens_to_ids("a")  # one image pad fewer than features
    buf = io.BytesIO()
    np.save(buf, ids)
    pack["input_ids.npy"] = buf.getvalue()
    with pytest.raises(PackMismatchError, match="image tokens for"):
        collator(pack)
