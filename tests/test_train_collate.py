"""The collator on real packs (``vlmpack pack`` of the real demo data, real Qwen tokenizer/processor).

Each test checks one promise of the training side against an independent reference:
ids vs ``family.encode``; labels vs the assistant texts of the messages; positions / cu_seqlens /
seq_idx vs the sample lengths; mRoPE vs transformers' ``get_rope_index`` per sample; pixel
values vs the image processor on ``load_image``; compact errors on tampered packs.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from demo_data.packs import demo_packs

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.models import load_model
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs, read_pack

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def raw_packs(real_data, model_dir):
    return list(read_packs(demo_packs(real_data, model_dir, seq_len=512, n_lines=300)))


@pytest.fixture(scope="module")
def fam(model_dir):
    return load_model(str(model_dir))


@pytest.fixture(scope="module")
def collator(model_dir):
    return PackCollator(model_dir, rope_impl="numpy")


def _with_images(packs, k=2):
    return [p for p in packs if sum(x.startswith("img") for x in p) >= k]


def test_input_ids_equal_family_encode_and_recorded_counts(raw_packs, collator, fam):
    for raw in raw_packs[:40]:
        meta = json.loads(raw["json"])
        b = collator(raw)
        assert b["input_ids"].shape == (1, meta["num_tokens"])
        cu = b["cu_seqlens"].tolist()
        for s, (a, z) in zip(meta["samples"], zip(cu[:-1], cu[1:])):
            media_tokens = [m["num_tokens"] for m in s["media"]]
            assert np.array_equal(b["input_ids"][0, a:z].numpy(), fam.encode(s["messages"], media_tokens))
            assert z - a == s["num_tokens"]


def test_labels_are_exactly_the_assistant_turns(raw_packs, collator, fam):
    """Decoding each labelled span gives an assistant message's text + <|im_end|>, in order."""
    tok = fam.tokenizer
    checked = 0
    for raw in raw_packs[:40]:
        meta = json.loads(raw["json"])
        b = collator(raw)
        labels, cu = b["labels"][0].numpy(), b["cu_seqlens"].tolist()
        assert set(labels[np.asarray(cu[:-1])]) == {-100}
        for s, (a, z) in zip(meta["samples"], zip(cu[:-1], cu[1:])):
            lab = labels[a:z]
            on = np.flatnonzero(lab != -100)
            spans = np.split(on, np.flatnonzero(np.diff(on) > 1) + 1) if len(on) else []
            texts = [tok.decode(lab[sp]) for sp in spans]
            want = ["".join(p["text"] for p in m["content"] if p["type"] == "text") + "<|im_end|>"
                    for m in s["messages"] if m["role"] == "assistant"]
            assert texts == want, s["id"]
            checked += 1
    assert b["num_label_tokens"] == int((b["labels"] != -100).sum())
    assert checked > 50


def test_positions_cu_seqlens_seq_idx(raw_packs, model_dir):
    c = PackCollator(model_dir, mrope=False)
    raw = max(raw_packs, key=lambda p: len(json.loads(p["json"])["samples"]))
    lens = [s["num_tokens"] for s in json.loads(raw["json"])["samples"]]
    b = c(raw)
    assert b["cu_seqlens"].dtype == torch.int32 and b["cu_seqlens"].tolist() == np.cumsum([0] + lens).tolist()
    assert isinstance(b["max_seqlen"], int) and b["max_seqlen"] == max(lens)
    assert b["position_ids"].shape == (1, sum(lens))
    assert b["position_ids"][0].tolist() == [i for n in lens for i in range(n)]
    assert b["seq_idx"][0].tolist() == [k for k, n in enumerate(lens) for _ in range(n)]
    assert "attention_mask" not in b


def test_mrope_per_sample_equals_get_rope_index_alone(raw_packs, model_dir, collator):
    """The packed [3, 1, T] rows equal transformers' get_rope_index on each sample alone; [4, 1, T]
    adds the restarting text row."""
    from transformers import AutoConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    class Shim:
        config = AutoConfig.from_pretrained(str(model_dir))
        get_rope_index = Qwen2_5_VLModel.get_rope_index
        get_vision_position_ids = Qwen2_5_VLModel.get_vision_position_ids

    c4 = PackCollator(model_dir, position_layout=4)
    for raw in _with_images(raw_packs)[:4]:
        b, b4 = collator(raw), c4(raw)
        cu, g = b["cu_seqlens"].tolist(), b["image_grid_thw"]
        gi = 0
        for a, z in zip(cu[:-1], cu[1:]):
            ids = b["input_ids"][:, a:z]
            mm = (ids == Shim.config.image_token_id).int()
            k = int((torch.diff(mm[0], prepend=torch.zeros(1, dtype=torch.int)) == 1).sum())
            pos, _ = Shim().get_rope_index(ids, mm_token_type_ids=mm, image_grid_thw=g[gi:gi + k] if k else None)
            gi += k
            assert torch.equal(b["position_ids"][:, :, a:z], pos)
            assert torch.equal(b4["position_ids"][1:, :, a:z], pos)
            assert b4["position_ids"][0, 0, a:z].tolist() == list(range(z - a))


def test_pixel_values_in_sample_order_like_the_processor(raw_packs, collator, fam):
    import io

    from PIL import Image
    from transformers.image_utils import load_image

    raw = _with_images(raw_packs, 3)[0]
    meta = json.loads(raw["json"])
    parts = [p["part"] for s in meta["samples"] for m in s["messages"] for p in m["content"]
             if p["type"] == "image"]
    ref = fam.image_processor(images=[load_image(Image.open(io.BytesIO(raw[p]))) for p in parts],
                              return_tensors="pt")
    b = collator(raw)
    assert torch.equal(b["pixel_values"], ref["pixel_values"])
    assert torch.equal(b["image_grid_thw"], ref["image_grid_thw"])
    assert int((b["input_ids"] == fam.image_token_id).sum()) == int(ref["image_grid_thw"].prod(-1).sum()) // 4


def test_all_input_forms_give_the_same_batch(raw_packs, collator):
    """Raw WebDataset dict == pack-field dict (bytes) == list of unpacked samples."""
    raw = _with_images(raw_packs)[0]
    meta = json.loads(raw["json"])
    parts = [m["part"] for s in meta["samples"] for m in s["media"]]
    as_fields = {**meta, "__key__": raw["__key__"], "media": [raw[p] for p in parts], "media_parts": parts}
    unpacked = []
    for s in meta["samples"]:
        order = [p["part"] for m in s["messages"] for p in m["content"] if p["type"] == "image"]
        msgs = copy.deepcopy(s["messages"])
        for m in msgs:
            for p in m["content"]:
                if p["type"] == "image":
                    p["index"] = order.index(p.pop("part"))
        unpacked.append({"id": s["id"], "messages": msgs, "images": [raw[p] for p in order]})
    a, b, c = collator(raw), collator(as_fields), collator(unpacked)
    for k in ("input_ids", "labels", "position_ids", "cu_seqlens", "pixel_values", "image_grid_thw"):
        assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]), k
    assert len(read_pack(unpacked).items) == len(meta["samples"])


def test_padding_is_its_own_masked_segment(raw_packs, model_dir):
    c = PackCollator(model_dir, pad_to_multiple_of=128, attn_implementation="sdpa", dense_mask=True,
                     position_layout=4)
    raw = raw_packs[0]
    t = json.loads(raw["json"])["num_tokens"]
    b = c(raw)
    tp = -(-t // 128) * 128
    pad = tp - t
    assert b["input_ids"].shape == (1, tp) and b["num_padding"] == pad
    assert b["cu_seqlens"][-1] == t and b["cu_seqlens_padded"].tolist() == b["cu_seqlens"].tolist() + [tp]
    assert (b["labels"][0, t:] == -100).all() and b["position_ids"].shape == (4, 1, tp)
    assert b["position_ids"][:, 0, t:].tolist() == [list(range(pad))] * 4
    m = b["attention_mask"][0, 0]
    assert m.shape == (tp, tp) and not m[t:, :t].any() and not m[:t, t:].any()
    assert b["max_seqlen_padded"] == max(b["max_seqlen"], pad)


def test_dense_mask_only_on_request_and_only_for_sdpa_eager(raw_packs, model_dir):
    with pytest.raises(ConfigError, match="dense_mask"):
        PackCollator(model_dir, dense_mask=True, attn_implementation="flash_attention_2")
    b = PackCollator(model_dir, attn_implementation="sdpa")(raw_packs[0])
    assert "attention_mask" not in b
    kw = model_inputs(b, "flash_attention_2")
    assert kw["cu_seq_lens_q"].dtype == torch.int32 and isinstance(kw["max_length_q"], int)
    be = PackCollator(model_dir, attn_implementation="eager", dense_mask=True)(raw_packs[0])
    add = model_inputs(be, "eager")["attention_mask"]
    assert add.dtype == torch.float32 and (add == 0).equal(be["attention_mask"])


def test_mismatch_raises_one_compact_error(raw_packs, collator):
    raw = dict(_with_images(raw_packs)[0])
    meta = json.loads(raw["json"])
    sid = meta["samples"][-1]["id"]
    meta["samples"][-1]["num_tokens"] += 1
    raw["json"] = json.dumps(meta).encode()
    with pytest.raises(PackMismatchError) as e:
        collator(raw)
    msg = str(e.value)
    assert raw["__key__"] in msg and sid in msg and "\n" not in msg
    meta["samples"][-1]["num_tokens"] -= 1
    meta["num_tokens"] += 3
    raw["json"] = json.dumps(meta).encode()
    with pytest.raises(PackMismatchError, match=raw["__key__"]):
        collator(raw)
    # an image whose recorded count differs (e.g. another processor config) names the part
    meta["num_tokens"] -= 3
    s = next(s for s in meta["samples"] if s["media"])
    s["media"][0]["num_tokens"] += 1
    raw["json"] = json.dumps(meta).encode()
    with pytest.raises(PackMismatchError, match=s["media"][0]["part"]):
        collator(raw)


def test_placeholder_image_for_text_only_batches(raw_packs, model_dir, fam):
    c = PackCollator(model_dir, placeholder_image=True, loss_weighting="token")
    text = next(p for p in raw_packs if not any(k.startswith("img") for k in p))
    t = json.loads(text["json"])["num_tokens"]
    b = c(text)
    n_img = int((b["input_ids"] == fam.image_token_id).sum())
    assert n_img > 0 and b["image_grid_thw"].shape == (1, 3)
    assert n_img == int(b["image_grid_thw"].prod()) // 4
    assert b["input_ids"].shape[1] == t + n_img + 2 and (b["labels"][0, t:] == -100).all()
    assert b["cu_seqlens"].tolist()[-2] == t and b["num_samples"] == len(json.loads(text["json"])["samples"])
    plain = PackCollator(model_dir, loss_weighting="token")(text)
    assert b["num_label_tokens"] == plain["num_label_tokens"]
    assert torch.allclose(b["loss_weights"][0, :t], plain["loss_weights"][0])
    img = _with_images(raw_packs)[0]
    assert torch.equal(c(img)["input_ids"], plain_ids(model_dir, img))


def plain_ids(model_dir, raw):
    return PackCollator(model_dir)(raw)["input_ids"]


def test_several_packs_make_one_row(raw_packs, collator):
    a, b = raw_packs[0], raw_packs[1]
    ab = collator.batch([a, b])
    ba, bb = collator(a), collator(b)
    assert torch.equal(ab["input_ids"], torch.cat([ba["input_ids"], bb["input_ids"]], 1))
    assert ab["pack_keys"] == [a["__key__"], b["__key__"]]
    assert ab["cu_seqlens"].tolist() == ba["cu_seqlens"].tolist() + [
        x + ba["cu_seqlens"][-1].item() for x in bb["cu_seqlens"].tolist()[1:]]


def test_media_counts_per_sample_slice_the_media_tensors(raw_packs, collator, fam):
    """Pipeline parallel: per segment of ``cu_seqlens``, the images, videos and media tokens of each
    sample, so that a micro-batch split slices ``image_grid_thw`` by ``images_per_sample`` and
    ``pixel_values`` by the rows of those grids (t*h*w = media tokens x merge_size**2)."""
    checked = 0
    for raw in _with_images(raw_packs, 2)[:12]:
        meta = json.loads(raw["json"])
        b = collator(raw)
        n = len(meta["samples"])
        for key in ("images_per_sample", "videos_per_sample", "media_tokens_per_sample"):
            assert b[key].dtype == torch.int32 and tuple(b[key].shape) == (n,) == (len(b["cu_seqlens"]) - 1,)
        images = b["images_per_sample"].tolist()
        assert images == [sum(m["kind"] == "image" for m in s["media"]) for s in meta["samples"]]
        assert b["videos_per_sample"].tolist() == [0] * n
        tokens = b["media_tokens_per_sample"].tolist()
        assert tokens == [sum(m["num_tokens"] for m in s["media"]) for s in meta["samples"]]
        bounds = np.cumsum([0, *images])
        rows = [int(b["image_grid_thw"][a:z].prod(-1).sum()) for a, z in zip(bounds[:-1], bounds[1:])]
        assert rows == [t * fam.merge_size**2 for t in tokens] and sum(rows) == b["pixel_values"].shape[0]
        checked += sum(x > 0 for x in images)
    assert checked >= 20
