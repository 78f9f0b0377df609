"""``--layout llava-ov2-captioning`` read as LLaVA-OneVision-2's trainer reads it.

The output is loaded through Energon with restated copies of that trainer's sample class and
sample loader (tests/trainers/, never vlmpack's own loader), its images decoded as the trainer
decodes them (``image_decode="pil"``); every sample comes back once, its texts equal to the input
record's turns, its images the input's bytes and pixels, and its token count by the trainer's own
``qwen2-vl`` template (restated, images sized by transformers' image processor) is the recorded
count less one (the template's missing final newline), so no pack the trainer builds exceeds L.
``vlmpack check`` and ``verify`` pass on it; what the layout cannot hold is rejected with a reason.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from vlmpack.check import check_output
from vlmpack.errors import ConfigError
from vlmpack.inspection import find_packs, inspect_pack
from vlmpack.records import Locator, Media, Sample
from vlmpack.sinks import SINKS, sink_of
from vlmpack.verify import verify_output

pytest.importorskip("megatron.energon")

TRAINERS = Path(__file__).parent / "trainers"
sys.path.insert(0, str(TRAINERS))
from llava_ov2 import SAMPLE_LOADER, image_seqlens, sample_messages, template_ids  # noqa: E402
from shards import pack_objects  # noqa: E402

LAYOUT = "llava-ov2-captioning"
SEQ_LEN = 4096


@pytest.fixture(scope="module")
def ov2_out(real_data, model_dir):
    from demo_data.packs import demo_packs

    return demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=400, group_by_kind=False, layout=LAYOUT)


def _trainer_view(out: Path, dest: Path) -> Path:
    """``out`` as the trainer's Energon sees it, with the trainer's own (restated) sample loader."""
    dest.mkdir()
    for p in out.glob("*.tar*"):
        os.symlink(p.resolve(), dest / p.name)
    shutil.copytree(out / ".nv-meta", dest / ".nv-meta")
    (dest / ".nv-meta" / "sample_loader.py").write_text(SAMPLE_LOADER)
    return dest


def _records(out: Path) -> dict[str, dict]:
    src = out.parent / "input.jsonl"
    return {r["id"]: r for r in map(json.loads, src.read_text().splitlines())}


def _pack_ids(out: Path) -> dict[str, list[str]]:
    """Pack key -> its samples' ids (tests/trainers/shards.py)."""
    return {k: [s["id"] for s in obj["samples"]] for k, obj in pack_objects(out).items()}


def test_the_dataset_yaml_is_the_one_their_writer_writes(ov2_out):
    meta = yaml.safe_load((ov2_out / ".nv-meta" / "dataset.yaml").read_text())
    assert meta == {"sample_type": {"__module__": "aiak_training_llm.data.multimodal",
                                    "__class__": "PackedCaptioningSample"},
                    "part_filter": "sample_loader.py:part_filter", "sample_loader": "sample_loader.py:sample_loader"}
    assert [p.name for p in sorted(ov2_out.glob("*.tar"))][0] == "pretrain-000000.tar"
    assert sink_of(ov2_out) is SINKS[LAYOUT]


@pytest.mark.usefixtures("frozen_objects")
def test_their_trainer_reads_every_sample_with_its_texts_media_and_a_count_within_l(ov2_out, real_data, model_dir,
                                                                                     tmp_path, monkeypatch):
    from image_memo import shape_only_pixels
    from megatron.energon import DefaultTaskEncoder, SampleDecoder, WorkerConfig, get_loader, get_train_dataset
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    monkeypatch.syspath_prepend(str(TRAINERS))
    from aiak_training_llm.data.multimodal import PackedCaptioningSample

    class TrainerDecoding(DefaultTaskEncoder):  # their dataloader_provider's image_decode="pil"
        decoder = SampleDecoder(image_decode="pil")

    view = _trainer_view(ov2_out, tmp_path / "view")
    ds = get_train_dataset(str(view), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
                           worker_config=WorkerConfig.default_worker_config(num_workers=0), repeat=False,
                           task_encoder=TrainerDecoding())
    records, pack_ids = _records(ov2_out), _pack_ids(ov2_out)
    report = json.loads((ov2_out / "report.json").read_text())
    recorded = {s["id"]: s["num_tokens"] for obj in pack_objects(ov2_out).values() for s in obj["samples"]}
    tok = AutoTokenizer.from_pretrained(model_dir)
    proc = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    seen: dict[str, int] = defaultdict(int)
    n_images = small = 0
    with shape_only_pixels():  # grids depend on sizes only (tests/image_memo.py)
        for pack in get_loader(ds):
            assert isinstance(pack, PackedCaptioningSample)
            ids = pack_ids[pack.__key__]
            assert len(pack.images) == len(pack.prompts) == len(pack.captions) == len(ids)
            assert pack.patch_positions == [[None] * len(im) for im in pack.images]  # none precomputed
            assert pack.timestamp_decimal == [1] * len(ids) and pack.fps is None
            total = 0
            for idx, sid in enumerate(ids):
                seen[sid] += 1
                rec = records[sid]
                turns = rec["conversations"]
                assert pack.prompts[idx] == [t["value"] for t in turns if t["from"] == "human"]
                assert pack.captions[idx] == [t["value"] for t in turns if t["from"] == "gpt"]
                paths = [real_data / p for p in rec.get("images", [])]
                assert len(pack.images[idx]) == len(paths)
                for im, p in zip(pack.images[idx], paths):
                    with Image.open(p) as want:
                        assert isinstance(im, Image.Image) and im.size == want.size and im.mode == "RGB"
                    n_images += 1
                ids_ = template_ids(tok, sample_messages(pack, idx), image_seqlens(proc, pack.images[idx]))
                if all(min(im.size) >= 28 for im in pack.images[idx]):
                    assert len(ids_) == recorded[sid] - 1, sid  # the template's final "\n" is not rendered
                else:  # the trainer first enlarges an image under 28 pixels a side: fewer tokens, never more
                    assert len(ids_) <= recorded[sid] - 1, sid
                    small += 1
                total += len(ids_)
            assert total <= SEQ_LEN
    assert sum(seen.values()) == len(seen) == report["samples_packed"] > 300
    assert n_images > 20 and 0 < small < len(seen) - 200  # most counts checked exact


def test_check_verify_and_inspect_read_the_layout(ov2_out, model_dir):
    res = check_output(ov2_out)
    report = json.loads((ov2_out / "report.json").read_text())
    assert res["problems"] == [] and res["samples"] == report["samples_packed"]
    res = verify_output(ov2_out, model=str(model_dir), workers=1, decode=True)  # + every pack through the collator
    assert res["problems"] == [] and res["recounted_shards"] == 1
    sid = _pack_ids(ov2_out)["ps_00000001"][-1]
    [(shard, key, parts)] = find_packs(ov2_out, sample=sid)
    samples = inspect_pack(parts, str(model_dir))
    assert (shard, key) == ("pretrain-000000.tar", "ps_00000001") and samples[-1].id == sid


def test_a_changed_caption_is_found_by_check(ov2_out, tmp_path):
    """The trainer reads the captions, check reads the pack object: a caption edited in the json
    (the object left alone) is a problem line."""
    out = tmp_path / "o"
    shutil.copytree(ov2_out, out, symlinks=True)
    shard = out / "pretrain-000000.tar"
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf]
    with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as tf:
        for m, data in members:
            if m.name == "ps_00000000.json":
                obj = json.loads(data)
                obj["captions"][0][0] += " (edited)"
                data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    res = check_output(out)
    assert any("ps_00000000" in p and "PackedCaptioningSample fields differ" in p for p in res["problems"]), \
        res["problems"]


def _sample(messages, kinds=("image",), tools=None) -> Sample:
    media = [Media(k, f"x{i}.png") for i, k in enumerate(kinds)]
    return Sample("s1", messages, media, Locator("f.jsonl", 1, 0), tools=tools)


def _text(role, *items):
    return {"role": role, "content": [{"type": "text", "text": t} if isinstance(t, str) else t for t in items]}


@pytest.mark.parametrize(("messages", "tools", "kinds", "why"), [
    ([_text("system", "Be brief."), _text("user", "hi"), _text("assistant", "yo")], None, (), "system prompt"),
    ([_text("user", "hi"), _text("assistant", "yo"), _text("user", "more?")], None, (), "turn pairs"),
    ([_text("assistant", "yo"), _text("user", "hi")], None, (), "turn 1 is assistant"),
    ([_text("user", "hi"), _text("assistant", "yo")], [{"type": "function"}], (), "tool schemas"),
    ([_text("user", "see <image> here"), _text("assistant", "yo")], None, (), "literal"),
    ([_text("user", "hi"), _text("assistant", "\nyo")], None, (), "starts with a newline"),
    ([_text("user", {"type": "video", "index": 0}, "hi"), _text("assistant", "yo")], None, ("video",), "video"),
    ([_text("user", "hi"), {**_text("assistant", "yo"), "reasoning_content": "hm"}], None, (), "reasoning_content"),
])
def test_what_the_trainer_cannot_read_is_rejected_with_a_reason(messages, tools, kinds, why):
    problem = SINKS[LAYOUT].sample_problem(_sample(messages, kinds, tools))
    assert problem is not None and problem[0] == "layout_unsupported" and why in problem[1], problem


def test_the_default_system_prompt_and_images_are_accepted():
    msgs = [_text("system", "You are a helpful assistant."), _text("user", {"type": "image", "index": 0}, "\nWhat?"),
            _text("assistant", " A cat.")]
    assert SINKS[LAYOUT].sample_problem(_sample(msgs)) is None


def test_a_model_of_another_template_is_refused_in_one_line(real_data, qwen3_vl_dir, tmp_path):
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    cfg = load_config(input=[str(real_data / "real_sft.jsonl")], model=str(qwen3_vl_dir), output=str(tmp_path / "o"),
                      layout=LAYOUT)
    with pytest.raises(ConfigError, match="qwen2-vl template.*qwen3_vl"):
        run_pack(cfg)
    with pytest.raises(ConfigError, match="unknown output layout 'nope'"):
        run_pack(cfg.model_copy(update={"layout": "nope"}))
    # the MultiMixQASample name: told which layout their trainer reads QA packs as
    with pytest.raises(ConfigError, match="llava-ov2-mix-qa: .*MultiMixQASample.*use --layout llava-ov2-captioning"):
        run_pack(cfg.model_copy(update={"layout": "llava-ov2-mix-qa"}))


def test_a_planted_loader_is_refused_before_anything_is_imported(ov2_out, tmp_path):
    """The layout's ``.nv-meta`` files are compared with what the layout writes before Energon is
    handed anything: a ``sample_loader.py`` with code added is named, and never runs."""
    out = tmp_path / "o"
    shutil.copytree(ov2_out, out, symlinks=True)
    marker = tmp_path / "ran"
    loader = out / ".nv-meta" / "sample_loader.py"
    loader.write_text(loader.read_text() + f"\nopen({str(marker)!r}, 'w').write('x')\n")
    res = check_output(out, num_workers=0)
    assert any("sample_loader.py differs from what vlmpack writes" in p for p in res["problems"]), res["problems"]
    assert not marker.exists()
    yaml_path = out / ".nv-meta" / "dataset.yaml"  # another class named: no layout's file, the default's compared
    yaml_path.write_text(yaml_path.read_text().replace("PackedCaptioningSample", "Planted"))
    res = check_output(out, num_workers=0)
    assert any("dataset.yaml differs" in p and "Planted" in p for p in res["problems"]), res["problems"]
    assert not marker.exists()


def test_export_gives_the_pack_objects_of_the_layout(ov2_out, tmp_path):
    """``vlmpack export`` reads the output through its layout: each row's samples are the pack
    object the trainer's json carries, its media the members' bytes."""
    import pyarrow.parquet as pq

    from vlmpack.export import export_parquet

    res = export_parquet(ov2_out, tmp_path / "hf", check=False)
    rows = pq.read_table(tmp_path / "hf" / "pretrain-000000.parquet").to_pylist()
    ids = _pack_ids(ov2_out)
    assert res["packs"] == len(rows) == len(ids) and [r["key"] for r in rows] == list(ids)
    assert all([s["id"] for s in json.loads(r["samples"])] == ids[r["key"]] for r in rows)
    with tarfile.open(ov2_out / "pretrain-000000.tar") as tf:
        first = rows[1]
        images = [tf.extractfile(f"{first['key']}.img{i}_{j}.jpg").read()
                  for i, s in enumerate(json.loads(first["samples"])) for j in range(len(s["media"]))]
    assert first["media"] == images and images
