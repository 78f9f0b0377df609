"""Processor options (``--min-pixels``, ``--max-pixels``, ``--patch-size``, ``--fps``, ...,
``--processor-kwargs``): counts equal transformers' processors built with the same kwargs, for every
family; the options are in the run's fingerprint and report; ``vlmpack verify`` and the collator
use them; an option a family does not have is one line, exit 2.

References are transformers' own classes, built as ``AutoProcessor.from_pretrained(dir, **kwargs)``
builds them (each component's ``from_pretrained(dir, **kwargs)``; the processor's init arguments from
``processor_config.json`` updated with the kwargs), never vlmpack's derived directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_runner import run_cli
from demo_data.packs import demo_packs
from PIL import Image

from vlmpack.config import PROCESSOR_FIELDS, load_config
from vlmpack.errors import ConfigError, PackMismatchError
from vlmpack.models import MediaSize, load_model
from vlmpack.models.options import canonical
from vlmpack.packfmt import read_packs, shard_paths

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: Sizes (w, h) that cross the rules' edges: tiny, thin, square, huge, and every aspect in between.
SIZES = [(1, 1), (14, 300), (300, 14), (317, 449), (448, 448), (640, 480), (897, 1344), (1344, 897), (2000, 1500),
         (3000, 200), (4000, 3000)]


def _real_images(real_data: Path, n: int = 12) -> list[Image.Image]:
    files = sorted(p for p in (real_data / "images").rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg")
                   and "broken" not in p.parts)
    out = []
    for p in files[:: max(1, len(files) // n)][:n]:
        with Image.open(p) as im:
            out.append(im.convert("RGB"))
    return out


def _qwen_reference(model_dir: Path, kwargs: dict, images: list) -> list[int]:
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    ip = Qwen2VLImageProcessorPil.from_pretrained(str(model_dir), **kwargs)
    grid = ip(images=images, return_tensors="np")["image_grid_thw"]
    return [int(g.prod()) // ip.merge_size**2 for g in grid]


def _internvl_reference(model_dir: Path, kwargs: dict, images: list) -> list[int]:
    from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.processing_internvl import InternVLProcessor

    ip = GotOcr2ImageProcessorPil.from_pretrained(str(model_dir), **kwargs)
    seq = {**json.loads((model_dir / "processor_config.json").read_text()), **kwargs}["image_seq_length"]
    out = ip(images=images, return_tensors="np", **InternVLProcessor.images_kwargs)
    return [int(n) * seq for n in out["num_patches"]]


def _llava_reference(model_dir: Path, kwargs: dict, images: list) -> list[int]:
    from transformers import AutoTokenizer
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ip = LlavaOnevisionImageProcessorPil.from_pretrained(str(model_dir), **kwargs)
    proc_kw = {**json.loads((model_dir / "processor_config.json").read_text()), **kwargs}
    proc_kw = {k: proc_kw[k] for k in ("num_image_tokens", "vision_feature_select_strategy", "vision_aspect_ratio",
                                       "image_token", "video_token") if k in proc_kw}
    cls = type("NoVideo", (LlavaOnevisionProcessor,), {"check_argument_for_proper_class": lambda *a: None})
    proc = cls(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=tok.chat_template, **proc_kw)
    image_id = tok.convert_tokens_to_ids(proc.image_token)
    return [int(np.count_nonzero(proc(text=[proc.image_token], images=[[im]], return_tensors="np")["input_ids"]
                                 == image_id)) for im in images]


# named options -> the image processor kwargs they stand for (the flags' documented meaning)
CASES = [
    ("model_dir", {"min_pixels": 3136, "max_pixels": 200_000}, {}, _qwen_reference),
    ("model_dir", {"patch_size": 16, "merge_size": 2, "max_pixels": 1_000_000}, {}, _qwen_reference),  # --factor 32
    ("model_dir", {}, {"max_pixels": 500_000, "do_resize": True}, _qwen_reference),
    ("qwen3_vl_dir", {"max_pixels": 300_000}, {}, _qwen_reference),
    ("qwen3_5_dir", {"min_pixels": 400_000}, {}, _qwen_reference),
    ("internvl_dir", {}, {"max_patches": 4}, _internvl_reference),
    ("llava_ov_dir", {}, {"image_grid_pinpoints": [[384, 384], [384, 768], [768, 384], [768, 768]]}, _llava_reference),
]


@pytest.mark.parametrize(("fixture", "named", "kwargs", "reference"), CASES,
                         ids=[f"{c[0]}-{'-'.join([*c[1], *c[2]])}" for c in CASES])
def test_image_counts_equal_processors_built_with_the_same_kwargs(request, real_data, fixture, named, kwargs,
                                                                  reference):
    model_dir = request.getfixturevalue(fixture)
    fam = load_model(str(model_dir), canonical(named, kwargs))
    base = load_model(str(model_dir))
    images = [Image.new("RGB", s) for s in SIZES] + _real_images(real_data)
    sizes = [im.size for im in images]
    counts = [fam.media_tokens(MediaSize("image", w, h)) for w, h in sizes]
    assert counts == reference(Path(model_dir), {**named, **kwargs}, images)
    assert counts != [base.image_tokens(w, h) for w, h in sizes]  # the options changed the counts
    # the collator's pixels: the same processors, the same tokens per image
    singles = images[len(SIZES):]
    assert fam.process_images(singles).tokens.tolist() == counts[len(SIZES):]


def _video_reference(model_dir: Path, kwargs: dict, defaults: dict, pixels_keys: bool) -> dict:
    """The video processor settings transformers builds: its file lookup
    (``BaseVideoProcessor.get_video_processor_dict``) over the class defaults, updated with the
    kwargs (``from_dict``); Qwen2-VL's ``__init__`` moves min/max_pixels into ``size``."""
    from transformers.video_processing_utils import BaseVideoProcessor

    found, _ = BaseVideoProcessor.get_video_processor_dict(str(model_dir))
    cfg = {**defaults, **{k: v for k, v in found.items() if k in defaults}, **kwargs}
    size = dict(cfg["size"])
    if pixels_keys:
        for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
            value = kwargs.get(key, found.get(key))
            if value is not None:
                size[edge] = value
    cfg["size"] = size
    return {k: cfg[k] for k in defaults}


def _class_defaults(fixture: str) -> dict:
    """The video processor class defaults the family's rule reads (transformers' class attributes)."""
    from vlmpack.models.frames_rule import SAMPLING_DEFAULTS
    from vlmpack.models.internvl_video import VIDEO_DEFAULTS
    from vlmpack.models.qwen3_vl import Qwen3VLFamily
    from vlmpack.models.qwen_video_rule import QwenVideoRule

    return {"model_dir": QwenVideoRule.video_defaults, "qwen3_vl_dir": Qwen3VLFamily.video_defaults,
            "internvl_dir": VIDEO_DEFAULTS, "llava_ov_dir": SAMPLING_DEFAULTS}[fixture]


@pytest.mark.parametrize(("fixture", "named", "kwargs"), [
    ("model_dir", {"fps": 1.0, "max_frames": 8, "video_max_pixels": 100_000},
     {"fps": 1.0, "do_sample_frames": True, "num_frames": None, "max_frames": 8, "max_pixels": 100_000}),
    ("qwen3_vl_dir", {"fps": 0.5, "min_frames": 2, "total_pixels": 2_000_000},
     {"fps": 0.5, "do_sample_frames": True, "num_frames": None, "min_frames": 2}),
    ("internvl_dir", {"fps": 1.0}, {"fps": 1.0, "do_sample_frames": True, "num_frames": None}),
    ("llava_ov_dir", {"fps": 1.0}, {"fps": 1.0, "do_sample_frames": True, "num_frames": None}),
])
def test_video_settings_equal_transformers_with_the_same_kwargs(request, video_corpus, fixture, named, kwargs):
    from vlmpack.media.video import probe_video

    model_dir = Path(request.getfixturevalue(fixture))
    fam, base = load_model(str(model_dir), canonical(named)), load_model(str(model_dir))
    defaults = _class_defaults(fixture)
    want = _video_reference(model_dir, kwargs, {**defaults, "size": defaults.get("size", {})},
                            pixels_keys=fam.name == "qwen2_vl")
    if "total_pixels" in named:  # Qwen3-VL: size={... "longest_edge": total} (the whole dict as a kwarg)
        want["size"] = {**want["size"], "longest_edge": named["total_pixels"]}
    if "size" not in defaults:  # the frame-sampling families: the rule reads no size (their frames are tiles)
        want.pop("size")
    assert {k: fam.video_config[k] for k in want} == want
    changed = 0
    for path in video_corpus[:6]:
        h = probe_video(str(path), path.name)
        media = MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)
        changed += fam.media_tokens(media) != base.media_tokens(media)
    assert changed  # the options reach the counts


@pytest.mark.parametrize(("fixture", "flag"), [
    ("model_dir", ["--total-pixels", "1000000"]),
    ("qwen3_vl_dir", ["--video-max-pixels", "100000"]),
    ("internvl_dir", ["--min-pixels", "3136"]),
    ("model_dir", ["--processor-kwargs", '{"max_patches": 4}']),
    ("model_dir", ["--processor-kwargs", "[1, 2]"]),
    ("model_dir", ["--max-pixels", "0"]),
])
def test_an_option_the_family_lacks_is_one_line_exit_2(request, real_data, tmp_path, fixture, flag):
    model_dir = request.getfixturevalue(fixture)
    r = run_cli(["pack", "-i", str(real_data / "real_sft.jsonl"), "-o", str(tmp_path / "out"), "--model",
                 str(model_dir), "--no-progress", *flag])
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("vlmpack: error:"), r.stderr
    assert flag[0].lstrip("-").split("-")[0] in lines[0] or "processor" in lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_yaml_keys_and_flags_make_one_canonical_set(real_data, model_dir, tmp_path):
    y = tmp_path / "pack.yaml"
    y.write_text(yaml.safe_dump({"input": str(real_data / "real_sft.jsonl"), "output": str(tmp_path / "o"),
                                 "model": str(model_dir), "max_pixels": 200000, "fps": 2,
                                 "processor_kwargs": {"do_convert_rgb": True}}))
    cfg = load_config(y, min_pixels=3136)
    assert cfg.processor == {"fps": 2.0, "kwargs": {"do_convert_rgb": True}, "max_pixels": 200000,
                             "min_pixels": 3136}
    plain = load_config(None, input=str(real_data / "real_sft.jsonl"), output=str(tmp_path / "o"),
                        model=str(model_dir))
    # unset, none of them is in the fingerprint: runs made before they existed keep theirs
    assert plain.processor == {} and not set(PROCESSOR_FIELDS) & set(plain.fingerprint_payload()["options"])
    assert cfg.fingerprint() != plain.fingerprint()
    with pytest.raises(ConfigError, match="processor-kwargs"):
        load_config(y, processor_kwargs="{not json")


@pytest.fixture(scope="module")
def packed(tmp_path_factory, real_data, model_dir):
    """300 demo records packed with --min-pixels 3136 --max-pixels 200000 (the CLI), and without."""
    root = tmp_path_factory.mktemp("procopts")
    src = root / "in.jsonl"
    src.write_text("".join((real_data / "real_sft.jsonl").read_text().splitlines(keepends=True)[:300]))
    r = run_cli(["pack", "-i", str(src), "--media-root", str(real_data), "-o", str(root / "opts"), "--model",
                 str(model_dir), "--seq-len", "4096", "--no-progress", "--cache-dir", "off", "-j", "1",
                 "--min-pixels", "3136", "--max-pixels", "200000"])
    assert r.returncode == 0, r.stderr
    return {"opts": root / "opts", "plain": demo_packs(real_data, model_dir, seq_len=4096, n_lines=300)}


def test_pack_records_the_options_and_verify_and_collator_use_them(packed, model_dir):
    from vlmpack.train import PackCollator
    from vlmpack.verify import recount_shard

    report = json.loads((packed["opts"] / "report.json").read_text())
    plain = json.loads((packed["plain"] / "report.json").read_text())
    assert report["processor"] == {"max_pixels": 200000, "min_pixels": 3136} and "processor" not in plain
    assert report["tokens"] < plain["tokens"]  # smaller images, fewer tokens
    assert report["fingerprint"] != plain["fingerprint"]
    r = run_cli(["verify", str(packed["opts"])])
    assert r.returncode == 0, r.stdout + r.stderr
    # without the options the same shards recount differently: verify really used them
    shard = str(shard_paths(packed["opts"])[0])
    assert recount_shard(shard, str(model_dir)) != [] and recount_shard(shard, str(model_dir), processor=json.dumps(
        report["processor"])) == []
    raw = list(read_packs(packed["opts"]))
    with_images = [p for p in raw if any(k.startswith("img") for k in p)][:6]
    collator = PackCollator(model_dir, rope_impl="numpy", processor=report["processor"])
    for p in with_images:
        batch = collator(p)
        assert batch["input_ids"].shape[1] == json.loads(p["json"])["num_tokens"]
    with pytest.raises(PackMismatchError):
        for p in with_images:
            PackCollator(model_dir, rope_impl="numpy")(p)


def test_plan_counts_with_the_same_options(packed, real_data, model_dir, tmp_path):
    """``vlmpack plan --input ... --max-pixels ...`` counts as the pack run with those options did."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join((real_data / "real_sft.jsonl").read_text().splitlines(keepends=True)[:300]))
    r = run_cli(["plan", "--input", str(src), "--media-root", str(real_data), "--model", str(model_dir), "-L", "4096",
                 "--json", "--cache-dir", "off", "--no-progress", "--min-pixels", "3136", "--max-pixels", "200000"])
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)[0]
    report = json.loads((packed["opts"] / "report.json").read_text())
    assert (row["tokens"], row["samples"]) == (report["tokens"], report["samples_packed"])
