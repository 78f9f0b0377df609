"""Audio as a registered media kind, end to end (issue 23 items 3-4): records reference audio, the
per-kind token columns carry it, and a model family without an audio token rule rejects such a
sample with a reason instead of failing.

Real files: the audio corpus (``tools/demo_data/audio_corpus.py``: Debian sound files, espeak-ng
speech of the demo texts and their conversions) and the demo set's image/text records.

1. Layouts: LLaVA-style ``audios`` / ``audio`` lists with ``<audio>`` placeholders, ``{"type":
   "audio"}`` parts (path / url keys, or a bare placeholder for the next ``audios`` entry),
   ``audio_url`` parts, OpenAI's ``input_audio`` (base64 bytes -> a ``data:`` reference) and the
   WDS-native ``media: audio`` give canonical ``{"type": "audio", "index": i}`` parts; a record's
   audio count that its placeholders do not match is ``placeholder_mismatch``.
2. ``vlmpack pack`` with the Qwen2.5-VL directory (no audio rule) of a JSONL mixing text, image and
   audio samples in every layout above: each audio sample is rejected ``media_unsupported`` with a
   one-line detail naming audio, every other sample is packed, records read = packed + rejected
   (report and Energon's own loader), ``report.json`` and ``vlmpack plan`` show media tokens per
   kind with ``audio`` 0, and ``vlmpack check`` passes.
3. ``vlmpack plan`` / the report on a manifest written before a kind's column existed: a sample of
   that kind gives the kind all its media tokens (:func:`vlmpack.pack.media_tokens.tokens_by_kind`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from cache_dir import CACHE
from cli_runner import run_cli
from conftest import cache_lock

from vlmpack.readers import parse_record
from vlmpack.records import Locator, Rejection, Sample

#: Real corpus files the records use (small ones: the pack test probes each).
AUDIO_FILES = ("turns.flac", "word.mp3", "speech_short.wav", "word_11k.wav", "short_stereo.ogg", "word.m4a")


@pytest.fixture(scope="module")
def audio_dir(real_data) -> Path:
    from demo_data.audio_corpus import build_audio_corpus

    with cache_lock():
        files = build_audio_corpus(CACHE / "audio_corpus", real_data)
    names = {p.name for p in files}
    assert set(AUDIO_FILES) <= names
    return files[0].parent


def _turns(user: str | list, answer: str = "A short sound.") -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def audio_records(audio_dir: Path) -> list[dict]:
    """One record per way a record references audio (module docstring, 1), each with real files."""
    p = {name: str(audio_dir / name) for name in AUDIO_FILES}
    word = base64.b64encode((audio_dir / "word.mp3").read_bytes()).decode("ascii")
    return [
        {"id": "llava-audios", "audios": [p["turns.flac"]], "conversations": [
            {"from": "human", "value": "<audio>\nWhat is said?"}, {"from": "gpt", "value": "Turns of speech."}]},
        {"id": "llava-audio-single", "audio": p["speech_short.wav"], "conversations": [
            {"from": "human", "value": "Transcribe: <audio>"}, {"from": "gpt", "value": "Hello."}]},
        {"id": "messages-audio-part", "messages": _turns(
            [{"type": "audio", "path": p["word_11k.wav"]}, {"type": "text", "text": "Which word?"}])},
        {"id": "messages-audio-placeholder", "audios": [p["short_stereo.ogg"]], "messages": _turns(
            [{"type": "text", "text": "Left or right?"}, {"type": "audio"}])},
        {"id": "messages-audio-url", "messages": _turns(
            [{"type": "audio_url", "audio_url": {"url": p["word.m4a"]}}, {"type": "text", "text": "Say it."}])},
        {"id": "openai-input-audio", "messages": _turns(
            [{"type": "text", "text": "Repeat:"}, {"type": "input_audio", "input_audio": {"data": word,
                                                                                       "format": "mp3"}}])},
        {"id": "native-audio", "texts": _turns("What do you hear?"), "media": "audio", "name": [p["word.mp3"]]},
    ]


def test_every_layout_references_audio(audio_dir):
    """Module docstring, 1: each record gives audio parts in text order, media refs resolved."""
    want_parts = {"llava-audios": ["audio", "text"], "llava-audio-single": ["text", "audio"],
                  "messages-audio-part": ["audio", "text"], "messages-audio-placeholder": ["text", "audio"],
                  "messages-audio-url": ["audio", "text"], "openai-input-audio": ["text", "audio"],
                  "native-audio": ["audio", "text"]}
    for rec in audio_records(audio_dir):
        res = parse_record(json.dumps(rec).encode(), Locator("a.jsonl", 1, 0), allow_absolute_media=True)
        assert isinstance(res, Sample), (rec["id"], res)
        assert [m.kind for m in res.media] == ["audio"] and res.kind == "audio", rec["id"]
        user = res.messages[0]["content"]
        assert [c["type"] for c in user] == want_parts[rec["id"]], (rec["id"], user)
        assert next(c for c in user if c["type"] == "audio") == {"type": "audio", "index": 0}
        if rec["id"] == "openai-input-audio":
            assert res.media[0].path.startswith("data:")
        else:
            assert Path(res.media[0].path).is_file(), rec["id"]
    mixed = {"images": ["images/x.png"], "audios": [str(audio_dir / "word.mp3")], "conversations": [
        {"from": "human", "value": "<audio> and <image>"}, {"from": "gpt", "value": "Both."}]}
    res = parse_record(json.dumps(mixed).encode(), Locator("a.jsonl", 1, 0), allow_absolute_media=True)
    assert isinstance(res, Sample) and [m.kind for m in res.media] == ["audio", "image"] and res.kind == "audio"


@pytest.mark.parametrize("record, reason", [
    ({"audios": ["a.wav", "b.wav"], "conversations": [{"from": "human", "value": "<audio>"},
                                                      {"from": "gpt", "value": "x"}]}, "placeholder_mismatch"),
    ({"conversations": [{"from": "human", "value": "<audio> hi"}, {"from": "gpt", "value": "x"}]},
     "placeholder_mismatch"),
    ({"audios": "a.wav", "conversations": [{"from": "human", "value": "<audio>"}, {"from": "gpt", "value": "x"}]},
     "wrong_type"),
    ({"messages": _turns([{"type": "input_audio", "input_audio": {"format": "wav"}}])}, "wrong_type"),
    ({"messages": _turns([{"type": "input_file", "file": "a.pdf"}])}, "media_unsupported"),
    ({"texts": _turns("hi"), "media": "sound"}, "media_unsupported"),
])
def test_bad_audio_references_get_a_reason(tmp_path, record, reason):
    res = parse_record(json.dumps(record).encode(), Locator("a.jsonl", 1, 0), media_root=str(tmp_path))
    assert isinstance(res, Rejection) and res.reason == reason and "\n" not in res.detail, res


def test_pack_with_a_family_without_audio_rejects_audio_samples(real_data, model_dir, audio_dir, tmp_path,
                                                                frozen_objects):
    """Module docstring, 2."""
    from vlmpack.energon.load import iter_energon_packs
    from vlmpack.pack.media_tokens import MEDIA_KINDS

    records = audio_records(audio_dir)
    first_image = next(r for x in (real_data / "real_sft.jsonl").read_text().splitlines()
                       if (r := json.loads(x)).get("images"))
    records.append({"id": "image-and-audio", "images": [str(real_data / first_image["images"][0])],
                    "audios": [str(audio_dir / "word.mp3")], "conversations": [
                        {"from": "human", "value": "<image>\n<audio>\nDoes the sound match the picture?"},
                        {"from": "gpt", "value": "No."}]})
    audio_ids = {r["id"] for r in records}
    others = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:40]]
    for r in others:  # absolute image paths: the audio files live outside the demo's media root
        for key in ("images", "videos"):
            if r.get(key):
                r[key] = [str(real_data / x) for x in r[key]]
    assert {"text", "image"} <= {"image" if r.get("images") else "text" for r in others}
    lines = [json.dumps(r) for r in others[:20]] + [json.dumps(r) for r in records] + \
        [json.dumps(r) for r in others[20:]]
    src = tmp_path / "mixed.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    r = run_cli(["pack", "-i", src, "--model", model_dir, "-o", out, "--seq-len", "16384", "--allow-absolute-media",
                 "--max-reject-fraction", "1", "-j", "1", "--no-progress"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert {x["id"] for x in rejects if x["id"] is not None} == audio_ids, rejects
    for x in rejects:
        assert x["reason"] == "media_unsupported" and "audio" in x["detail"] and "\n" not in x["detail"], x
        assert len(x["detail"]) < 300, x  # a data: reference is shown shortened (media.ref.display_ref)
    assert report["rejected_by_reason"] == {"media_unsupported": len(audio_ids)}
    assert report["records_read"] == len(lines) == report["samples_packed"] + report["rejected"]
    assert report["identity_holds"] and report["dropped_overlong"] == 0
    seen = [s["id"] for pack in iter_energon_packs(out, num_workers=0) for s in pack.samples]
    assert sorted(seen) == sorted(str(o["id"]) for o in others)  # every other sample once, through Energon
    assert list(report["media_tokens_by_kind"]) == list(MEDIA_KINDS) == ["image", "video", "audio"]
    assert report["media_tokens_by_kind"]["audio"] == 0 and report["media_tokens_by_kind"]["image"] > 0
    assert report["samples_by_kind"]["audio"] == 0
    assert " / ".join(f"{v:,}" for v in report["media_tokens_by_kind"].values()) in r.stdout
    plan = run_cli(["plan", out, "-L", "16384", "--json"])
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads(plan.stdout)[0]["media_tokens_by_kind"] == report["media_tokens_by_kind"]
    check = run_cli(["check", out])
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def test_plan_of_a_manifest_without_a_kind_column():
    """Module docstring, 3: a manifest of an older vlmpack (no ``video_tokens`` / ``audio_tokens``)
    gives a sample of that kind all its media tokens; with the columns, each kind its own part."""
    import pyarrow as pa

    from vlmpack.pack.preflight import plan_input_from_table, plan_row

    kinds = np.array([0, 1, 2, 3, 2, 3])  # text, image, video, audio, video+image, audio+image
    media = np.array([0, 10, 100, 1000, 110, 1010])
    base = {"num_tokens": media + 5, "num_media": (media > 0).astype(int), "media_tokens": media, "kind": kinds}
    full = {**base, "video_tokens": np.array([0, 0, 100, 0, 100, 0]), "audio_tokens": np.array([0, 0, 0, 1000, 0,
                                                                                                 1000])}
    old = plan_row(plan_input_from_table(pa.table(base), "old"), 4096)[0]["media_tokens_by_kind"]
    assert old == {"image": 10, "video": 210, "audio": 2010}
    new = plan_row(plan_input_from_table(pa.table(full), "new"), 4096)[0]["media_tokens_by_kind"]
    assert new == {"image": 30, "video": 200, "audio": 2000}
