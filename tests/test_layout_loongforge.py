"""``--layout loongforge-mix-qa`` read as LoongForge's trainer reads it.

The output, as it is (their crude ``dataset.yaml``), is loaded through Energon with a TaskEncoder
holding restated copies of that trainer's cooker and sample class (tests/trainers/loongforge.py),
images decoded as the trainer decodes them (``image_decode="pil"``, by extension); every sample
comes back once, its turns equal to the input record's, its images the input's pixels, and its token
count by the trainer's ``qwen2-vl`` template (restated, images sized as its encoder sizes them) is
the recorded count less one when the trainer's ``--image-resolution`` spares the images, and never
more with its default (512). ``vlmpack check`` and ``verify`` pass on it.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from vlmpack.check import check_output
from vlmpack.errors import ConfigError
from vlmpack.sinks import SINKS, sink_of
from vlmpack.verify import verify_output

pytest.importorskip("megatron.energon")

sys.path.insert(0, str(Path(__file__).parent / "trainers"))
from loongforge import (  # noqa: E402
    PackedMultiMixQASample,
    child_messages,
    cooker_packed_multi_mix_qa,
    image_seqlens,
    template_ids,
)
from shards import pack_objects  # noqa: E402

LAYOUT = "loongforge-mix-qa"
SEQ_LEN = 4096


@pytest.fixture(scope="module")
def lf_out(real_data, model_dir):
    from demo_data.packs import demo_packs

    return demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=400, group_by_kind=True, layout=LAYOUT)


def test_the_meta_is_their_writers(lf_out):
    assert yaml.safe_load((lf_out / ".nv-meta" / "dataset.yaml").read_text()) == {
        "__module__": "megatron.energon", "__class__": "CrudeWebdataset",
        "subflavors": {"sample_type": "packed_multi_mix_qa"}}
    assert not (lf_out / ".nv-meta" / "sample_loader.py").exists()
    assert sorted(p.name for p in lf_out.glob("*.tar"))[0] == "pretrain-000000.tar"
    assert sink_of(lf_out) is SINKS[LAYOUT]
    keys = list(pack_objects(lf_out))
    assert {k.split("_pack_")[0] for k in keys} == {"text", "image"}


@pytest.mark.usefixtures("frozen_objects")
def test_their_trainer_reads_every_sample_with_its_turns_images_and_a_count_within_l(lf_out, real_data, model_dir):
    from image_memo import shape_only_pixels
    from megatron.energon import Cooker, DefaultTaskEncoder, SampleDecoder, WorkerConfig, get_loader, get_train_dataset
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    class TrainerEncoder(DefaultTaskEncoder):
        cookers = [Cooker(cooker_packed_multi_mix_qa, has_subflavors={"sample_type": "packed_multi_mix_qa"})]
        decoder = SampleDecoder(image_decode="pil")

    ds = get_train_dataset(str(lf_out), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
                           worker_config=WorkerConfig.default_worker_config(num_workers=0), repeat=False,
                           task_encoder=TrainerEncoder())
    records = {r["id"]: r for r in map(json.loads, (lf_out.parent / "input.jsonl").read_text().splitlines())}
    objs = pack_objects(lf_out)
    report = json.loads((lf_out / "report.json").read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)
    proc = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    seen: dict[str, int] = defaultdict(int)
    n_images = 0
    with shape_only_pixels():  # grids depend on sizes only (tests/image_memo.py)
        for pack in get_loader(ds):
            assert isinstance(pack, PackedMultiMixQASample)
            samples = objs[pack.__key__]["samples"]
            assert len(pack.contexts) == len(pack.answers) == len(samples)
            assert (pack.images is None) == pack.__key__.startswith("text_pack_") and pack.answer_weights is None
            full = default = 0
            for idx, s in enumerate(samples):
                seen[s["id"]] += 1
                turns = records[s["id"]]["conversations"]
                assert pack.contexts[idx] == [t["value"] for t in turns if t["from"] == "human"]
                assert pack.answers[idx] == [t["value"] for t in turns if t["from"] == "gpt"]
                images = pack.images[idx] if pack.images is not None else []
                paths = [real_data / p for p in records[s["id"]].get("images", [])]
                assert len(images) == len(paths)
                for im, p in zip(images, paths):
                    with Image.open(p) as want:
                        assert isinstance(im, Image.Image) and im.size == want.size and im.mode == "RGB"
                n_images += len(images)
                msgs = child_messages(pack, idx)
                n = len(template_ids(tok, msgs, image_seqlens(proc, images, image_resolution=1 << 20)))
                assert n == s["num_tokens"] - 1, s["id"]  # the template's final "\n" is not rendered
                full += n
                default += len(template_ids(tok, msgs, image_seqlens(proc, images)))
            assert default <= full <= SEQ_LEN
    assert sum(seen.values()) == len(seen) == report["samples_packed"] > 300
    assert n_images > 20


def test_check_and_verify_read_the_layout(lf_out, model_dir):
    res = check_output(lf_out)
    report = json.loads((lf_out / "report.json").read_text())
    assert res["problems"] == [] and res["samples"] == report["samples_packed"]
    res = verify_output(lf_out, model=str(model_dir), workers=1)
    assert res["problems"] == [] and res["recounted_shards"] == 1


def test_packs_of_one_kind_are_required(real_data, model_dir, tmp_path):
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    cfg = load_config(input=[str(real_data / "real_sft.jsonl")], model=str(model_dir), output=str(tmp_path / "o"),
                      layout=LAYOUT)
    with pytest.raises(ConfigError, match="packs of one kind.*--group-by-kind"):
        run_pack(cfg)
    with pytest.raises(ConfigError, match="--pretokenize: layout loongforge-mix-qa has no input_ids part"):
        run_pack(cfg.model_copy(update={"group_by_kind": True, "pretokenize": True}))


def test_a_blend_holds_one_layout(lf_out, real_data, model_dir):
    """``vlmpack metadataset`` refuses outputs of two layouts (one trainer reads one sample class)."""
    from demo_data.packs import demo_packs

    from vlmpack.energon.metadataset import blend_problems, load_output

    other = demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=400, group_by_kind=True)
    outputs = [(p, rep) for p, rep, _ in map(load_output, (lf_out, other))]
    assert json.loads((lf_out / "report.json").read_text())["layout"] == LAYOUT
    problems = blend_problems(outputs)
    assert any("disagree on the output layout" in p and "loongforge-mix-qa in" in p and "vlmpack in" in p
               for p in problems), problems
