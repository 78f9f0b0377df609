"""InternVL and LLaVA-OneVision video counts: container header == full decode == transformers' own rule.

Corpus: the 21 files of ``tools/demo_data/video_corpus.py`` (the demo set's 4 real videos and 17
clips encoded from its real images: mp4 / mov / mkv / webm / avi, CFR / VFR / NTSC rates, a
Matroska file without duration, 1- and 3-frame clips). Model directories: the offline
InternVL3-1B-hf and LLaVA-OneVision directories of ``tools/demo_data`` (no video processor config:
transformers loads the video settings from ``preprocessor_config.json``, which sets no sampling, so
the class defaults keep every frame), and copies with a video processor config that samples
(``SETTINGS``; one puts it nested in ``processor_config.json`` beside a conflicting
``video_preprocessor_config.json``, to check transformers' order of files).

transformers' video processors import torchvision, which cannot be loaded here, so the references are:

- settings: ``LlavaOnevisionVideoProcessor.get_video_processor_dict`` (``BaseVideoProcessor``'s
  own loader; the module imports without torchvision) over the class defaults (LLaVA-OneVision:
  the class attributes; InternVL: the class attributes read from ``video_processing_internvl.py``
  with ``ast``);
- frame indices: InternVL: ``InternVLVideoProcessor.sample_frames``, its source taken from the
  installed file with ``ast`` and run (with torch); LLaVA-OneVision:
  ``LlavaOnevisionVideoProcessor.sample_frames`` itself (``BaseVideoProcessor.sample_frames`` ->
  ``default_sample_indices_fn``), called unbound on the settings;
- tokens: the processors' own ``replace_video_token`` (processors built without a video processor,
  as in ``test_models_internvl.py`` / ``test_models_llava_onevision.py``) on a
  ``{"pixel_values_videos": [frames]}`` dict whose frames are the real decoded frames at the
  reference indices (uint8 ``[F, 3, H, W]``: what ``_prepare_input_videos`` hands on; not resized,
  which changes no count: the replacement reads only ``F``), plus LLaVA-OneVision's
  ``_get_num_multimodal_tokens(video_sizes=...)``;
- whole samples: the processor's own ``get_text_with_replacements`` (what ``ProcessorMixin.__call__``
  runs) on the rendered conversation with those replacements (images: the image processor's output
  on the decoded image), then the tokenizer: its ``input_ids`` == the family's count and
  ``expand_videos``. What is not compared: ``__call__`` itself (it needs the video processor) and
  pixels (``tests/test_train_video_families.py`` compares the collator's video pixels with the
  video processors' code path).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import textwrap
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from cli_runner import run_cli  # noqa: E402
from conftest import with_video_config  # noqa: E402
from test_models_internvl import _processor as internvl_processor  # noqa: E402
from test_models_llava_onevision import _processor as llava_processor  # noqa: E402

from vlmpack.errors import MediaRuleError  # noqa: E402
from vlmpack.media.video import probe_video  # noqa: E402
from vlmpack.models import load_model  # noqa: E402
from vlmpack.models.base import MediaSize  # noqa: E402
from vlmpack.packfmt import read_packs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: name -> (family, video processor config written into a copy of its directory, or None; "nested":
#: written as processor_config.json["video_processor"] with a conflicting video_preprocessor_config.json)
SETTINGS = {
    "internvl": ("internvl", None, False),
    "internvl_n8": ("internvl", {"do_sample_frames": True, "num_frames": 8}, False),
    "internvl_fps2": ("internvl", {"do_sample_frames": True, "fps": 2}, False),
    "internvl_fps1_noshift": ("internvl", {"do_sample_frames": True, "fps": 1, "initial_shift": False}, False),
    "llava": ("llava_onevision", None, False),
    "llava_n8": ("llava_onevision", {"do_sample_frames": True, "num_frames": 8}, False),
    "llava_fps1_nested": ("llava_onevision", {"do_sample_frames": True, "fps": 1}, True),
}


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def corpus(video_corpus) -> list[Path]:
    files = video_corpus
    assert len(files) == 21 and sum(f.name.startswith("demo_") for f in files) == 4
    return files


@pytest.fixture(scope="module")
def dirs(internvl_dir, llava_ov_dir, tmp_path_factory) -> dict[str, Path]:
    base = {"internvl": Path(internvl_dir), "llava_onevision": Path(llava_ov_dir)}
    out = {}
    for name, (fam, cfg, nested) in SETTINGS.items():
        if cfg is None:
            out[name] = base[fam]
            continue
        kind = "InternVLVideoProcessor" if fam == "internvl" else "LlavaOnevisionVideoProcessor"
        cfg = {**cfg, "video_processor_type": kind}
        # nested: the settings in processor_config.json, a conflicting file beside it (file order)
        d = with_video_config(base[fam], tmp_path_factory.mktemp(name),
                              {**cfg, "fps": None, "num_frames": 2} if nested else cfg)
        if nested:
            proc = json.loads((d / "processor_config.json").read_text())
            (d / "processor_config.json").write_text(json.dumps({**proc, "video_processor": cfg}))
        out[name] = d
    return out


@pytest.fixture(scope="module")
def families(dirs) -> dict:
    return {name: load_model(d) for name, d in dirs.items()}


@pytest.fixture(scope="module")
def processors(dirs) -> dict:
    return {name: (internvl_processor if SETTINGS[name][0] == "internvl" else llava_processor)(d)
            for name, d in dirs.items()}


@pytest.fixture(scope="module")
def internvl_sample_frames():
    """``InternVLVideoProcessor.sample_frames`` and its class defaults, from the installed source
    (the module imports torchvision)."""
    path = Path(importlib.util.find_spec("transformers.models.internvl").submodule_search_locations[0])
    text = (path / "video_processing_internvl.py").read_text()
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "InternVLVideoProcessor")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_frames")
    ns = {"torch": torch, "VideoMetadata": object}
    src = textwrap.dedent(" " * fn.col_offset + ast.get_source_segment(text, fn))
    exec(compile(src, "video_processing_internvl.py", "exec"), ns)  # noqa: S102 - transformers' own source
    defaults = {t.id: ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name) and t.id in ("do_sample_frames", "initial_shift")}
    return ns["sample_frames"], defaults


def reference_settings(name: str, d: Path, internvl_defaults: dict) -> dict:
    """The sampling settings transformers' loader gives for ``d`` over the class defaults."""
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    found, _ = LlavaOnevisionVideoProcessor.get_video_processor_dict(str(d))
    if SETTINGS[name][0] == "internvl":
        defaults = {"num_frames": None, "fps": None, **internvl_defaults}
    else:
        defaults = {"do_sample_frames": LlavaOnevisionVideoProcessor.do_sample_frames, "num_frames": None, "fps": None}
    return {k: found.get(k, v) for k, v in defaults.items()}


def decode_all(path: Path) -> dict:
    """Full PyAV decode (``read_video_pyav``'s ``to_ndarray(format="rgb24")``): every frame, the
    span of the frames' timestamps and their average rate."""
    frames, lo, hi = [], None, None
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        for fr in c.decode(st):
            frames.append(fr.to_ndarray(format="rgb24"))
            if fr.pts is not None:
                lo = fr.pts if lo is None else min(lo, fr.pts)
                hi = max(hi or 0, fr.pts + (fr.duration or 0))
        dur = float(Fraction(hi - lo) * st.time_base) if lo is not None and hi > lo else None
    return {"frames": frames, "total": len(frames), "fps": len(frames) / dur if dur else None}


def reference_indices(name: str, settings: dict, total: int, fps: float | None, ivl_sample) -> np.ndarray | None:
    """Frame indices by transformers' sampler for the decoded facts (None: it raises)."""
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor
    from transformers.video_utils import VideoMetadata

    if not settings["do_sample_frames"]:
        return np.arange(total)
    meta = VideoMetadata(total_num_frames=total, fps=fps)
    stub = SimpleNamespace(**settings)
    try:
        if SETTINGS[name][0] == "internvl":
            idx = ivl_sample(stub, meta, num_frames=settings["num_frames"], fps=settings["fps"],
                             initial_shift=settings["initial_shift"])
        else:
            idx = LlavaOnevisionVideoProcessor.sample_frames(stub, meta, num_frames=settings["num_frames"],
                                                             fps=settings["fps"])
    except (ValueError, ZeroDivisionError, TypeError):
        return None
    return np.asarray(idx)


def frames_tensor(dec: dict, idx: np.ndarray):
    """uint8 ``[F, 3, H, W]``: the decoded frames at ``idx`` (``video[indices]``, then channels first)."""
    return torch.from_numpy(np.stack([dec["frames"][i] for i in idx.tolist()])).permute(0, 3, 1, 2)


# ----------------------------------------------------------------------------- 1. per video
def test_header_equals_decode_equals_transformers_every_file(corpus, dirs, families, processors,
                                                             internvl_sample_frames):
    """For every corpus file and every setting: header facts == decoded facts; the family's frames
    and tokens from the header == transformers' sampler + ``replace_video_token`` on the real
    decoded frames; where transformers raises, the family raises ``MediaRuleError``."""
    ivl_sample, ivl_defaults = internvl_sample_frames
    settings = {n: reference_settings(n, d, ivl_defaults) for n, d in dirs.items()}
    for n, fam in families.items():
        assert {k: fam.video_config[k] for k in settings[n]} == settings[n], n
    assert settings["llava_fps1_nested"]["fps"] == 1 and settings["internvl"]["do_sample_frames"] is False
    refused = {n: [] for n in SETTINGS}
    compared = 0
    for path in corpus:
        h = probe_video(str(path), path.name)
        dec = decode_all(path)
        assert (h.frames, h.width, h.height) == (dec["total"], *dec["frames"][0].shape[1::-1]), path.name
        assert h.fps == pytest.approx(dec["fps"], rel=1e-9), path.name
        head = MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)
        for n, fam in families.items():
            idx = reference_indices(n, settings[n], dec["total"], dec["fps"], ivl_sample)
            if idx is None:
                with pytest.raises(MediaRuleError):
                    fam.media_tokens(head)
                refused[n].append(path.name)
                continue
            vids = {"pixel_values_videos": [frames_tensor(dec, idx)]}
            repl = processors[n].replace_video_token(vids, 0)
            if SETTINGS[n][0] == "internvl":
                assert fam.video_layout(head) == len(idx), (n, path.name)
                want = len(fam.tokenizer(repl, add_special_tokens=False)["input_ids"])
            else:
                want = repl.count("<video>")
                mm = processors[n]._get_num_multimodal_tokens(video_sizes=[(len(idx), h.height, h.width)])
                assert mm["num_video_tokens"] == [want], (n, path.name)
            assert fam.media_tokens(head) == want, (n, path.name, len(idx))
            compared += 1
    assert refused["internvl"] == refused["llava"] == [], refused
    assert sorted(refused["internvl_n8"]) == sorted(refused["llava_n8"]) == ["mjpeg_one.avi", "msmpeg4.avi"], refused
    assert compared == 21 * len(SETTINGS) - sum(map(len, refused.values()))


# ----------------------------------------------------------------------------- 2. whole samples
def _reference_ids(name: str, proc, fam, messages: list, videos: list, images: list) -> list[int]:
    """``input_ids`` as ``ProcessorMixin.__call__`` builds them, without the video processor: the
    rendered text, ``get_text_with_replacements`` with the processor's replacements (images from its
    image processor on the decoded pixels), the tokenizer's default call."""
    img_repl = []
    if images:
        if SETTINGS[name][0] == "internvl":
            out = proc.image_processor(images=images, crop_to_patches=True)
        else:
            out = proc.image_processor(images=[images], return_tensors="pt")
        img_repl = [proc.replace_image_token(out, i) for i in range(len(images))]
    vid = {"pixel_values_videos": videos}
    vid_repl = [proc.replace_video_token(vid, j) for j in range(len(videos))]
    text, _ = proc.get_text_with_replacements([fam.render(messages)], img_repl, vid_repl)
    return proc.tokenizer(text[0])["input_ids"]


BEFORE = ["", "Watch this clip ", "Watch:", "clip...", "1. ", "x  ", "(see)", "文本，", "clip"]


def test_whole_samples_equal_the_processor_text(corpus, families, processors, internvl_sample_frames, real_data):
    """Whole conversations (text before the video that ends in nothing, a letter, a space,
    punctuation, a digit, CJK; a second video; an image after the videos, which LLaVA-OneVision's
    template renders first): the family's ``num_tokens`` and ``expand_videos`` (media tokens and
    kinds in content order) == the processor's ``input_ids``; ``check_ids`` holds."""
    from PIL import Image

    ivl_sample, ivl_defaults = internvl_sample_frames
    files = {p.name: p for p in corpus}
    rows = (json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines())
    img = Image.open(real_data / next(r["images"][0] for r in rows if len(r.get("images") or []) == 1)).convert("RGB")
    checked = 0
    for n in ("internvl", "internvl_n8", "llava", "llava_n8"):
        fam, proc = families[n], processors[n]
        settings = {k: fam.video_config[k] for k in fam.video_config}
        settings.setdefault("initial_shift", ivl_defaults["initial_shift"])
        names = ["vp8_vfr.webm", "mpeg4.avi"] if n in ("internvl", "llava") else ["h264_long.mkv", "demo_bikes.mp4"]
        decs = {k: decode_all(files[k]) for k in names}
        heads = {k: probe_video(str(files[k]), k) for k in names}
        frames = {k: frames_tensor(d, reference_indices(n, settings, d["total"], d["fps"], ivl_sample))
                  for k, d in decs.items()}
        for before in BEFORE:
            for two, with_image in ((False, False), (True, False), (False, True)):
                content = ([{"type": "text", "text": before}] if before else []) + [{"type": "video"}]
                vids = [names[0]]
                if two:
                    content += [{"type": "text", "text": " and then"}, {"type": "video"}]
                    vids.append(names[1])
                if with_image:
                    content += [{"type": "text", "text": " and a picture:"}, {"type": "image"}]
                content.append({"type": "text", "text": " what?"})
                messages = [{"role": "user", "content": content},
                            {"role": "assistant", "content": [{"type": "text", "text": "A clip."}]}]
                ref = _reference_ids(n, proc, fam, messages, [frames[k] for k in vids], [img] if with_image else [])
                ids = np.asarray(fam.token_ids([messages], [None])[0])
                assert fam.check_ids(ids, int(with_image), len(vids)) is None, (n, before)
                heads_in_order = [heads[k] for k in vids]
                media = [MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames) for h in heads_in_order]
                tokens = [fam.media_tokens(m) for m in media]
                if with_image:
                    tokens.append(fam.media_tokens(MediaSize("image", *img.size)))
                assert fam.num_tokens(ids, tokens) == len(ref), (n, before, two, with_image)
                layouts = [fam.video_layout(m) for m in media]
                kinds = ["video"] * len(vids) + ["image"] * int(with_image)  # content order
                got = fam.expand_videos(ids, tokens, layouts, kinds=kinds)
                assert got.tolist() == ref, (n, before, two, with_image)
                checked += 1
    assert checked == 4 * len(BEFORE) * 3


# ----------------------------------------------------------------------------- 3. pack + verify
@pytest.mark.parametrize("name", ["internvl", "llava_n8"])
def test_pack_and_verify_the_demo_videos(real_data, dirs, families, name, tmp_path):
    """``vlmpack pack --pretokenize`` of the demo's video JSONL: every video counted (none
    rejected), each sample's ``num_tokens`` == the family's count from the header, the written
    ``input_ids`` == the family's ``expand_videos`` (== the processor's, test above); ``vlmpack
    verify`` passes; the collator builds the 8-frame LLaVA-OneVision videos' ``pixel_values_videos``
    (InternVL keeps every frame here, hundreds of 448 px tiles: its collation is proven on
    sampled frames in ``tests/test_train_video_families.py``)."""
    import io

    from vlmpack.train import PackCollator

    src = real_data / "real_sft_video.jsonl"
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    out = tmp_path / "out"
    r = run_cli(["pack", "-i", src, "--model", dirs[name], "-o", out, "--seq-len", "131072", "--media-root", real_data,
                 "-j", "1", "--no-progress", "--pretokenize"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["samples_by_kind"]["video"] == len(rows), report.get("rejections_by_reason")
    fam = families[name]
    packs = list(read_packs(out))
    seen = []
    for raw in packs:
        expected = []
        for s in json.loads(raw["json"])["samples"]:
            tokens, layouts = [], []
            for m in s["media"]:
                h = probe_video(raw[m["part"]], m["part"])
                media = MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)
                tokens.append(fam.media_tokens(media))
                layouts.append(fam.video_layout(media))
            assert [m["num_tokens"] for m in s["media"]] == tokens, s["id"]
            ids = np.asarray(fam.token_ids([s["messages"]], [None])[0])
            assert fam.num_tokens(ids, tokens) == s["num_tokens"], s["id"]
            expected.append(fam.expand_videos(ids, tokens, layouts))
            seen.append(s["id"])
        written = np.load(io.BytesIO(raw["input_ids.npy"]))
        assert written.tolist() == np.concatenate(expected).tolist(), raw["__key__"]
    assert sorted(seen) == sorted(r["id"] for r in rows)
    r = run_cli(["verify", out, "--workers", "1"])
    assert r.returncode == 0 and "verify passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    if name == "llava_n8":
        batch = PackCollator(str(dirs[name]))(packs[0])
        n = sum(m["kind"] == "video" for s in json.loads(packs[0]["json"])["samples"] for m in s["media"])
        assert n and tuple(batch["pixel_values_videos"].shape) == (n, 8, 3, 384, 384)
