"""Qwen2.5-Omni videos on the training side: the collator's video inputs and per-sample mRoPE, and
a tiny thinker that trains a packed row as its samples alone; without ``use_audio_in_video`` (tests
1-2) and with it (tests 3-5: videos with their sound tracks).

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

With ``use_audio_in_video`` (:data:`SOUND`; a second pack: ``speech_h264_flac.mkv`` alone, a sample
with ``speech_h264_aac.mp4`` *before* an audio part ``word.mp3``, a demo text sample):

3. ``PackCollator`` gives the ids of ``Qwen2_5OmniProcessor(..., use_audio_in_video=True,
   audio_from_video_indices=...)`` (child ``omni_sound_child.py``: every frame, each track and audio
   part decoded at 16 kHz by ``decode_audio``, log-mel computed for real), its ``input_features``
   (equal values) and ``feature_attention_mask`` (the track of the mixed sample's video first, then
   its audio part: the processor's slot order), ``audios_per_sample``, video grids, and positions ==
   the thinker's ``get_rope_index(ids, ..., use_audio_in_video=True, audio_seqlens=mask.sum(-1),
   second_per_grids)`` per sample; a sound track is cut into several ``<|AUDIO|>`` runs (the 2 s
   interleaving is exercised). A recorded video count one off (video + track): ``PackMismatchError``.
4. The tiny thinker: packed == alone (< 1e-4; sdpa and eager block masks, ``[4, 1, T]`` positions),
   alone = transformers' own path with the processor's ids, features, mask, grids and
   ``use_audio_in_video=True`` (pixels: the collator's rows, as in 2).
5. Negative control: a plain causal mask differs on the second sample.
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
from conftest import cache_lock, last_hidden, logit_diff
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
    return _one_pack(tmp_path_factory.mktemp("omni_video_train"), [videos[0], image, videos[1], text], omni_dir,
                     16384)


def _one_pack(d: Path, records: list[dict], model: Path, seq_len: int, *options: str) -> dict:
    """``records`` packed by ``vlmpack pack`` for ``model`` (one worker, ``options`` added) into ``d``: the output's
    one pack, which must hold every record."""
    from vlmpack.packfmt import read_packs

    (d / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    r = run_cli(["pack", "-i", d / "in.jsonl", "--model", model, "-o", d / "out", "--seq-len", str(seq_len),
                 "--allow-absolute-media", "-j", "1", "--no-progress", *options])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (pack,) = list(read_packs(d / "out"))
    assert len(json.loads(pack["json"])["samples"]) == len(records)
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
    assert vrow == len(batch["pixel_values_videos"]) and irow == len(batch.get("pixel_values", ()))
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
    h = last_hidden(model, **model_inputs(batch, attn))
    cu = batch["cu_seqlens"].tolist()
    for s, kw in enumerate(_alone_inputs(batch, reference)):
        diff = logit_diff(model, h[cu[s]:cu[s + 1]], last_hidden(thinkers["sdpa"], **kw), atol=ATOL)
        assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_negative_control_plain_causal_mask_differs(enc, reference, thinkers, omni_dir):  # noqa: F811
    model = thinkers["sdpa"]
    batch = PackCollator(omni_dir, attn_implementation="sdpa").collate([enc])
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    alone = _alone_inputs(batch, reference)
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], last_hidden(model, **alone[0]), atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], last_hidden(model, **alone[1])) > 1e-3


# ------------------------------------------------------------------ videos with their sound (use_audio_in_video)
#: the processor option of the packs with sound tracks (``--processor-kwargs '{"use_audio_in_video": true}'``)
SOUND = {"kwargs": {"use_audio_in_video": True}}


@pytest.fixture(scope="module")
def sound_pack(real_data, omni_dir, tmp_path_factory) -> dict:  # noqa: F811
    """One pack (``vlmpack pack --processor-kwargs '{"use_audio_in_video": true}'``): a video with
    sound (``speech_h264_flac.mkv``), a sample holding a video with sound (``speech_h264_aac.mp4``)
    *before* an audio part (``word.mp3``: its track is the first audio slot) and a demo text sample."""
    from demo_data.audio_corpus import build_audio_corpus


    with cache_lock():
        corpus = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
    demo = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:40]]
    text = next(r for r in demo if not r.get("images") and not r.get("videos"))
    answer = {"role": "assistant", "content": "Someone talks."}
    records = [
        {"id": "flac", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Listen and watch:"},
            {"type": "video", "path": str(corpus["speech_h264_flac.mkv"])}]},
            answer]},
        {"id": "mixed", "messages": [{"role": "user", "content": [
            {"type": "video", "path": str(corpus["speech_h264_aac.mp4"])}, {"type": "text", "text": "Is it said as in"},
            {"type": "audio", "path": str(corpus["word.mp3"])}]}, answer]},
        text]
    return _one_pack(tmp_path_factory.mktemp("omni_sound_train"), records, omni_dir, 32768,
                     "--processor-kwargs", json.dumps(SOUND["kwargs"]))


@pytest.fixture(scope="module")
def sound_reference(sound_pack, omni_dir, tmp_path_factory) -> list[dict]:  # noqa: F811
    """Per sample, in pack order: ``Qwen2_5OmniProcessor`` with ``use_audio_in_video=True`` on the
    sample alone (``omni_sound_child.py``: ids, grids, real log-mel features and their mask)."""
    from vlmpack.models import load_model

    fam = load_model(str(omni_dir), json.dumps(SOUND))
    d = tmp_path_factory.mktemp("omni_sound_ref")
    cases = []
    for s in json.loads(sound_pack["json"])["samples"]:
        parts = []
        for m in s["media"]:
            path = d / f"{s['id']}_{m['part']}"
            path.write_bytes(sound_pack[m["part"]])
            parts.append([m["kind"], str(path)])
        cases.append({"text": _text(fam.tokenizer, s), "parts": parts})
    (d / "spec.json").write_text(json.dumps({"model_dir": str(omni_dir), "cases": cases}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "kimi_standin"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KIMI_STANDIN_PIXELS", None)
    r = subprocess.run([sys.executable, str(HERE / "omni_sound_child.py"), str(d / "spec.json"), str(d / "ref.npz")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = np.load(d / "ref.npz", allow_pickle=False)
    keys = ("ids", "grid", "sec", "igrid", "feats", "fmask")
    return [{k: torch.from_numpy(np.asarray(ref[f"{k}{i}"])) for k in keys if f"{k}{i}" in ref}
            for i in range(len(cases))]


@pytest.fixture(scope="module")
def sound_enc(sound_pack, omni_dir):  # noqa: F811
    return PackCollator(omni_dir, attn_implementation="sdpa", processor=SOUND).encode(sound_pack)


def _sound_alone_inputs(batch: dict, reference: list[dict]) -> list[dict]:
    """Each sample's inputs for transformers' own path: the processor's ids, grids, log-mel
    features and mask (``use_audio_in_video=True``), the collator's pixel rows of its videos."""
    out = _alone_inputs(batch, reference)
    for kw, ref in zip(out, reference):
        kw["use_audio_in_video"] = True
        if "feats" in ref:
            kw.update(input_features=ref["feats"], feature_attention_mask=ref["fmask"])
    return out


@pytest.fixture(scope="module")
def sound_alone(sound_enc, sound_reference, thinkers, omni_dir) -> list[torch.Tensor]:  # noqa: F811
    """The tiny sdpa thinker's last hidden states of each sample run alone (transformers' own path)."""
    batch = PackCollator(omni_dir, attn_implementation="sdpa", processor=SOUND).collate([sound_enc])
    return [last_hidden(thinkers["sdpa"], **kw) for kw in _sound_alone_inputs(batch, sound_reference)]


def test_collator_sound_inputs_equal_the_omni_processor(sound_enc, sound_reference, thinkers, omni_dir):  # noqa: F811
    """ids, log-mel ``input_features`` (values), ``feature_attention_mask``, grids and per-sample
    positions of a pack of videos with their sound == ``Qwen2_5OmniProcessor(use_audio_in_video=True)``
    + the thinker's ``get_rope_index(..., use_audio_in_video=True, audio_seqlens=mask.sum(-1))``."""
    from vlmpack.models import load_model

    fam = load_model(str(omni_dir), json.dumps(SOUND))
    batch = PackCollator(omni_dir, attn_implementation="sdpa", processor=SOUND).collate([sound_enc])
    ref = sound_reference
    assert sorted(batch["sample_ids"]) == sorted(["flac", "mixed", *batch["sample_ids"][2:]])
    assert batch["audio_input_keys"] == ("input_features", "feature_attention_mask")
    assert batch["audios_per_sample"].tolist() == [len(r.get("fmask", ())) for r in ref]
    assert sorted(batch["audios_per_sample"].tolist()) == [0, 1, 2]  # the mixed sample: its track + its audio part
    assert batch["input_features"].dtype == torch.float32
    assert torch.equal(batch["input_features"], torch.cat([r["feats"] for r in ref if "feats" in r]))
    fmask = torch.cat([r["fmask"] for r in ref if "fmask" in r])
    assert torch.equal(batch["feature_attention_mask"].long(), fmask.long())
    assert torch.equal(batch["video_grid_thw"], torch.cat([r["grid"] for r in ref if "grid" in r]))
    assert torch.equal(batch["video_second_per_grid"], torch.cat([r["sec"] for r in ref if "sec" in r]).float())
    cu = batch["cu_seqlens"].tolist()
    thinker = thinkers["sdpa"].model
    interleaved = 0
    for s, r in enumerate(ref):
        a, z = cu[s], cu[s + 1]
        sid = batch["sample_ids"][s]
        assert torch.equal(batch["input_ids"][0, a:z], r["ids"]), sid
        seqlens = r["fmask"].sum(-1) if "fmask" in r else None
        pos, _ = thinker.get_rope_index(r["ids"][None], r.get("igrid"), r.get("grid"), torch.ones_like(r["ids"])[None],
                                        True, seqlens, r.get("sec"))
        assert torch.equal(batch["position_ids"][:, 0, a:z], pos[:, 0]), sid
        audio = (r["ids"] == fam.audio_token_id).numpy()
        interleaved += int(np.count_nonzero(np.diff(audio.astype(np.int8)) == 1)) > len(r.get("fmask", ()))
    assert interleaved, "no sound track is cut into several runs: the interleaving is not exercised"
    assert fam.audio_start_token_id in ref[[i for i, s in enumerate(batch["sample_ids"]) if s == "mixed"][0]]["ids"]


def test_sound_track_count_mismatch_is_a_pack_mismatch(sound_pack, omni_dir):  # noqa: F811
    """A video whose recorded count (video + sound track) differs from what its bytes give:
    :class:`PackMismatchError` naming the part."""
    from vlmpack.errors import PackMismatchError

    meta = json.loads(sound_pack["json"])
    s = next(x for x in meta["samples"] if x["id"] == "flac")
    (m,) = s["media"]
    s = {**s, "num_tokens": s["num_tokens"] - 1, "media": [{**m, "num_tokens": m["num_tokens"] - 1}]}
    raw = {"__key__": "tampered", "json": json.dumps({**meta, "samples": [s], "num_tokens": s["num_tokens"]}),
           m["part"]: sound_pack[m["part"]]}
    with pytest.raises(PackMismatchError, match=f"video {m['part']} gives {m['num_tokens']} tokens but the pack"):
        PackCollator(omni_dir, attn_implementation="sdpa", processor=SOUND).encode(raw)


@pytest.mark.parametrize("attn,dense,layout", CASES, ids=[f"{a}-{'mask' if d else 'posids'}" for a, d, _ in CASES])
def test_sound_packed_equals_alone(sound_enc, sound_alone, thinkers, omni_dir, attn, dense, layout):  # noqa: F811
    batch = PackCollator(omni_dir, position_layout=layout, attn_implementation=attn, dense_mask=dense,
                         processor=SOUND).collate([sound_enc])
    model = thinkers[attn]
    h = last_hidden(model, **model_inputs(batch, attn))
    cu = batch["cu_seqlens"].tolist()
    for s, alone in enumerate(sound_alone):
        diff = logit_diff(model, h[cu[s]:cu[s + 1]], alone, atol=ATOL)
        assert diff < ATOL, f"{batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"


def test_sound_negative_control_plain_causal_mask_differs(sound_enc, sound_alone, thinkers, omni_dir):  # noqa: F811
    model = thinkers["sdpa"]
    batch = PackCollator(omni_dir, attn_implementation="sdpa", processor=SOUND).collate([sound_enc])
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], sound_alone[0], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], sound_alone[1]) > 1e-3
