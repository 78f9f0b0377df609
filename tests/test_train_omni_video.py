"""Qwen2.5-Omni videos on the training side, without ``use_audio_in_video`` (with it the collator
refuses: ``test_omni_video.py``): the collator's video inputs and per-sample mRoPE, and a tiny
thinker that trains a packed row as its samples alone.

Pack: two video samples (``speech_h264_flac.mkv``, 20 frames 160x96, and ``no_audio.mp4``, 12
frames; every frame kept, the Omni processor's size), a demo image sample and a demo text sample,
one pack (``vlmpack pack``, the offline Omni directory of ``test_models_qwen2_5_omni.py``).

1. ``PackCollator`` gives, per sample, the ``input_ids`` of ``Qwen2_5OmniProcessor.__call__`` (run in
   the child of ``test_omni_video.py`` with the torchvision stand-in: every frame of the packed video,
   the packed image decoded), its ``video_grid_thw`` and ``video_second_per_grid`` (1.0: 2 / the
   processor's fps 2), and per-sample positions equal to the thinker's own ``get_rope_index`` on the
   processor's output for the sample alone.
2. The tiny random thinker of ``test_train_omni_audio.py`` (vision tower of 2 layers at the real
   patch 14, merge 2, temporal patch 2) gives the same logits (max |diff| < 1e-4) on the packed row
   (sdpa and eager block masks; the mask-free ``[4, 1, T]`` positions) as on each sample alone
   through transformers' own path: the processor's ``input_ids``, ``video_grid_thw``,
   ``video_second_per_grid`` and ``image_grid_thw``, the model computing its positions. The pixels of
   the alone run are the collator's rows of that sample (``Qwen2VLVideoProcessor``'s pixels need
   torchvision; vlmpack's restatement is the Qwen2.5-VL one of ``models/qwen_video.py``, whose pixels
   ``test_train_video.py`` checks): the test proves ids, grids, positions and masks, not the pixel
   values. Negative control: a plain causal mask differs on the second sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_dir import CACHE
from cli_runner import run_cli
from conftest import cache_lock, logit_diff
from test_models_qwen2_5_omni import omni_dir  # noqa: F401 - module fixture used here
from test_omni_video import _text
from test_train_omni_audio import tiny_thinker

from vlmpack.train import PackCollator, model_inputs
from vlmpack.train.testing import plain_causal_inputs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
HERE = Path(__file__).parent
ATOL = 1e-4


@pytest.fixture(scope="module")
def video_pack(real_data, omni_dir, tmp_path_factory) -> dict:  # noqa: F811
    from demo_data.audio_corpus import build_audio_corpus, build_broken_audio

    from vlmpack.packfmt import read_packs

    with cache_lock():
        corpus = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
        broken = build_broken_audio(CACHE / "audio_corpus", CACHE / "audio_broken", real_data)
    demo = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:40]]
    image = next(r for r in demo if len(r.get("images") or []) == 1)
    image["images"] = [str(real_data / image["images"][0])]
    text = next(r for r in demo if not r.get("images") and not r.get("videos"))
    videos = [{"id": name, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Watch:"}, {"type": "video", "path": str(path)}]},
        {"role": "assistant", "content": "A picture pans."}]}
        for name, path in (("flac", corpus["speech_h264_flac.mkv"]), ("silent", broken["no_audio.mp4"]))]
    d = tmp_path_factory.mktemp("omni_video_train")
    (d / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [videos[0], image, videos[1], text]))
    r = run_cli(["pack", "-i", d / "in.jsonl", "--model", omni_dir, "-o", d / "out", "--seq-len", "16384",
                 "--allow-absolute-media", "-j", "1", "--no-progress"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (pack,) = list(read_packs(d / "out"))
    assert len(json.loads(pack["json"])["samples"]) == 4
    return pack


@pytest.fixture(scope="module")
def reference(video_pack, omni_dir, tmp_path_factory) -> list[dict]:  # noqa: F811
    """Per sample, in pack order: the processor's outputs (child process of ``omni_video_child.py``)."""
    from vlmpack.models import load_model

    fam = load_model(str(omni_dir))
    d = tmp_path_factory.mktemp("omni_video_ref")
    cases = []
    for s in json.loads(video_pack["json"])["samples"]:
        parts = []
        for m in s["media"]:
            path = d / f"{s['id']}_{m['part']}"
            path.write_bytes(video_pack[m["part"]])
            parts.append([m["kind"], str(path)])
        cases.append({"text": _text(fam.tokenizer, s), "parts": parts, "audio_in_video": False})
    (d / "spec.json").write_text(json.dumps({"model_dir": str(omni_dir), "cases": cases}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "kimi_standin"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KIMI_STANDIN_PIXELS", None)
    r = subprocess.run([sys.executable, str(HERE / "omni_video_child.py"), str(d / "spec.json"), str(d / "ref.npz")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = np.load(d / "ref.npz", allow_pickle=False)
    return [{k: torch.from_numpy(np.asarray(ref[f"{k}{i}"])) for k in ("ids", "grid", "sec", "igrid")
             if f"{k}{i}" in ref} for i in range(len(cases))]


@pytest.fixture(scope="module")
def thinkers(omni_dir):  # noqa: F811
    return {impl: tiny_thinker(omni_dir, attn_implementation=impl) for impl in ("sdpa", "eager")}


@pytest.fixture(scope="module")
def enc(video_pack, omni_dir):  # noqa: F811
    return PackCollator(omni_dir, attn_implementation="sdpa").encode(video_pack)


def _hidden(model, **kw) -> torch.Tensor:
    kw.pop("labels", None)
    kw["use_cache"] = False
    with torch.no_grad():
        return model.model(**kw).last_hidden_state[0]


def _alone_inputs(batch: dict, reference: list[dict]) -> list[dict]:
    """Each sample's inputs for transformers' own path: the processor's ids and grids, the collator's
    pixel rows of its media (module docstring)."""
    out, vrow, irow = [], 0, 0
    for ref in reference:
        kw = {"input_ids": ref["ids"][None], "attention_mask": torch.ones_like(ref["ids"])[None]}
        if "grid" in ref:
            n = int(ref["grid"].prod(-1).sum())
            kw.update(pixel_values_videos=batch["pixel_values_videos"][vrow:vrow + n], video_grid_thw=ref["grid"],
                      video_second_per_grid=ref["sec"])
            vrow += n
        if "igrid" in ref:
            n = int(ref["igrid"].prod(-1).sum())
            kw.update(pixel_values=batch["pixel_values"][irow:irow + n], image_grid_thw=ref["igrid"])
            irow += n
        out.append(kw)
    assert vrow == len(batch["pixel_values_videos"]) and irow == len(batch["pixel_values"])
    return out


def test_collator_video_inputs_equal_the_omni_processor(enc, reference, thinkers, omni_dir):  # noqa: F811
    batch = PackCollator(omni_dir, attn_implementation="sdpa").collate([enc])
    assert batch["sample_ids"][0::2] == ["flac", "silent"] and batch["videos_per_sample"].tolist() == [1, 0, 1, 0]
    assert batch["video_input_keys"] == ("pixel_values_videos", "video_grid_thw", "video_second_per_grid")
    assert torch.equal(batch["video_grid_thw"], torch.cat([r["grid"] for r in reference if "grid" in r]))
    assert torch.equal(batch["video_second_per_grid"], torch.cat([r["sec"] for r in reference if "sec" in r]).float())
    assert torch.equal(batch["image_grid_thw"], torch.cat([r["igrid"] for r in reference if "igrid" in r]))
    cu = batch["cu_seqlens"].tolist()
    thinker = thinkers["sdpa"].model
    for s, ref in enumerate(reference):
        a, z = cu[s], cu[s + 1]
        assert torch.equal(batch["input_ids"][0, a:z], ref["ids"]), batch["sample_ids"][s]
        pos, _ = thinker.get_rope_index(ref["ids"][None], ref.get("igrid"), ref.get("grid"),
                                        torch.ones_like(ref["ids"])[None], False, None, ref.get("sec"))
        assert torch.equal(batch["position_ids"][:, 0, a:z], pos[:, 0]), batch["sample_ids"][s]


CASES = [("sdpa", True, 3), ("eager", True, 3), ("sdpa", False, 4)]  # (attn, dense block mask, position layout)


@pytest.mark.parametrize("attn,dense,layout", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d, _ in CASES])
def test_packed_equals_alone(enc, reference, thinkers, omni_dir, attn, dense, layout):  # noqa: F811
    batch = PackCollator(omni_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense).collate([enc])
    model = thinkers[attn]
    h = _hidden(model, **model_inputs(batch, attn))
    cu = batch["cu_seqlens"].tolist()
    for s, kw in enumerate(_alone_inputs(batch, reference)):
        diff = logit_diff(model, h[cu[s]:cu[s + 1]], _hidden(thinkers["sdpa"], **kw))
        assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(enc, reference, thinkers, omni_dir):  # noqa: F811
    model = thinkers["sdpa"]
    batch = PackCollator(omni_dir, attn_implementation="sdpa").collate([enc])
    h = _hidden(model, **plain_causal_inputs(batch, "sdpa"))
    alone = _alone_inputs(batch, reference)
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], _hidden(model, **alone[0])) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], _hidden(model, **alone[1])) > 1e-3
