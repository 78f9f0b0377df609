"""Qwen2.5-Omni videos (``models/qwen_omni_video.py``), with and without ``use_audio_in_video``:
every packed video sample's ids equal transformers' own ``Qwen2_5OmniProcessor`` on real videos.

Videos: the audio corpus's three videos with sound (mp4 h264 + AAC 44.1 kHz, Matroska h264 + FLAC
22.05 kHz, WebM VP9 + Opus 48 kHz; sound longer than the pictures), the demo set's
``bigbuckbunny.mp4`` (1280x720, its own 6-channel AAC 48 kHz track), two demo videos dubbed with
corpus speech (``demo_data.audio_corpus.DUBBED``: a sound track eight times longer than the
pictures in mp4 / AAC 16 kHz, one of 0.56 s under 4 s of pictures in Matroska / FLAC), one whose
sound track is cut short, the demo set's three videos without sound and the broken corpus's
``no_audio.mp4``: one sample each, plus one sample with an audio part (``word.mp3``) followed by
two videos with sound. Directory: the offline Omni directory of ``test_models_qwen2_5_omni.py``
(template with ``<|vision_bos|><|VIDEO|><|vision_eos|>`` per video).

``vlmpack pack --pretokenize`` packs them twice (once per module, ``omni_runs``): as they are, and
with ``--processor-kwargs '{"use_audio_in_video": true}'``. With it, the five videos without a usable
sound track are rejected: the four silent ones ``media_unsupported`` (no sound track), the cut one
``media_undecodable`` (the probe's own reason, which the count stage now records; the detail says
where the track stops).
Every packed sample's messages, rendered by the template, go with every frame of its packed video
parts (its audio part and, with ``use_audio_in_video``, each video's sound track, at 16 kHz) to the
processor in a child process (``omni_video_child.py``: the video processor needs torchvision, a
shape-true stand-in there); its ``input_ids`` must equal the pack's stored ``input_ids.npy`` slice
and the family's expansion, whose length is the recorded ``num_tokens``, and its ``video_grid_thw``
the family's grids. The first difference stops the test. (Training on these packs:
``test_train_omni_video.py``.)

``vlmpack verify`` passes both outputs (each sound track probed from its member's bytes) and flags a
video member whose sound track was replaced by one of another length (``hostile_outputs.replace_sound_track``):
its media tokens, off by exactly the two tracks' difference. ``vlmpack inspect`` shows every pack of
the ``use_audio_in_video`` output: each sample at its recorded count, each video one media run of its
video and sound tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cache_dir import CACHE
from cli_runner import run_cli
from conftest import cache_lock
from test_models_qwen2_5_omni import omni_dir  # noqa: F401 - module fixture used here

HERE = Path(__file__).parent
WITH_SOUND = ("speech_h264_aac.mp4", "speech_h264_flac.mkv", "speech_vp9_opus.webm", "bigbuckbunny.mp4",
              "carphone_turns.mp4", "carphone_word.mkv")
SILENT = ("bikes.mp4", "carphone_pristine.mp4", "carphone_distorted.mp4", "no_audio.mp4")
CUT = "carphone_cut_sound.mp4"
MIXED = "audio-then-two-videos"


@pytest.fixture(scope="module")
def word(real_data) -> Path:
    from demo_data.audio_corpus import build_audio_corpus

    with cache_lock():
        return next(p for p in build_audio_corpus(CACHE / "audio_corpus", real_data) if p.name == "word.mp3")


@pytest.fixture(scope="module")
def videos(real_data) -> dict[str, Path]:
    from demo_data.audio_corpus import build_audio_corpus, build_broken_audio, build_dubbed_videos

    with cache_lock():
        corpus = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
        broken = build_broken_audio(CACHE / "audio_corpus", CACHE / "audio_broken", real_data)
        dubbed = build_dubbed_videos(CACHE / "audio_corpus", CACHE / "omni_dubbed", real_data)
    demo = {p.name: p for p in (real_data / "videos").rglob("*.mp4")}
    every = {**demo, **corpus, **dubbed, "no_audio.mp4": broken["no_audio.mp4"]}
    return {name: every[name] for name in (*WITH_SOUND, *SILENT, CUT)}


def _records(videos: dict[str, Path], word: Path) -> list[dict]:
    """One sample per video, and one with an audio part before a video and a second video after."""
    out = [{"id": name, "messages": [
        {"role": "user", "content": [{"type": "video", "path": str(path)}, {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "Someone talks over the pictures."}]} for name, path in videos.items()]
    out.append({"id": MIXED, "messages": [
        {"role": "user", "content": [{"type": "audio", "path": str(word)}, {"type": "text", "text": "Is it said in"},
                                     {"type": "video", "path": str(videos["speech_h264_flac.mkv"])},
                                     {"type": "text", "text": "or in"},
                                     {"type": "video", "path": str(videos["carphone_word.mkv"])}]},
        {"role": "assistant", "content": "In the second."}]})
    return out


def _pack(src: Path, model: Path, out: Path, *extra) -> tuple[list[dict], list[dict]]:
    from vlmpack.packfmt import read_packs

    r = run_cli(["pack", "-i", src, "--model", model, "-o", out, "--seq-len", "65536", "--allow-absolute-media",
                 "--max-reject-fraction", "1", "--pretokenize", "-j", "1", "--no-progress", *extra])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    return list(read_packs(out)), rejects


def _text(tok, sample: dict) -> str:
    messages = [{**m, "content": [{"type": "text", "text": c["text"]} if c["type"] == "text" else {"type": c["type"]}
                                  for c in m["content"]]} if isinstance(m["content"], list) else m
                for m in sample["messages"]]
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)


@pytest.fixture(scope="module")
def omni_runs(omni_dir, videos, word, tmp_path_factory) -> dict[bool, tuple[Path, list[dict], list[dict]]]:  # noqa: F811
    """The two outputs of :func:`_records` (``vlmpack pack --pretokenize``): ``{use_audio_in_video:
    (OUT, packs, rejects)}``, packed once for the tests of this module."""
    tmp = tmp_path_factory.mktemp("omni_video")
    src = tmp / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _records(videos, word)))
    kwargs = json.dumps({"use_audio_in_video": True})
    return {False: (tmp / "plain", *_pack(src, omni_dir, tmp / "plain")),
            True: (tmp / "sound", *_pack(src, omni_dir, tmp / "sound", "--processor-kwargs", kwargs))}


def test_video_ids_equal_the_omni_processor(omni_dir, videos, omni_runs, tmp_path):  # noqa: F811
    from vlmpack.media.probe import probe_bytes
    from vlmpack.models import MediaSize, load_model
    from vlmpack.packfmt import parse_input_ids

    runs = {aiv: (packs, rejects) for aiv, (_, packs, rejects) in omni_runs.items()}
    assert runs[False][1] == []
    rejected = {x["id"]: (x["reason"], x["detail"]) for x in runs[True][1]}
    assert set(rejected) == {*SILENT, CUT}, rejected
    assert all(rejected[n][0] == "media_unsupported" and "no sound track" in rejected[n][1] for n in SILENT)
    # the cut track: the reason the probe gave (count_task records the MediaRuleError's own reason)
    assert rejected[CUT][0] == "media_undecodable", rejected[CUT]
    assert "the sound track of the video: audio stops decoding after" in rejected[CUT][1]  # cut mid-packet

    cases, expect = [], []
    for aiv, (packs, _) in runs.items():
        fam = load_model(str(omni_dir), json.dumps({"kwargs": {"use_audio_in_video": True}}) if aiv else "")
        assert fam.audio_in_video is aiv
        for raw in packs:
            pack = json.loads(raw["json"])
            stored = parse_input_ids(raw["input_ids.npy"])
            at = 0
            for s in pack["samples"]:
                parts, layouts, grids = [], [], []
                for m in s["media"]:
                    path = tmp_path / f"{int(aiv)}_{m['part']}_{s['id']}"
                    path.write_bytes(raw[m["part"]])
                    parts.append([m["kind"], str(path)])
                    if m["kind"] == "video":
                        info = probe_bytes(raw[m["part"]], "video", name=m["part"])
                        size = MediaSize("video", info.width, info.height, info.duration_s, info.fps, info.frames)
                        layouts.append(fam.video_layout(size))
                        grids.append(fam.video_grid(size))
                text = _text(fam.tokenizer, s)
                want = fam.expand_videos(np.asarray(fam.tokenize([text])[0]), [m["num_tokens"] for m in s["media"]],
                                         layouts)
                assert len(want) == s["num_tokens"], s["id"]
                assert np.array_equal(stored[at:at + len(want)], want), s["id"]
                at += len(want)
                cases.append({"text": text, "parts": parts, "audio_in_video": aiv})
                expect.append((s["id"], aiv, want, grids))
    assert sorted(e[0] for e in expect if not e[1]) == sorted([*videos, MIXED])
    assert sorted(e[0] for e in expect if e[1]) == sorted([*WITH_SOUND, MIXED])

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model_dir": str(omni_dir), "cases": cases}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "kimi_standin"), os.environ.get("PYTHONPATH", "")])}
    env.pop("KIMI_STANDIN_PIXELS", None)
    r = subprocess.run([sys.executable, str(HERE / "omni_video_child.py"), str(spec), str(tmp_path / "ref.npz")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = np.load(tmp_path / "ref.npz", allow_pickle=False)
    for i, (sid, aiv, want, grids) in enumerate(expect):
        got = ref[f"ids{i}"]
        assert [tuple(g) for g in ref[f"grid{i}"].tolist()] == grids, (sid, aiv)
        assert np.array_equal(got, want), (sid, aiv, len(got), len(want))
        n_video, n_audio_bos = (int(np.count_nonzero(got == t)) for t in (fam.video_token_id, fam.audio_start_token_id))
        assert n_video == sum(t * h * w // 4 for t, h, w in grids), (sid, aiv)
        assert n_audio_bos == (sid == MIXED) + (len(grids) if aiv else 0), (sid, aiv)  # one per sound track


def test_processor_kwargs_and_sound_track_from_bytes(omni_dir, videos, tmp_path):  # noqa: F811
    """``use_audio_in_video`` / ``load_audio_from_video`` reach the family through
    ``--processor-kwargs`` (the processor component), bad values and unknown keys are one-line
    ``ConfigError``s, and a video's sound track is counted the same from its bytes as from its path."""
    from vlmpack.errors import ConfigError, MediaRuleError
    from vlmpack.media.probe import probe_media
    from vlmpack.models import MediaSize, load_model
    from vlmpack.models.qwen_omni_video import omni_video_settings, sound_track_tokens
    from vlmpack.records import Media

    assert load_model(str(omni_dir), json.dumps({"kwargs": {"load_audio_from_video": True}})).audio_in_video
    with pytest.raises(ConfigError, match="not a setting of the qwen2_5_omni processors"):
        load_model(str(omni_dir), json.dumps({"kwargs": {"use_audio_in_videos": True}}))
    assert omni_video_settings(omni_dir) == {"audio_in_video": False, "seconds_per_chunk": 2.0,
                                             "position_id_per_seconds": 25}
    for cfg, match in (({"use_audio_in_video": "yes"}, "true or false"), ({"seconds_per_chunk": 0}, "positive")):
        (tmp_path / "processor_config.json").write_text(json.dumps(cfg))
        with pytest.raises(ConfigError, match=match):
            omni_video_settings(tmp_path)

    fam = load_model(str(omni_dir), json.dumps({"kwargs": {"use_audio_in_video": True}}))
    path = videos["carphone_word.mkv"]
    info = probe_media(str(path), "video", "header")
    size = MediaSize("video", info.width, info.height, info.duration_s, info.fps, info.frames)
    by_path = fam.media_tokens(Media("video", str(path), str(path), info.width, info.height,
                                     duration_s=info.duration_s, fps=info.fps, frames=info.frames))
    as_bytes = type("Item", (), {"data": path.read_bytes()})()
    assert by_path == 2 + fam.video_tokens(size) + sound_track_tokens(as_bytes, hop_length=fam.hop_length,
                                                                      n_samples=fam.n_samples)
    with pytest.raises(MediaRuleError, match="names no file and holds no bytes"):
        fam.media_tokens(size)


def test_verify_recounts_sound_tracks_from_the_members(omni_dir, omni_runs, tmp_path):  # noqa: F811
    """``vlmpack verify`` on both outputs: exit 0, no problem line (with ``use_audio_in_video`` each
    video's sound track is probed from its member's bytes, as the count stage probed its file). Then a
    video member's sound track replaced by one of another length (its own pictures kept; the report
    resealed, :func:`hostile_outputs.replace_sound_track`): ``check`` finds the content sha256,
    ``verify`` also the member's media tokens, off by exactly the two tracks' difference, and the
    sample's count; no other sample is named."""
    import shutil

    from hostile_outputs import replace_sound_track, reseal_report

    from vlmpack.media.probe import probe_bytes
    from vlmpack.models import MediaSize, load_model
    from vlmpack.models.qwen_omni_video import sound_track_tokens
    from vlmpack.packfmt import read_packs

    for aiv, (out, _, _) in omni_runs.items():
        r = run_cli(["verify", out, "--workers", "1", "--no-progress"])
        assert r.returncode == 0 and "problem:" not in r.stderr, (aiv, r.stdout[-2000:], r.stderr[-3000:])

    out = tmp_path / "out"
    shutil.copytree(omni_runs[True][0], out)
    shard, sid, part, offsets = replace_sound_track(out)
    reseal_report(out, offsets, shard)
    fam = load_model(str(omni_dir), json.dumps({"kwargs": {"use_audio_in_video": True}}))
    old = {m["part"]: (raw[m["part"]], m) for raw in read_packs(omni_runs[True][0])
           for s in json.loads(raw["json"])["samples"] if s["id"] == sid for m in s["media"]}[part]
    new = next(raw[part] for raw in read_packs(out) if any(s["id"] == sid for s in json.loads(raw["json"])["samples"]))
    info = probe_bytes(new, "video", name=part)
    assert (info.width, info.height) == (old[1]["width"], old[1]["height"])
    video = fam.video_tokens(MediaSize("video", info.width, info.height, info.duration_s, info.fps, info.frames))
    tracks = [sound_track_tokens(type("Item", (), {"data": d})(), hop_length=fam.hop_length, n_samples=fam.n_samples)
              for d in (old[0], new)]
    assert tracks[0] != tracks[1] and old[1]["num_tokens"] == 2 + video + tracks[0], (tracks, old[1])

    check = run_cli(["check", out, "--workers", "0"])
    assert check.returncode == 1 and "content sha256 differs from every one recorded" in check.stderr, check.stderr
    r = run_cli(["verify", out, "--workers", "1", "--no-progress"])
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    problems = [x[len("problem: "):] for x in r.stderr.splitlines() if x.startswith("problem: ")]
    want = f"sample {sid!r} part {part}: {2 + video + tracks[1]} media tokens from its header, {old[1]['num_tokens']}"
    assert any(want in p for p in problems), (want, problems)
    named = [p for p in problems if " sample " in p]
    assert named and all(repr(sid) in p for p in named), problems


def test_inspect_shows_videos_with_their_sound_track(omni_dir, omni_runs):  # noqa: F811
    """``vlmpack inspect`` on the ``use_audio_in_video`` output (it stopped with a ConfigError:
    ``encode`` has only the recorded counts): every sample of every pack is encoded to its recorded
    count, each video as one media run of its video and sound tokens (the grid from its member's
    header, the rest of its recorded count the sound track's), the audio part of the mixed sample as
    its own run; the command prints the pack (exit 0)."""
    from vlmpack.inspection import inspect_pack
    from vlmpack.media.probe import probe_bytes
    from vlmpack.models import MediaSize, load_model
    from vlmpack.packfmt import read_packs

    out = omni_runs[True][0]
    processor = json.dumps({"kwargs": {"use_audio_in_video": True}})
    fam = load_model(str(omni_dir), processor)
    seen = set()
    for raw in read_packs(out):
        for got in inspect_pack(raw, str(omni_dir), processor=processor):
            seen.add(got.id)
            assert got.num_tokens == got.recorded_tokens, got.id
            media_runs = [text for kind, text in got.runs if kind == "media"]
            assert len(media_runs) == len(got.media), (got.id, media_runs)
            for m, text in zip(got.media, media_runs):
                if m["kind"] == "video":
                    info = probe_bytes(raw[m["part"]], "video", name=m["part"])
                    video = fam.video_tokens(MediaSize("video", info.width, info.height, info.duration_s,
                                                       info.fps, info.frames))
                    audio = m["num_tokens"] - 2 - video
                    assert text == f"[{m['part']}: {video + audio} tokens ({video} video + {audio} audio)]", text
                else:
                    assert text == f"[{m['part']}: {m['num_tokens']} tokens]", text
    assert seen == {*WITH_SOUND, MIXED}

    r = run_cli(["inspect", out, "--sample", MIXED, "--plain", "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "video +" in r.stdout and "audio)]" in r.stdout and "Traceback" not in r.stderr, r.stdout[-3000:]
