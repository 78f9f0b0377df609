"""Video token counts from container headers equal the counts from fully decoded frames.

Corpus (``tools/demo_data/video_corpus.py``, built once under the test cache): the demo set's real
videos plus clips encoded with PyAV from the demo's real images (mp4 / mov / mkv / webm / avi;
h264, hevc, av1, vp8, vp9, mpeg4, msmpeg4, mjpeg, ffv1, prores; CFR, VFR, NTSC rates, rotation
metadata, a Matroska file without duration, 1- and 3-frame clips, a 13 s clip).

For every file: PyAV's full decode gives the real frame count, frame size and duration (span of
the decoded frames' timestamps), and the family rule applied to those must give the same grid and
token count as the header probe (:mod:`vlmpack.media.video`). The references for the rules:

- Qwen3-VL: transformers' own ``Qwen3VLVideoProcessor`` (``sample_frames``,
  ``get_num_of_video_patches``; imports without torchvision) and
  ``Qwen3VLProcessor._calculate_timestamps``; whole samples are expanded exactly as
  ``Qwen3VLProcessor.__call__`` does and tokenized.
- Qwen2-VL / Qwen2.5-VL: ``video_processing_qwen2_vl`` imports torchvision, which cannot load here,
  so its ``sample_frames`` / ``smart_resize`` / ``get_num_of_video_patches`` source is taken from the
  installed transformers with ``ast`` and run (with torch); qwen-vl-utils (PyPI; also imports
  torchvision) ``smart_nframes`` / ``smart_resize`` source likewise, where its rule is the same.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

av = pytest.importorskip("av")

from cli_runner import run_cli  # noqa: E402
from conftest import CACHE, with_video_config  # noqa: E402

from vlmpack.errors import MediaError, MediaRuleError  # noqa: E402
from vlmpack.media.probe import probe_bytes, probe_media  # noqa: E402
from vlmpack.media.video import probe_video  # noqa: E402
from vlmpack.models import load_model  # noqa: E402
from vlmpack.models.base import MediaSize  # noqa: E402


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def corpus(video_corpus) -> list[Path]:
    files = video_corpus
    assert len(files) >= 15
    assert {f.suffix for f in files} >= {".mp4", ".webm", ".mkv", ".mov", ".avi"}
    return files


@pytest.fixture(scope="module")
def qwen2_sampling_dir(model_dir, tmp_path_factory) -> Path:
    """A Qwen2-VL directory (``model_type`` qwen2_vl) whose video processor samples at 2 fps with
    the per-frame pixel cap (qwen-vl-utils' behaviour), beside the demo's Qwen2.5-VL directory,
    whose processor keeps every frame (its config has no video settings)."""
    d = with_video_config(model_dir, tmp_path_factory.mktemp("qwen2_vl_video"), {
        "do_sample_frames": True, "fps": 2, "min_frames": 4, "max_frames": 768, "cap_pixels_per_frame": True,
        "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}, "patch_size": 14,
        "temporal_patch_size": 2, "merge_size": 2, "video_processor_type": "Qwen2VLVideoProcessor"})
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "qwen2_vl"
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def families(model_dir, qwen3_vl_dir, qwen2_sampling_dir) -> dict:
    return {"qwen2_5_vl": load_model(model_dir), "qwen2_vl_fps": load_model(qwen2_sampling_dir),
            "qwen3_vl": load_model(qwen3_vl_dir)}


# ----------------------------------------------------------------------------- decode (the truth)
def decoded(path: Path) -> dict:
    """Full PyAV decode of the first video stream: frame count, frame size, span of the frames'
    timestamps (first start to last end, seconds), the rotation the frames carry."""
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        n, sizes, lo, hi, rot = 0, set(), None, None, 0
        for fr in c.decode(st):
            n += 1
            sizes.add((fr.width, fr.height))
            rot = rot or fr.rotation
            if fr.pts is not None:
                lo = fr.pts if lo is None else min(lo, fr.pts)
                hi = max(hi or 0, fr.pts + (fr.duration or 0))
        dur = float(Fraction(hi - lo) * st.time_base) if lo is not None and hi > lo else None
    assert len(sizes) == 1, f"{path.name}: frames of several sizes {sizes}"
    (w, h), = sizes
    return {"frames": n, "width": w, "height": h, "duration_s": dur, "fps": n / dur if dur else None,
            "rotation": rot}


# ----------------------------------------------------------------------------- references
def _source_defs(path: str, names: set[str]) -> str:
    tree = ast.parse(Path(path).read_text())
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.Assign)) and (
                getattr(node, "name", None) in names
                or any(isinstance(t, ast.Name) and t.id in names for t in getattr(node, "targets", []))):
            out.append(ast.get_source_segment(Path(path).read_text(), node))
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and f"{node.name}.{sub.name}" in names:
                    out.append(inspect.cleandoc("\n" + ast.get_source_segment(Path(path).read_text(), sub)))
    return "\n\n".join(out)


@pytest.fixture(scope="module")
def qwen2_reference():
    """transformers' ``Qwen2VLVideoProcessor.sample_frames`` / ``get_num_of_video_patches`` and
    ``smart_resize`` (source of the installed module, run without its torchvision import)."""
    import importlib.util

    import torch

    path = importlib.util.find_spec("transformers.models.qwen2_vl").submodule_search_locations[0]
    src = _source_defs(f"{path}/video_processing_qwen2_vl.py",
                       {"smart_resize", "Qwen2VLVideoProcessor.sample_frames",
                        "Qwen2VLVideoProcessor.get_num_of_video_patches"})
    ns = {"math": math, "torch": torch, "VideoMetadata": object}
    exec(compile(src, "video_processing_qwen2_vl.py", "exec"), ns)  # noqa: S102 - transformers' own source
    return ns


@pytest.fixture(scope="module")
def qwen_vl_utils_reference():
    """qwen-vl-utils' ``smart_nframes`` / ``smart_resize`` (source of the installed package, its
    module imports torchvision)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_vl_utils")
    if spec is None:
        pytest.skip("qwen-vl-utils is not installed")
    path = Path(spec.submodule_search_locations[0]) / "vision_process.py"
    names = {"round_by_factor", "ceil_by_factor", "floor_by_factor", "smart_resize", "smart_nframes", "MAX_RATIO",
             "FPS", "FRAME_FACTOR", "FPS_MIN_FRAMES", "FPS_MAX_FRAMES", "IMAGE_MAX_TOKEN_NUM", "IMAGE_MIN_TOKEN_NUM"}
    ns = {"math": math, "Optional": object, "Tuple": object, "Union": object, "Dict": object, "Any": object,
          "logger": SimpleNamespace(warning=lambda *a: None)}
    src = _source_defs(str(path), names).replace("Optional[int]", "int").replace("Tuple[int, int]", "tuple")
    src = src.replace("Union[int, float]", "float").replace("Dict[str, Any]", "dict")
    exec(compile(src, "vision_process.py", "exec"), ns)  # noqa: S102 - qwen-vl-utils' own source
    return ns


def qwen2_reference_grid(ref: dict, fam, frames: int, fps: float | None, width: int, height: int):
    """``(t, h, w)`` by transformers' Qwen2-VL video processor functions, on the decoded facts."""
    c = fam.video_config
    tp, patch, merge = c["temporal_patch_size"], c["patch_size"], c["merge_size"]
    if c["do_sample_frames"] and (c["fps"] is not None or c["num_frames"] is not None):
        stub = SimpleNamespace(**{k: c[k] for k in ("num_frames", "fps", "temporal_patch_size", "min_frames",
                                                     "max_frames")})
        n = len(ref["sample_frames"](stub, SimpleNamespace(total_num_frames=frames, fps=fps)))
    else:
        n = frames
    factor = patch * merge
    max_px = c["size"]["longest_edge"]
    if c["cap_pixels_per_frame"]:  # Qwen2VLVideoProcessor.resize
        total_pixels = int(c["max_video_tokens"] * factor * factor * 0.9)
        max_px = max(min(max_px, total_pixels * tp // n), int(c["size"]["shortest_edge"] * 1.05))
    h, w = ref["smart_resize"](height, width, factor=factor, min_pixels=c["size"]["shortest_edge"], max_pixels=max_px)
    stub = SimpleNamespace(size=c["size"], patch_size=patch, merge_size=merge, temporal_patch_size=tp)
    patches = ref["get_num_of_video_patches"](stub, n, h, w, {})  # h, w already multiples of the factor
    grid = (-(-n // tp), h // patch, w // patch)
    assert math.prod(grid) == patches
    return grid, n


# ----------------------------------------------------------------------------- tests
def test_header_equals_decode_every_file_every_family(corpus, families, qwen2_reference, qwen_vl_utils_reference):
    """Header probe == full decode (frames, size, fps), and for each of the three families the
    header count == the count from decoded frames through the reference rule; stops at the first
    difference."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    q3 = families["qwen3_vl"]
    q3_proc = Qwen3VLVideoProcessor.from_pretrained(q3.model_dir)
    qvu = qwen_vl_utils_reference
    seen = {"rotated": 0, "packets": 0, "q3_refused": 0, "q2_refused": 0}
    for path in corpus:
        h = probe_video(str(path), path.name)
        d = decoded(path)
        assert (h.frames, h.width, h.height) == (d["frames"], d["width"], d["height"]), (path.name, h, d)
        assert h.duration_s == pytest.approx(d["duration_s"], rel=1e-9), (path.name, h, d)
        assert h.fps == pytest.approx(d["fps"], rel=1e-9), (path.name, h, d)
        seen["rotated"] += d["rotation"] != 0
        seen["packets"] += h.frames_from == "packets"
        head = MediaSize("video", h.width, h.height, h.duration_s, h.fps, h.frames)
        for name in ("qwen2_5_vl", "qwen2_vl_fps"):
            fam = families[name]
            try:
                grid, n = qwen2_reference_grid(qwen2_reference, fam, d["frames"], d["fps"], d["width"], d["height"])
            except (ValueError, ZeroDivisionError):  # the processor cannot sample this video (1 frame)
                with pytest.raises(MediaRuleError):
                    fam.video_tokens(head)
                seen["q2_refused"] += 1
                continue
            assert fam.video_grid(head) == grid, (name, path.name)
            assert fam.video_tokens(head) == math.prod(grid) // 4, (name, path.name)
            if fam.video_config["do_sample_frames"]:  # qwen-vl-utils: same nframes and per-frame resize rule
                ele = {"fps": 2, "min_frames": 4, "max_frames": 768}
                assert qvu["smart_nframes"](ele, total_frames=d["frames"], video_fps=d["fps"]) == n, path.name
                c = fam.video_config
                max_px = max(min(c["size"]["longest_edge"], int(128000 * 28 * 28 * 0.9) * 2 // n),
                              int(c["size"]["shortest_edge"] * 1.05))
                assert qvu["smart_resize"](d["height"], d["width"], 28, c["size"]["shortest_edge"],
                                           max_px) == (grid[1] * 14, grid[2] * 14), path.name
        # Qwen3-VL: transformers' own processor on the decoded facts
        meta = VideoMetadata(total_num_frames=d["frames"], fps=d["fps"])
        idx = q3_proc.sample_frames(meta)
        assert q3.video_indices(h.frames, h.fps).tolist() == list(idx), path.name
        if len(idx) < q3_proc.temporal_patch_size:  # its smart_resize refuses t < temporal_patch_size
            with pytest.raises(MediaRuleError):
                q3.video_tokens(head)
            seen["q3_refused"] += 1
            continue
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as q3_resize

        rh, rw = q3_resize(len(idx), d["height"], d["width"], temporal_factor=2, factor=32,
                           min_pixels=q3_proc.size["shortest_edge"], max_pixels=q3_proc.size["longest_edge"])
        patches = q3_proc.get_num_of_video_patches(len(idx), d["height"], d["width"])
        t, gh, gw = q3.video_grid(head)
        assert (t, gh * 16, gw * 16) == (-(-len(idx) // 2), rh, rw) and t * gh * gw == patches, path.name
        stamps = Qwen3VLProcessor._calculate_timestamps(None, list(idx), d["fps"], 2)
        assert q3.video_timestamps(head) == [f"<{s:.1f} seconds>" for s in stamps], path.name
    assert seen["rotated"] >= 2 and seen["packets"] >= 5 and seen["q3_refused"] == seen["q2_refused"] == 1, seen


def _qwen3_expanded_len(fam, proc_cls, messages, d: dict) -> int:
    """``len(input_ids)`` as ``Qwen3VLProcessor.__call__`` builds them: the rendered text with the
    vision triple replaced by the timestamped placeholder, tokenized whole."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    vp = Qwen3VLVideoProcessor.from_pretrained(fam.model_dir)
    idx = vp.sample_frames(VideoMetadata(total_num_frames=d["frames"], fps=d["fps"]))
    patches = vp.get_num_of_video_patches(len(idx), d["height"], d["width"])
    t = -(-len(idx) // 2)
    per = patches // t // 4
    stamps = proc_cls._calculate_timestamps(None, list(idx), d["fps"], 2)
    ph = "".join(f"<{stamps[i]:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per + "<|vision_end|>"
                 for i in range(t))
    text = fam.render(messages).replace("<|vision_start|><|video_pad|><|vision_end|>", ph, 1)
    return len(fam.tokenizer(text)["input_ids"])


@pytest.mark.parametrize("before", ["", "Watch this clip ", "Watch this clip: ", "Watch:", "clip...", "1. ",
                                    "x  ", "(see)", "文本，"])
def test_qwen3_whole_sample_with_timestamps(corpus, families, before):
    """Whole Qwen3-VL samples: the family's count (rendered ids + video tokens + the pre-token
    correction of the first timestamp) == the length of the processor's expanded text, for text
    before the video that ends in nothing, a letter, a space, punctuation, digits, CJK."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    fam = families["qwen3_vl"]
    for path in [p for p in corpus if p.name in ("h264_long.mkv", "demo_bikes.mp4", "vp8_vfr.webm")]:
        d = decoded(path)
        h = probe_video(str(path), path.name)
        content = ([{"type": "text", "text": before}] if before else []) + [{"type": "video"},
                                                                           {"type": "text", "text": " what?"}]
        messages = [{"role": "user", "content": content},
                    {"role": "assistant", "content": [{"type": "text", "text": "A clip."}]}]
        ids = np.asarray(fam.token_ids([messages], [None])[0])
        got = fam.num_tokens(ids, [fam.video_tokens(MediaSize("video", h.width, h.height, h.duration_s, h.fps,
                                                                h.frames))])
        assert got == _qwen3_expanded_len(fam, Qwen3VLProcessor, messages, d), (path.name, before)


def test_rotation_is_not_applied_by_the_reader(corpus):
    """Rotated clips decode (PyAV, the readers' backend) to frames of the coded size: the probe
    reports that size, the size the processor resizes."""
    rotated = [p for p in corpus if "rot" in p.name]
    assert rotated
    for p in rotated:
        d, h = decoded(p), probe_video(str(p), p.name)
        assert d["rotation"] != 0 and (h.width, h.height) == (d["width"], d["height"])


def test_probe_media_and_bytes_agree_and_bad_videos_are_reasons(corpus, tmp_path):
    for p in corpus[:6]:
        a, b = probe_media(str(p), "video"), probe_bytes(p.read_bytes(), "video", name=p.name)
        assert a == b and a.frames and a.format == p.suffix.lstrip(".")
        assert probe_media(str(p), "video", "decode").frames == a.frames
    cases = {"empty.mp4": b"", "text.mp4": b"this is not a video\n" * 20,
             "truncated.mp4": corpus[0].read_bytes()[:300]}
    png = next(iter(sorted((CACHE / "real_data" / "images").rglob("*.png"))))
    cases["image.mkv"] = png.read_bytes()
    for name, data in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        with pytest.raises(MediaError) as e:
            probe_media(str(f), "video")
        assert e.value.reason in ("media_undecodable", "media_unsupported"), (name, e.value.reason)


def test_pack_and_check_the_demo_videos(real_data, model_dir, qwen3_vl_dir, tmp_path):
    """``vlmpack pack`` of the demo's video JSONL with both models: every video counted (none
    rejected), the tokens of each sample equal the family count from the header, ``vlmpack check``
    passes."""
    src = real_data / "real_sft_video.jsonl"
    n = sum(1 for _ in src.open())
    for name, mdir in (("q25", model_dir), ("q3", qwen3_vl_dir)):
        out = tmp_path / name
        r = run_cli(["pack", "-i", src, "--model", mdir, "-o", out, "--seq-len", "131072", "--media-root", real_data,
                     "-j", "1", "--no-progress"])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        report = json.loads((out / "report.json").read_text())
        assert report["samples_by_kind"]["video"] == n, report.get("rejections_by_reason")
        r = run_cli(["verify", out, "--workers", "1"])  # check + every count again from the shard bytes
        assert r.returncode == 0 and "verify passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_media_tokens_per_kind_in_report_summary_and_plan(real_data, model_dir, tmp_path):
    """Image and video tokens apart (issue 23 item 4): the demo's videos, 60 image/text records and a
    sample holding an image and a video, packed with Qwen2.5-VL; ``report.json``'s
    ``media_tokens_by_kind`` equals the per-item counts the pack JSONs record, summed by media kind
    (the mixed sample's image tokens as image, its video tokens as video), the summary prints them,
    and ``vlmpack plan OUT`` shows the same totals from the manifest."""
    from vlmpack.pack.media_tokens import MEDIA_KINDS
    from vlmpack.packfmt import read_packs

    video = [json.loads(x) for x in (real_data / "real_sft_video.jsonl").read_text().splitlines()]
    images = (real_data / "real_sft.jsonl").read_text().splitlines()[:60]
    first_image = next(r["images"][0] for x in images if (r := json.loads(x)).get("images"))
    mixed = {"id": "image-and-video", "images": [first_image], "videos": video[0]["videos"], "conversations": [
        {"from": "human", "value": "<image>\n<video>\nHow do these two relate?"},
        {"from": "gpt", "value": "The picture is a stamp; the video shows bikes."}]}
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([*map(json.dumps, video), *images, json.dumps(mixed)]) + "\n")
    out = tmp_path / "out"
    r = run_cli(["pack", "-i", src, "--model", model_dir, "-o", out, "--seq-len", "131072", "--media-root", real_data,
                 "-j", "1", "--no-progress"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    want = dict.fromkeys(MEDIA_KINDS, 0)  # every registered kind (audio: 0 here)
    mixed_kinds = None
    for raw in read_packs(out):
        for s in json.loads(raw["json"])["samples"]:
            for m in s["media"]:
                want[m["kind"]] += m["num_tokens"]
            if s["id"] == "image-and-video":
                mixed_kinds = sorted(m["kind"] for m in s["media"])
    assert mixed_kinds == ["image", "video"]  # the mixed sample was packed
    assert want["image"] > 0 and want["video"] > 0
    assert report["media_tokens_by_kind"] == want
    assert report["media_tokens_per_pack_by_kind"]["video"]["max"] <= report["media_tokens_per_pack"]["max"]
    assert f"{want['image']:,} / {want['video']:,}" in r.stdout  # the summary row "media tokens image / video"
    plan = run_cli(["plan", out, "-L", "131072", "--json"])
    assert plan.returncode == 0, plan.stderr[-2000:]
    row = json.loads(plan.stdout)[0]
    assert row["media_tokens_by_kind"] == want
    table = run_cli(["plan", out, "-L", "131072"])
    assert f"{want['image']:,} / {want['video']:,}" in table.stdout


def test_cut_and_miscounted_videos_are_rejected_and_pack_verify_collator_agree(video_corpus, model_dir, tmp_path):
    """Real broken files (``tools/demo_data/video_corpus.py`` :data:`BROKEN`: an MP4 with its index
    first cut mid-stream, an AVI cut mid-stream, an AVI whose header counts one frame more than
    decode, a Matroska file cut in half) beside a sound demo video:

    - the header promises more frames than decode for the first three (what a header-only count
      would record); ``vlmpack pack`` (default media check) rejects exactly those,
      ``media_undecodable`` with both counts, and packs the sound ones; Energon loads the output
      with input = packed + rejected, the collator trains every pack to its recorded counts and
      ``vlmpack verify`` passes;
    - packed with ``--media-check header`` instead, all five are packed, and the collator's video
      path (:func:`vlmpack.train.videos.process_pack_videos`) and ``vlmpack verify`` both refuse
      exactly the three that pack refuses."""
    from demo_data.video_corpus import BROKEN, build_broken_videos

    from vlmpack.energon.load import iter_energon_packs
    from vlmpack.errors import MediaDecodeError
    from vlmpack.train import PackCollator
    from vlmpack.train.videos import process_pack_videos

    corpus = video_corpus[0].parent
    broken = build_broken_videos(corpus, CACHE / "video_broken")
    files = {**broken, "sound.mp4": corpus / "demo_carphone_distorted.mp4"}
    bad = {"cut_faststart.mp4", "cut.avi", "count_plus_one.avi"}
    for name, path in files.items():
        head, full = probe_video(str(path), name), decoded_count(path)
        assert (head.frames > full) == (name in bad), (name, head.frames, full, BROKEN.get(name))
    src = tmp_path / "videos.jsonl"
    src.write_text("".join(json.dumps({"id": name, "messages": [
        {"role": "user", "content": [{"type": "video", "path": str(path)}, {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A short clip."}]}]}) + "\n"
        for name, path in files.items()))
    fam = load_model(str(model_dir))
    collator = PackCollator(model_dir)
    for check in ("verify", "header"):
        out = tmp_path / check
        r = run_cli(["pack", "-i", src, "--model", model_dir, "-o", out, "--seq-len", "131072", "-j", "1",
                     "--allow-absolute-media", "--media-check", check, "--max-reject-fraction", "1", "--no-progress"])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        rejects = {x["id"]: x for x in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
        packed = {}
        for pack in iter_energon_packs(out, num_workers=0):
            raw = dict(zip(pack.media_parts, pack.media))
            if check == "verify":
                collator(pack)  # raises MediaDecodeError / PackMismatchError on any disagreement
            for s in pack.samples:
                packed[s["id"]] = s
                (m,) = s["media"]
                label = f"{s['id']} {m['part']}"
                if s["id"] in bad:
                    with pytest.raises(MediaDecodeError, match="frames but frame|does not decode"):
                        process_pack_videos(fam, [(raw[m["part"]], label)])
                else:
                    assert process_pack_videos(fam, [(raw[m["part"]], label)]).tokens.tolist() == [m["num_tokens"]]
        assert len(packed) + len(rejects) == len(files) and not set(packed) & set(rejects)
        r = run_cli(["verify", out, "--workers", "1"])
        if check == "verify":
            assert set(rejects) == bad, rejects
            for x in rejects.values():
                assert x["reason"] == "media_undecodable" and "its header says" in x["detail"], x
            assert r.returncode == 0 and "verify passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        else:
            assert not rejects and set(packed) == set(files)
            assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
            said = r.stdout + r.stderr
            assert {name for name in files if name in said} == bad, said[-3000:]


def decoded_count(path: Path) -> int:
    """Frames PyAV decodes from the start of ``path`` until the end or its first error."""
    n = 0
    with av.open(str(path)) as c:
        try:
            for _ in c.decode(video=0):
                n += 1
        except av.FFmpegError:
            pass
    return n
