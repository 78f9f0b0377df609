"""InternVL and LLaVA-OneVision video samples train like they count: pack -> Energon -> collator -> tiny models.

Data: real videos of the video corpus (``tools/demo_data/video_corpus.py``: the demo set's
carphone clip, h264 mkv, VFR webm/vp8, avi/mpeg4), real small images and real text samples of
the demo set, in one JSONL: 4 video samples, 3 samples that mix images and videos (either order,
two videos), 2 image samples, 2 text samples. Model directories: the offline InternVL3-1B-hf and
LLaVA-OneVision directories of ``tools/demo_data`` plus a ``video_preprocessor_config.json`` that
samples 4 frames a video (``do_sample_frames`` + ``num_frames``; InternVL's also sets its
448 x 448 tile and ImageNet mean / std, as its image processor has them; without ``size``,
``InternVLVideoProcessor``'s class default 384 x 384 would not fit the 448 px tower, which
:func:`vlmpack.models.frames_pixels.frame_pixel_settings` refuses).

1. Both families: every sample packed, the packs load through Energon's own loader and collate;
   each sample's collated length == its recorded ``num_tokens``, its ``input_ids`` == the family's
   ``expand_videos`` (media tokens from the written bytes' headers) == the processor's own text
   replacement tokenized (``get_text_with_replacements`` with ``replace_image_token`` /
   ``replace_video_token``, :func:`test_video_families._reference_ids`).
2. Pixels: transformers' video processors run on the PyAV frames of the corpus files with only
   their torchvision calls replaced (``TorchvisionBackend.resize`` by vlmpack's
   :func:`~vlmpack.models.qwen_video.resize_frames`, ``normalize`` by ``tvF.normalize``'s two
   lines; ``do_convert_rgb=False``, a no-op on RGB frames): ``LlavaOnevisionVideoProcessor`` itself
   and ``InternVLVideoProcessor`` from its installed source with its module-level torchvision
   import removed (its own ``sample_frames`` and ``_preprocess``). The family's
   ``process_videos`` == their ``pixel_values_videos``, bit for bit, so frames and pixels match.
3. packed == alone: tiny random ``InternVLForConditionalGeneration`` and
   ``LlavaOnevisionForConditionalGeneration`` give on the packed row (sdpa and eager block masks;
   the mask-free position-ids path) per-token logits within 1e-4 of each sample run alone through
   transformers' own path: the processor's ids (1.), the image processor's own pixels for its
   images, no positions, no mask. The processors cannot run their video processors here
   (torchvision), so the alone videos' pixels are the family's ``process_videos`` of that sample's
   video bytes (== transformers' pipeline by 2.), placed as the processors place them (InternVL:
   frames among the image tiles in the text's media order, ``InternVLProcessor.__call__``;
   LLaVA-OneVision: ``pixel_values_videos`` ``[videos, F, 3, 384, 384]``). A plain causal mask
   over the pack (negative control) differs by > 1e-3.
4. A LLaVA-OneVision batch whose videos keep different frame counts is refused with a one-line
   ``ConfigError`` (the model takes one ``[B, F, ...]`` tensor).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("av")

from conftest import last_hidden, logit_diff, with_video_config  # noqa: E402
from test_models_internvl import _processor as internvl_processor  # noqa: E402
from test_models_internvl import tiny_internvl  # noqa: E402
from test_models_llava_onevision import _processor as llava_processor  # noqa: E402
from test_models_llava_onevision import tiny_llava_onevision  # noqa: E402
from test_video_families import _reference_ids  # noqa: E402

from vlmpack.config import load_config  # noqa: E402
from vlmpack.energon.load import iter_energon_packs  # noqa: E402
from vlmpack.errors import ConfigError  # noqa: E402
from vlmpack.media.video import probe_video  # noqa: E402
from vlmpack.models import load_model  # noqa: E402
from vlmpack.models.base import MediaSize  # noqa: E402
from vlmpack.pack.pipeline import run_pack  # noqa: E402
from vlmpack.train import PackCollator, model_inputs  # noqa: E402
from vlmpack.train.testing import plain_causal_inputs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ATOL = 1e-4
SEQ_LEN = 4096
VIDEOS = ["demo_carphone_distorted.mp4", "h264_long.mkv", "vp8_vfr.webm", "mpeg4.avi"]
FAMILIES = ("internvl", "llava_onevision")
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


# ----------------------------------------------------------------------------- data and model dirs
@pytest.fixture(scope="module")
def corpus(video_corpus) -> dict[str, Path]:
    return {f.name: f for f in video_corpus}


@pytest.fixture(scope="module")
def dirs(internvl_dir, llava_ov_dir, tmp_path_factory) -> dict[str, Path]:
    ivl = with_video_config(internvl_dir, tmp_path_factory.mktemp("ivl4"), {
        "do_sample_frames": True, "num_frames": 4, "size": {"height": 448, "width": 448}, "resample": 3,
        "image_mean": IMAGENET[0], "image_std": IMAGENET[1], "video_processor_type": "InternVLVideoProcessor"})
    lov = with_video_config(llava_ov_dir, tmp_path_factory.mktemp("lov4"), {
        "do_sample_frames": True, "num_frames": 4, "video_processor_type": "LlavaOnevisionVideoProcessor"})
    lov_fps = with_video_config(llava_ov_dir, tmp_path_factory.mktemp("lovfps"), {
        "do_sample_frames": True, "fps": 1, "video_processor_type": "LlavaOnevisionVideoProcessor"})
    return {"internvl": ivl, "llava_onevision": lov, "llava_fps1": lov_fps}


@pytest.fixture(scope="module")
def families(dirs) -> dict:
    return {n: load_model(str(dirs[n])) for n in FAMILIES}


@pytest.fixture(scope="module")
def processors(dirs) -> dict:
    return {"internvl": internvl_processor(dirs["internvl"]),
            "llava_onevision": llava_processor(dirs["llava_onevision"])}


def _conv(prompt: str, answer: str) -> list[dict]:
    return [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]


@pytest.fixture(scope="module")
def jsonl(real_data, corpus, tmp_path_factory) -> Path:
    """Small square images (one InternVL tile, one LLaVA-OneVision crop: few tokens)."""
    from PIL import Image

    lines = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()]
    small = [r for r in lines if len(r.get("images") or []) == 1 and
             (lambda s: s[0] * s[1] <= 160 * 160 and 0.9 <= s[0] / s[1] <= 1.1)(
                 Image.open(real_data / r["images"][0]).size)][:3]
    text = [r for r in lines if not r.get("images")][:2]
    assert len(small) == 3 and len(text) == 2
    v = {n: str(corpus[n]) for n in VIDEOS}
    img = [str(real_data / r["images"][0]) for r in small]
    out = [{"id": f"vid-{i}", "videos": [v[n]], "conversations": _conv("<video>\nWhat happens in this clip?",
                                                                         f"A short clip ({n}).")}
           for i, n in enumerate(VIDEOS[:3])]
    out.append({"id": "mix-vi", "images": [img[0]], "videos": [v[VIDEOS[2]]],
                "conversations": _conv("<video>\nWatch: <image> Which came first?", "The clip.")})
    out.append({"id": "mix-ivv", "images": [img[1]], "videos": [v[VIDEOS[1]], v[VIDEOS[3]]],
                "conversations": _conv("One picture <image>, then two clips (<video>, <video>).", "Three items.")})
    out.append({**small[2], "images": [img[2]]})
    out += text
    path = tmp_path_factory.mktemp("videojsonl") / "videos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


N_SAMPLES = 3 + 2 + 1 + 2


@pytest.fixture(scope="module")
def outputs(jsonl, dirs, real_data, tmp_path_factory) -> dict[str, Path]:
    res = {}
    for name in FAMILIES:
        out = tmp_path_factory.mktemp(name) / "packs"
        run_pack(load_config(input=[str(jsonl)], media_root=str(real_data), model=str(dirs[name]), output=str(out),
                             seq_len=SEQ_LEN, workers=1, progress=False, allow_absolute_media=True))
        res[name] = out
    return res


@pytest.fixture(scope="module")
def packs(outputs) -> dict[str, list]:
    return {name: list(iter_energon_packs(out, num_workers=0)) for name, out in outputs.items()}


# ----------------------------------------------------------------------------- one sample, transformers' way
def _media_in_order(sample: dict) -> list[dict]:
    return [p for m in sample["messages"] for p in m["content"] if p.get("type") in ("image", "video")]


def _alone_inputs(name: str, fam, proc, pack, sample: dict, cache: dict) -> tuple[torch.Tensor, dict]:
    """``(input_ids int64 [T], forward kwargs)`` of one sample alone (module docstring, 3.): ids by
    the processor's text replacement, images by its image processor, videos by the family's
    ``process_videos`` of the sample's own video bytes, arranged as the processor arranges them."""
    from PIL import Image
    from transformers.image_utils import load_image

    key = (name, sample["id"])
    if key in cache:
        return cache[key]
    raw = dict(zip(pack.media_parts, pack.media))
    parts = _media_in_order(sample)
    frames = [fam.process_videos([raw[p["part"]]]).pixel_values for p in parts if p["type"] == "video"]
    images = [load_image(Image.open(io.BytesIO(raw[p["part"]]))) for p in parts if p["type"] == "image"]
    ids = _reference_ids("internvl" if name == "internvl" else "llava", proc, fam, sample["messages"], frames, images)
    kw: dict = {}
    if name == "internvl":
        tiles = []
        if images:
            out = proc.image_processor(images=images, crop_to_patches=True, return_tensors="pt")
            tiles = list(torch.split(out["pixel_values"], [int(n) for n in out["num_patches"]]))
        order = [m.lastgroup for m in re.finditer(proc.multimodal_pattern, fam.render(sample["messages"]))]
        vi, ii = iter(frames), iter(tiles)  # InternVLProcessor.__call__: media in text order
        if order:
            kw["pixel_values"] = torch.cat([next(ii) if k == "image" else next(vi) for k in order])
    else:
        if images:
            out = proc.image_processor(images=[images], return_tensors="pt")
            kw.update(pixel_values=out["pixel_values"], image_sizes=out["image_sizes"],
                      batch_num_images=out["batch_num_images"])
        if frames:
            kw["pixel_values_videos"] = torch.stack(frames)
    cache[key] = (torch.tensor(ids, dtype=torch.int64), kw)
    return cache[key]


def _alone_hidden(name: str, fam, proc, model, pack, sample: dict, cache: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, last hidden states [T, H])`` of one sample alone through ``model`` (the sdpa
    tiny model; cached: the hidden states are small, the logits are taken chunk by chunk)."""
    key = ("hidden", name, sample["id"])
    if key not in cache:
        ids, kw = _alone_inputs(name, fam, proc, pack, sample, cache)
        cache[key] = (ids, last_hidden(model, input_ids=ids[None], **kw))
    return cache[key]


@pytest.fixture(scope="module")
def alone_cache() -> dict:
    return {}


# ----------------------------------------------------------------------------- 1. counts through Energon
@pytest.mark.parametrize("name", FAMILIES)
def test_video_packs_load_through_energon_and_collate_to_recorded_counts(packs, outputs, dirs, families,
                                                                        processors, alone_cache, name):
    fam = families[name]
    report = json.loads((outputs[name] / "report.json").read_text())
    assert report["samples_by_kind"] == {"text": 2, "image": 1, "video": 5, "audio": 0}, report["samples_by_kind"]
    assert report["samples_packed"] == N_SAMPLES and report["rejected"] == 0, report
    collator = PackCollator(dirs[name], attn_implementation="sdpa")
    seen, tokens = set(), 0
    for pack in packs[name]:
        raw = dict(zip(pack.media_parts, pack.media))
        batch = collator(pack)  # PackMismatchError on any count / feature mismatch
        cu = batch["cu_seqlens"].tolist()
        n_frames = 0
        for s, a, z in zip(pack.samples, cu[:-1], cu[1:]):
            assert z - a == s["num_tokens"], (name, s["id"])
            ids = batch["input_ids"][0, a:z]
            parts = _media_in_order(s)
            rec = {m["part"]: m["num_tokens"] for m in s["media"]}
            counted, layouts = [], []
            for p in parts:
                if p["type"] == "video":
                    h = probe_video(raw[p["part"]], p["part"])
                    media = MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)
                    counted.append(fam.media_tokens(media))
                    layouts.append(fam.video_layout(media))
                    assert counted[-1] == rec[p["part"]], (name, s["id"])
                    n_frames += 4
                else:
                    counted.append(rec[p["part"]])
            unexpanded = np.asarray(fam.token_ids([s["messages"]], [None])[0])
            kinds = [p["type"] for p in parts]
            want = fam.expand_videos(unexpanded, counted, layouts, kinds=kinds) if layouts \
                else fam.expand(unexpanded, counted)
            assert ids.tolist() == want.tolist(), (name, s["id"])
            ref, _ = _alone_inputs(name, fam, processors[name], pack, s, alone_cache)
            assert torch.equal(ids, ref), (name, s["id"])
            seen.add(s["id"])
            tokens += z - a
        if name == "internvl":  # frames are pixel_values tiles: images' tiles + 4 per video
            tiles = int((batch["input_ids"] == fam.image_token_id).sum()) // fam.image_seq_length
            assert len(batch.get("pixel_values", ())) == tiles and "video_input_keys" not in batch
        elif n_frames:
            assert batch["video_input_keys"] == ("pixel_values_videos",)
            assert tuple(batch["pixel_values_videos"].shape) == (n_frames // 4, 4, 3, 384, 384)
    assert len(seen) == N_SAMPLES, sorted(seen)
    print(f"{name}: {len(seen)} samples, {tokens} tokens, {len(packs[name])} packs")


# ----------------------------------------------------------------------------- 2. pixels
def _internvl_video_processor_class():
    """``InternVLVideoProcessor`` from the installed source, its module-level torchvision import
    replaced by ``tvF = None`` (only annotations name it); its own ``sample_frames`` and ``_preprocess``."""
    path = Path(importlib.util.find_spec("transformers.models.internvl").submodule_search_locations[0])
    text = (path / "video_processing_internvl.py").read_text()
    line = "import torchvision.transforms.v2.functional as tvF\n"
    assert text.count(line) == 1 and text.count("tvF.") == 1  # the one use: a string annotation
    mod = types.ModuleType("transformers.models.internvl._video_processing_internvl_no_torchvision")
    mod.__package__, mod.__file__ = "transformers.models.internvl", str(path / "video_processing_internvl.py")
    sys.modules[mod.__name__] = mod  # transformers' auto_docstring reads the class's module file
    exec(compile(text.replace(line, "tvF = None\n"), str(path), "exec"), mod.__dict__)  # noqa: S102
    return mod.InternVLVideoProcessor


def test_frames_and_pixels_equal_transformers_video_processors(corpus, dirs, families, monkeypatch):
    from transformers.image_processing_backends import TorchvisionBackend
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor
    from transformers.video_utils import VideoMetadata

    from vlmpack.media.frames import decode_frames
    from vlmpack.models.qwen_video import resize_frames

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
    vps = {"internvl": _internvl_video_processor_class().from_pretrained(str(dirs["internvl"])),
           "llava_onevision": LlavaOnevisionVideoProcessor.from_pretrained(str(dirs["llava_onevision"]))}
    assert vps["internvl"].initial_shift is True and list(vps["internvl"].image_mean) == IMAGENET[0]
    compared = 0
    for fname, path in sorted(corpus.items()):
        h = probe_video(str(path), fname)
        if h.frames < 4 or h.width * h.height > 700 * 300:
            continue
        frames = decode_frames(str(path), list(range(h.frames)))
        meta = VideoMetadata(total_num_frames=h.frames, fps=h.fps)
        for name in FAMILIES:
            want = vps[name](videos=[frames], video_metadata=[meta], do_sample_frames=True, do_convert_rgb=False,
                             return_tensors="pt")["pixel_values_videos"][0]
            got = families[name].process_videos([str(path)])
            assert got.grids.tolist() == [[4, 1, 1]] and got.pixel_values.dtype == torch.float32, (name, fname)
            assert torch.equal(got.pixel_values, want), (name, fname)
            compared += 1
    assert compared >= 2 * 15, compared


# ----------------------------------------------------------------------------- 3. packed == alone
@pytest.fixture(scope="module")
def tiny(dirs) -> dict:
    out = {}
    for attn in ("sdpa", "eager"):
        out[("internvl", attn)] = tiny_internvl(dirs["internvl"], attn_implementation=attn)
        out[("llava_onevision", attn)] = tiny_llava_onevision(dirs["llava_onevision"], attn_implementation=attn)
    return out


def _video_packs(packs, name) -> list:
    """Packs with >= 2 samples, at least one with a video, the shortest first."""
    sel = [p for p in packs[name] if len(p.samples) >= 2 and any(m["kind"] == "video" for s in p.samples
                                                                   for m in s["media"])]
    assert len(sel) >= 2, name
    return sorted(sel, key=lambda p: sum(s["num_tokens"] for s in p.samples))


CASES = [(n, a, d) for n in FAMILIES for a, d in (("sdpa", True), ("eager", True), ("sdpa", False))]


@pytest.mark.parametrize("name,attn,dense", CASES, ids=[f"{n}-{a}-{'mask' if d else 'posids'}" for n, a, d in CASES])
def test_packed_equals_alone_with_videos(packs, dirs, families, processors, tiny, alone_cache, name, attn, dense):
    fam, model = families[name], tiny[(name, attn)]
    collator = PackCollator(dirs[name], attn_implementation=attn, dense_mask=dense)
    worst, n_samples, n_tokens = 0.0, 0, 0
    sel = _video_packs(packs, name)
    for pack in sel if (attn, dense) == ("sdpa", True) else sel[:1]:  # the other paths: the shortest (time)
        batch = collator(pack)
        assert batch["position_ids"].shape == batch["input_ids"].shape  # 1-D positions
        h = last_hidden(model, **model_inputs(batch, attn))
        cu = batch["cu_seqlens"].tolist()
        for s, a, z in zip(pack.samples, cu[:-1], cu[1:]):
            ids, ref = _alone_hidden(name, fam, processors[name], tiny[(name, "sdpa")], pack, s, alone_cache)
            assert torch.equal(batch["input_ids"][0, a:z], ids)
            diff = logit_diff(model, h[a:z], ref, atol=ATOL)
            worst, n_samples, n_tokens = max(worst, diff), n_samples + 1, n_tokens + z - a
            assert diff < ATOL, f"{name} {s['id']}: packed logits differ by {diff:.3g}"
    print(f"{name} {attn} {'mask' if dense else 'posids'}: {n_samples} samples, {n_tokens} tokens, "
          f"max |packed - alone| <= {worst:.2e}")


@pytest.mark.parametrize("name", FAMILIES)
def test_negative_control_plain_causal_mask_differs(packs, dirs, families, processors, tiny, alone_cache, name):
    """Per-sample positions but a plain causal mask over the pack: the first sample stays exact,
    a later one attends to the samples before it and differs, so the comparison can fail."""
    fam, model = families[name], tiny[(name, "sdpa")]
    pack = _video_packs(packs, name)[0]
    batch = PackCollator(dirs[name], attn_implementation="sdpa")(pack)
    kw = plain_causal_inputs(batch, "sdpa")
    h = last_hidden(model, **kw)
    cu = batch["cu_seqlens"].tolist()
    refs = [_alone_hidden(name, fam, processors[name], model, pack, s, alone_cache)[1] for s in pack.samples[:2]]
    assert logit_diff(model, h[:cu[1]], refs[0], atol=ATOL) < ATOL
    assert logit_diff(model, h[cu[1]:cu[2]], refs[1]) > 1e-3


# ----------------------------------------------------------------------------- 4. LLaVA-OneVision frame counts
def test_llava_batch_with_different_frame_counts_is_refused(corpus, dirs):
    """fps sampling keeps a different number of frames per video: one ``pixel_values_videos``
    tensor cannot hold them, so the batch is refused (one line); equal counts stack."""
    fam = load_model(str(dirs["llava_fps1"]))
    a, b = (fam.process_videos([str(corpus[n])]) for n in ("h264_long.mkv", "vp8_vfr.webm"))
    assert a.grids[0, 0] != b.grids[0, 0]
    with pytest.raises(ConfigError) as e:
        fam.batch_video_inputs([a, b])
    assert "\n" not in str(e.value) and "num_frames" in str(e.value)
    assert fam.batch_video_inputs([a, a])["pixel_values_videos"].shape[:2] == (2, a.grids[0, 0])
