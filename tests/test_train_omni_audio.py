"""Qwen2.5-Omni on the training side (issue 23 item 3): the collator computes the audio features as
``Qwen2_5OmniProcessor`` does, the thinker's mRoPE per sample, and a tiny thinker trains a packed row
as its samples alone.

Directory and records: the fixtures of ``tests/test_models_qwen2_5_omni.py`` (the offline Omni
directory with the published template's audio string; one audio sample per real corpus file, an
image + audio sample, a sample with two audio items) plus the first image / text records of the demo
set, packed by ``vlmpack pack`` at a sequence length that gives several packs.

1. For every pack holding audio, ``PackCollator`` gives, per sample, the ``input_ids`` of
``Qwen2_5OmniProcessor.__call__`` on the rendered template with the packed media decoded (images by
the kind's decoder, audio by :func:`vlmpack.media.audio.decode_audio` at 16 kHz, as the processor
is fed), whose length is the recorded ``num_tokens``; its ``feature_attention_mask`` is the
processor's, sample after sample, and so are its ``input_features`` (log-mel values computed for
real on the first ``REAL_PACKS`` audio packs: the output has two, all 15 audio items; a pack past
them would get, on both sides, the shape-true stand-in of ``test_audio.shape_only_fbank``, which
the mask and the token count never read), its
``pixel_values`` / ``image_grid_thw`` and ``audios_per_sample``; its per-sample mRoPE positions are
those of the thinker's own ``get_rope_index`` run on the processor's output for the sample alone
(``audio_seqlens`` = the processor's ``feature_attention_mask.sum(-1)``). A batch of two packs
holds the two packs' audio inputs in order. An audio member swapped for another file's bytes (its
feature frames give another token count than recorded) raises ``PackMismatchError``; a family
without ``process_media`` is refused with ``ConfigError``.
2. A tiny random ``Qwen2_5OmniThinkerForConditionalGeneration`` (audio encoder of 2 layers at the real
128 mel bins, ``n_window`` and ``max_source_positions``; vision tower of 2 layers at the real patch
14, merge 2, temporal patch 2 and window 112; text model of 2 layers with 3-D mRoPE; the directory's
vocabulary size and the tokenizer's token ids) gives the same logits on a packed row (collator
output for a pack of three packed samples: the image + audio one, the two-audio one and a demo
image sample; real log-mel, pixels, per-sample positions) as on each sample run alone through
transformers' own path (the processor's output; the model computes its own positions), with the
``sdpa`` and ``eager`` block masks and the mask-free ``[4, 1, T]`` positions. Negative controls: a
plain causal mask differs; 1-D positions differ on the sample holding an image.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_runner import run_cli
from conftest import last_hidden, logit_diff
from test_audio import shape_only_fbank
from test_models_qwen2_5_omni import audio_files, omni_dir, omni_records  # noqa: F401 - module fixtures used here

from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.media.kinds import KINDS
from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: audio packs whose log-mel values are computed for real on both sides (each item: a 300 s STFT)
REAL_PACKS = 2
SEQ_LEN = 8192
ATOL = 1e-4


@pytest.fixture(scope="module")
def omni_packs(real_data, omni_dir, audio_files, tmp_path_factory) -> list[dict]:  # noqa: F811
    """The packs (raw WebDataset dicts) of the audio samples + 8 demo records."""
    from vlmpack.packfmt import read_packs

    records = omni_records(real_data, audio_files, n_demo=8, at=4, with_video=False)
    d = tmp_path_factory.mktemp("omni_train")
    (d / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    r = run_cli(["pack", "-i", d / "in.jsonl", "--model", omni_dir, "-o", d / "out", "--seq-len", str(SEQ_LEN),
                 "--allow-absolute-media", "-j", "1", "--no-progress"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    packs = list(read_packs(d / "out"))
    assert sum(len(json.loads(p["json"])["samples"]) for p in packs) == len(records)
    return packs


def _parts(sample: dict) -> list[dict]:
    return [c for m in sample["messages"] if isinstance(m["content"], list) for c in m["content"]
            if c.get("type") in KINDS]


def _reference(proc, raw: dict, sample: dict):
    """``Qwen2_5OmniProcessor.__call__`` on one packed sample alone (``return_tensors="pt"``)."""
    parts = _parts(sample)
    images = [KINDS["image"].decode(raw[c["part"]], where=c["part"]) for c in parts if c["type"] == "image"]
    waves = [KINDS["audio"].decode(raw[c["part"]], where=c["part"]) for c in parts if c["type"] == "audio"]
    messages = [{**m, "content": [{"type": "text", "text": c["text"]} if c["type"] == "text" else {"type": c["type"]}
                                  for c in m["content"]]} if isinstance(m["content"], list) else m
                for m in sample["messages"]]
    text = proc.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return proc(text=[text], images=images or None, audio=waves or None, return_tensors="pt")


def _cat(refs: list, key: str):
    got = [r[key] for r in refs if key in r]
    return torch.cat(got) if got else None


@contextlib.contextmanager
def _fbank(real: bool, *extractors):
    """Real log-mel on both sides, or the shape-true stand-in on every extractor given."""
    with contextlib.ExitStack() as stack:
        for fe in extractors if not real else ():
            stack.enter_context(shape_only_fbank(fe, real_files=0))
        yield


@pytest.fixture(scope="module")
def proc(omni_dir):  # noqa: F811
    from vlmpack.models.processor_build import build_processor

    return build_processor(omni_dir)


def tiny_thinker(model_dir: Path, *, attn_implementation: str = "sdpa", seed: int = 0):
    """A random ``Qwen2_5OmniThinkerForConditionalGeneration`` with tiny towers (module docstring)
    at the real audio / vision geometry of ``model_dir``'s ``thinker_config`` and the token ids of
    its tokenizer (the stand-in's ids are not the published config's); float32, eval mode."""
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniThinkerConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration

    from vlmpack.models import load_model

    fam = load_model(str(model_dir))
    real = json.loads((model_dir / "config.json").read_text())["thinker_config"]
    ra, rv = real["audio_config"], real["vision_config"]
    torch.manual_seed(seed)
    text = dict(vocab_size=real["text_config"]["vocab_size"], hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]})
    audio = dict(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, output_dim=64,
                 **{k: ra[k] for k in ("num_mel_bins", "n_window", "max_source_positions")})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, in_channels=3,
                  fullatt_block_indexes=[1], **{k: rv[k] for k in ("patch_size", "spatial_merge_size",
                                                                   "temporal_patch_size", "window_size")})
    cfg = Qwen2_5OmniThinkerConfig(text_config=text, audio_config=audio, vision_config=vision,
                                   image_token_index=fam.image_token_id, video_token_index=fam.video_token_id,
                                   audio_token_index=fam.audio_token_id,
                                   audio_start_token_id=fam.audio_start_token_id)
    cfg.vision_start_token_id = fam.vision_start_token_id
    for c in (cfg, cfg.text_config, cfg.vision_config, cfg.audio_config):
        c._attn_implementation = attn_implementation
    return Qwen2_5OmniThinkerForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def thinkers(omni_dir):  # noqa: F811
    return {impl: tiny_thinker(omni_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


def _audio_packs(packs: list[dict]) -> list[dict]:
    return [p for p in packs if any(k.startswith("aud") for k in p)]


def _alone_positions(thinker, ref) -> torch.Tensor:
    """The thinker's own positions ``[3, n]`` of one sample alone (``compute_3d_position_ids``'s call)."""
    fam = ref.get("feature_attention_mask")
    pos, _ = thinker.model.get_rope_index(ref["input_ids"], ref.get("image_grid_thw"), None,
                                          torch.ones_like(ref["input_ids"]), False,
                                          None if fam is None else fam.sum(-1), None)
    return pos[:, 0]


def test_collator_audio_inputs_equal_the_omni_processor(omni_packs, omni_dir, proc, thinkers):  # noqa: F811
    collator = PackCollator(omni_dir, attn_implementation="sdpa")
    fam_fe, proc_fe = collator.family.feature_extractor(), proc.feature_extractor
    audio_packs = _audio_packs(omni_packs)
    assert len(audio_packs) >= 2
    n_audio = n_real = n_image_audio = 0
    for i, raw in enumerate(audio_packs):
        samples = json.loads(raw["json"])["samples"]
        with _fbank(i < REAL_PACKS, fam_fe, proc_fe):
            batch = collator(raw)
            refs = [_reference(proc, raw, s) for s in samples]
        cu = batch["cu_seqlens"].tolist()
        for s, ref, a, b in zip(samples, refs, cu[:-1], cu[1:]):
            assert torch.equal(batch["input_ids"][0, a:b], ref["input_ids"][0]), (raw["__key__"], s["id"])
            assert b - a == s["num_tokens"], s["id"]
            assert torch.equal(batch["position_ids"][:, 0, a:b], _alone_positions(thinkers["sdpa"], ref)), s["id"]
            n_image_audio += "feature_attention_mask" in ref and "image_grid_thw" in ref
        want_mask = _cat(refs, "feature_attention_mask")
        assert batch["audio_input_keys"] == ("input_features", "feature_attention_mask")
        assert batch["feature_attention_mask"].dtype == want_mask.dtype
        assert torch.equal(batch["feature_attention_mask"], want_mask), raw["__key__"]
        want = _cat(refs, "input_features")
        assert batch["input_features"].dtype == want.dtype == torch.float32
        assert torch.equal(batch["input_features"], want), raw["__key__"]
        assert batch["audios_per_sample"].tolist() == [sum(c["type"] == "audio" for c in _parts(s)) for s in samples]
        want_pixels = _cat(refs, "pixel_values")
        if want_pixels is not None:
            assert torch.equal(batch["pixel_values"], want_pixels)
            assert torch.equal(batch["image_grid_thw"], _cat(refs, "image_grid_thw"))
        n_audio += len(want_mask)
        n_real += len(want_mask) if i < REAL_PACKS else 0
    assert n_audio == n_real == 15 and n_image_audio == 1  # 12 one-audio samples, image + audio, two-audio


def test_a_batch_holds_its_packs_audio_in_order(omni_packs, omni_dir):  # noqa: F811
    collator = PackCollator(omni_dir, attn_implementation="sdpa")
    audio_packs = _audio_packs(omni_packs)[:2]
    with _fbank(False, collator.family.feature_extractor()):
        one = [collator(p) for p in audio_packs]
        both = collator.batch(audio_packs)
    for key in ("input_features", "feature_attention_mask", "audios_per_sample"):
        assert torch.equal(both[key], torch.cat([b[key] for b in one])), key
    assert torch.equal(both["position_ids"], torch.cat([b["position_ids"] for b in one], dim=2))
    kw = model_inputs(both, "sdpa")
    assert kw["input_features"] is both["input_features"] and "feature_attention_mask" in kw


def test_audio_of_another_length_than_recorded_is_a_pack_mismatch(omni_packs, omni_dir, audio_files):  # noqa: F811
    collator = PackCollator(omni_dir, attn_implementation="sdpa")
    raw = _audio_packs(omni_packs)[0]
    part = next(k for k in raw if k.startswith("aud"))
    sample = next(s for s in json.loads(raw["json"])["samples"] for c in _parts(s) if c.get("part") == part)
    recorded = next(m["num_tokens"] for m in sample["media"] if m["part"] == part)
    swapped = next(data for name in ("speech_short.wav", "word.mp3")
                   if (data := audio_files[name].read_bytes()) != raw[part])
    with _fbank(False, collator.family.feature_extractor()):
        with pytest.raises(PackMismatchError, match=rf"audio {part} gives \d+ tokens from its features but the "
                                                    rf"pack records {recorded}"):
            collator({**raw, part: swapped})


def test_families_without_the_hooks_are_refused(omni_dir, omni_packs):  # noqa: F811
    from vlmpack.train.kind_media import process_pack_media

    with pytest.raises(ConfigError, match="rope_impl='transformers'"):
        PackCollator(omni_dir, rope_impl="numpy")
    raw = _audio_packs(omni_packs)[0]
    part = next(k for k in raw if k.startswith("aud"))

    class NoAudio:
        model_dir, name = "dir", "toy"

    with pytest.raises(ConfigError, match="toy family cannot train on audio items"):
        process_pack_media(NoAudio(), [[("audio", raw[part], part)]])


def test_omni_features_are_the_extractors_per_sample_call(omni_dir):  # noqa: F811
    """``process_media`` groups items by sample and takes the tokens from the mask by the
    processor's ``_get_feat_extract_output_lengths``."""
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import _get_feat_extract_output_lengths

    from vlmpack.models import load_model

    fam = load_model(str(omni_dir))
    rng = np.random.default_rng(0)
    waves = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (16000, 3217, 48000)]
    with shape_only_fbank(fam.feature_extractor(), real_files=1):
        out = fam.process_media("audio", waves, [1, 0, 2])
    mask = out.model_kwargs["feature_attention_mask"]
    assert mask.shape == (3, 30000) and mask.sum(-1).tolist() == [100, 21, 300]
    assert out.tokens.tolist() == _get_feat_extract_output_lengths(mask.sum(-1)).tolist() == [25, 5, 75]
    with pytest.raises(ConfigError, match="cannot train on image items"):
        fam.process_media("image", [], [])


# ---------------------------------------------------------------------------------- tiny thinker
@pytest.fixture(scope="module")
def thinker_pack(omni_packs) -> dict:
    """A pack of three samples of the output: the image + audio sample, the two-audio sample and the
    first demo sample with an image, as packed (messages, recorded counts, media members, renamed
    ``<tag><N>.<ext>`` in order so that members of two packs cannot collide), ``num_tokens`` their sum."""
    by_id = {s["id"]: (p, s) for p in omni_packs for s in json.loads(p["json"])["samples"]}
    demo = next(i for i, (_, s) in by_id.items() if not i.startswith("audio-") and i not in ("image-and-audio",
                "two-audio") and any(c["type"] == "image" for c in _parts(s)))
    meta = json.loads(omni_packs[0]["json"])
    raw, samples, n = {"__key__": "thinker-pack"}, [], 0
    for sid in ("image-and-audio", "two-audio", demo):
        pack, sample = by_id[sid]
        sample = json.loads(json.dumps(sample))
        names = {}
        for c in _parts(sample):
            old = c["part"]
            names[old] = c["part"] = f"{old[:3]}{n}.{old.split('.', 1)[1]}"
            raw[names[old]] = pack[old]
            n += 1
        for m in sample["media"]:
            m["part"] = names[m["part"]]
        samples.append(sample)
    raw["json"] = json.dumps({**meta, "samples": samples, "num_tokens": sum(x["num_tokens"] for x in samples)})
    return raw


@pytest.fixture(scope="module")
def thinker_enc(thinker_pack, omni_dir):  # noqa: F811
    """The pack encoded once (real log-mel; positions for every layout: collate() adds the text row)."""
    return PackCollator(omni_dir, attn_implementation="sdpa").encode(thinker_pack)


def _alone(cache: dict, proc, model, pack) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input_ids, hidden states)`` of every sample of ``pack`` run alone through transformers' own
    path: the processor's output (``attention_mask`` all ones, audio features, pixels); the model
    computes its positions (``get_rope_index``)."""
    key = pack["__key__"]
    if key not in cache:
        out = []
        for s in json.loads(pack["json"])["samples"]:
            ref = _reference(proc, pack, s)
            kw = {k: ref[k] for k in ("input_ids", "attention_mask", "input_features", "feature_attention_mask",
                                      "pixel_values", "image_grid_thw") if k in ref}
            out.append((ref["input_ids"][0], last_hidden(model, **kw)))
        cache[key] = out
    return cache[key]


@pytest.fixture(scope="module")
def alone_cache():
    return {}


CASES = [("sdpa", True, 3), ("eager", True, 3), ("sdpa", False, 4)]  # (attn, dense block mask, position layout)


@pytest.mark.parametrize("attn,dense,layout", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d, _ in CASES])
def test_packed_equals_alone(thinker_pack, thinker_enc, thinkers, proc, alone_cache, omni_dir,  # noqa: F811
                             attn, dense, layout):
    collator = PackCollator(omni_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense)
    batch = collator.collate([thinker_enc])
    assert batch["num_samples"] == 3 and len(batch["feature_attention_mask"]) == 3
    assert batch["position_ids"].shape == (layout, 1, batch["input_ids"].shape[1])
    model = thinkers[attn]
    h = last_hidden(model, **model_inputs(batch, attn))
    alone = _alone(alone_cache, proc, thinkers["sdpa"], thinker_pack)
    for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
        ids, ref = alone[s]
        assert torch.equal(batch["input_ids"][0, a:z], ids)
        diff = logit_diff(model, h[a:z], ref, atol=ATOL)
        assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_controls_differ(thinker_pack, thinker_enc, thinkers, proc, alone_cache, omni_dir):  # noqa: F811
    """A plain causal mask: the first sample stays exact, the second differs. 1-D positions
    restarting per sample (``mrope=False``): the samples holding an image differ (audio and text
    take text positions in the thinker's rule, so only images tell)."""
    model = thinkers["sdpa"]
    alone = _alone(alone_cache, proc, model, thinker_pack)
    batch = PackCollator(omni_dir, attn_implementation="sdpa").collate([thinker_enc])
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0][1], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1][1]) > 1e-3
    flat = PackCollator(omni_dir, mrope=False, attn_implementation="sdpa", dense_mask=True).collate([thinker_enc])
    h = last_hidden(model, **model_inputs(flat, "sdpa"))
    images = flat["images_per_sample"].tolist()
    assert images == [1, 0, 1]
    for s, (a, z) in enumerate(zip(cu[:-1], cu[1:])):
        if images[s]:
            assert logit_diff(model, h[a:z], alone[s][1]) > 1e-3, flat["sample_ids"][s]
