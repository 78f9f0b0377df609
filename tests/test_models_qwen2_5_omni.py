"""Qwen2.5-Omni (``models/qwen2_5_omni.py``): text, image and audio samples packed with the
offline Omni directory, every count equal to transformers' own ``Qwen2_5OmniProcessor``.

Directory: ``tools/demo_data/qwen2_5_omni_dir.py`` (published ``preprocessor_config.json``, stand-in
tokenizer ids and ChatML template; ``model_files/qwen2_5_omni/SOURCES.md``), copied with its
template extended by the audio and video strings of the published Omni template,
``<|audio_bos|><|AUDIO|><|audio_eos|>`` per audio part and ``<|vision_bos|><|VIDEO|><|vision_eos|>``
per video part (the stand-in renders images only).

Samples: the first 60 demo records (text and image), one audio sample per file of a set of real
corpus files (WAV / FLAC / MP3 / M4A / Ogg, 8-48 kHz, mono and stereo, one longer than the
feature extractor's 300 s), an image + audio sample, a sample with two audio items, and a video
sample (10 s at 25 fps, every frame kept: more tokens than ``--seq-len``, so ``overlong``; videos are
proven in ``test_omni_video.py``). ``vlmpack pack`` packs them; for every packed sample the
pack JSON's messages rendered by the template and handed with the packed media bytes (decoded:
images by the kind's decoder, audio by :func:`vlmpack.media.audio.decode_audio`) to
``Qwen2_5OmniProcessor.__call__`` give exactly the ``input_ids`` of the family's expansion, whose
length is the recorded ``num_tokens``; each item's recorded count is its run of ``<|IMAGE|>`` /
``<|AUDIO|>``. The first difference stops the test. The log-mel features are computed for real on
the first 3 audio calls and shape-true after (``test_audio.shape_only_fbank``: the token count
reads only the attention mask). ``report.json``'s ``media_tokens_by_kind`` equals the per-item
counts by kind, audio included, and ``vlmpack verify`` (check: its Energon pass decodes every
``aud<N>`` member; then every count again from the members' headers) passes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from cache_dir import CACHE
from cli_runner import run_cli
from conftest import cache_lock

AUDIO = ("turns.flac", "word.mp3", "speech_short.wav", "word_11k.wav", "short_stereo.ogg", "word.m4a",
         "turns_8k_u8.wav", "turns_48k_stereo.flac", "turns_44k_stereo.mp3", "turns_16k.m4a", "bell.oga",
         "speech_long.wav")


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory) -> Path:
    from demo_data.qwen2_5_omni_dir import build_qwen2_5_omni_dir

    with cache_lock():
        src = build_qwen2_5_omni_dir(CACHE / "qwen2_5_omni")
    dest = tmp_path_factory.mktemp("omni") / "model"
    shutil.copytree(src, dest)
    path = dest / "chat_template.jinja"
    text = path.read_text()
    branch = "{%- elif item['type'] == 'text' -%}"
    assert text.count(branch) == 1
    path.write_text(text.replace(branch, "{%- elif item['type'] == 'audio' -%}{{- '<|audio_bos|><|AUDIO|>"
                                         "<|audio_eos|>' -}}{%- elif item['type'] == 'video' -%}{{- "
                                         "'<|vision_bos|><|VIDEO|><|vision_eos|>' -}}" + branch))
    return dest


@pytest.fixture(scope="module")
def audio_files(real_data) -> dict[str, Path]:
    from demo_data.audio_corpus import build_audio_corpus

    with cache_lock():
        files = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
    return {name: files[name] for name in AUDIO}


def omni_records(real_data: Path, audio_files: dict[str, Path], *, n_demo: int = 60, at: int = 30,
                 with_video: bool = True) -> list[dict]:
    """The first ``n_demo`` demo records (absolute image paths) with, after the first ``at`` of them,
    one audio-only record per file of ``audio_files``, an image-and-audio record, a two-audio record
    and (``with_video``) the first demo video record."""
    demo = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:n_demo]]
    for r in demo:
        if r.get("images"):
            r["images"] = [str(real_data / x) for x in r["images"]]
    first_image = next(r["images"][0] for r in demo if r.get("images"))
    audio = [{"id": f"audio-{name}", "messages": [
        {"role": "user", "content": [{"type": "audio", "path": str(path)}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "A sound from the corpus."}]} for name, path in audio_files.items()]
    both = {"id": "image-and-audio", "images": [first_image], "audios": [str(audio_files["word.mp3"])],
            "conversations": [{"from": "human", "value": "<image>\nDoes <audio> match the picture?"},
                              {"from": "gpt", "value": "No."}]}
    two = {"id": "two-audio", "audios": [str(audio_files["word_11k.wav"]), str(audio_files["turns.flac"])],
           "conversations": [{"from": "human", "value": "<audio> first, then <audio>: same voice?"},
                             {"from": "gpt", "value": "Yes."}]}
    videos = []
    if with_video:
        videos = [json.loads((real_data / "real_sft_video.jsonl").read_text().splitlines()[0])]
        videos[0]["videos"] = [str(real_data / x) for x in videos[0]["videos"]]
    return [*demo[:at], *audio, both, two, *videos, *demo[at:]]


def test_packed_counts_equal_the_omni_processor(real_data, omni_dir, audio_files, tmp_path):
    from test_audio import shape_only_fbank

    from vlmpack.media.kinds import KINDS
    from vlmpack.models import load_model
    from vlmpack.models.processor_build import build_processor
    from vlmpack.packfmt import read_packs

    records = omni_records(real_data, audio_files)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    r = run_cli(["pack", "-i", src, "--model", omni_dir, "-o", out, "--seq-len", "16384", "--allow-absolute-media",
                 "--max-reject-fraction", "1", "-j", "1", "--no-progress"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reason"]) for x in rejects] == [(records[-31]["id"], "overlong")], rejects
    assert report["samples_packed"] == len(records) - 1 and report["identity_holds"]

    fam = load_model(str(omni_dir))
    proc = build_processor(omni_dir)
    fe = proc.feature_extractor
    assert (fe.hop_length, fe.n_samples) == (fam.hop_length, fam.n_samples)
    by_kind = dict.fromkeys(KINDS, 0)
    seen, n_audio = set(), 0
    with shape_only_fbank(fe, real_files=3) as calls:
        for raw in read_packs(out):
            pack = json.loads(raw["json"])
            for s in pack["samples"]:
                media = {m["part"]: m for m in s["media"]}
                parts = [c for m in s["messages"] if isinstance(m["content"], list) for c in m["content"]
                         if c.get("type") in KINDS]
                images = [KINDS["image"].decode(raw[c["part"]], where=c["part"]) for c in parts
                          if c["type"] == "image"]
                waves = [KINDS["audio"].decode(raw[c["part"]], where=c["part"]) for c in parts if c["type"] == "audio"]
                messages = [{**m, "content": [{"type": "text", "text": c["text"]} if c["type"] == "text"
                                              else {"type": c["type"]} for c in m["content"]]}
                            if isinstance(m["content"], list) else m for m in s["messages"]]
                text = proc.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
                got = proc(text=[text], images=images or None, audio=waves or None, return_tensors="np")
                ids = got["input_ids"][0]
                tokens = [media[c["part"]]["num_tokens"] for c in parts]
                want = fam.expand(fam.tokenize([text])[0], tokens)
                assert np.array_equal(ids, want), (s["id"], len(ids), len(want))
                assert len(ids) == s["num_tokens"], s["id"]  # (items sit between bos/eos: each count is pinned)
                for c, n in zip(parts, tokens):
                    by_kind[c["type"]] += n
                seen.add(s["id"])
                n_audio += len(waves)
    assert seen == {x["id"] for x in records} - {rejects[0]["id"]}
    assert n_audio == len(AUDIO) + 3 and calls[0] == len(AUDIO) + 2  # one feature call per sample holding audio
    assert by_kind["audio"] > 0 and by_kind["image"] > 0 and by_kind["video"] == 0
    assert report["media_tokens_by_kind"] == by_kind
    assert report["samples_by_kind"]["audio"] == len(AUDIO) + 2
    # check (its Energon pass decodes every aud<N> member) + every count again from the members' headers
    v = run_cli(["verify", out, "--workers", "1"])
    assert v.returncode == 0 and "verify passed" in v.stdout, v.stdout[-2000:] + v.stderr[-2000:]
