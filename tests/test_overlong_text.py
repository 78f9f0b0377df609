"""One record never stops a run (issue 19 item 12): a text too long for L is rejected ``overlong``
before tokenizing, a sample with 40,000 images does not overflow a per-sample count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.errors import OverlongError
from vlmpack.models import load_model
from vlmpack.models.text_bound import min_text_tokens, text_bound
from vlmpack.pack.pipeline import run_pack

# characters that make byte-level BPE tokens long (runs of spaces, dashes) or NFC shrink the text
# (Hangul jamo compose 3 -> 1, combining accents), mixed with any Unicode text
_TRICKY = st.sampled_from([" ", "\n", "\t", "-", "=", "e", "\u0301", "\u1100", "\u1161", "\u11a8", "\u00e9", "0",
                           "<|im_end|>", "<think>", "\U0001f600", "\u4e2d"])
_TEXT = st.lists(st.one_of(st.text(max_size=40), _TRICKY, st.builds(lambda c, k: c * k, _TRICKY, st.integers(1, 300))),
                 max_size=30).map("".join)


@pytest.fixture(scope="module", params=["model_dir", "qwen3_vl_dir", "internvl_dir", "llava_ov_dir"])
def family(request):
    """A family and its tokenizer's text bound (read from the tokenizer once, as the count stage does
    per process: about 0.2 s for the Qwen2 vocabulary, not to be paid per example)."""
    fam = load_model(str(request.getfixturevalue(request.param)))
    return fam, text_bound(fam.tokenizer)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(_TEXT, min_size=1, max_size=3))
def test_the_text_bound_never_exceeds_the_real_count(family, texts):
    """Lower bound <= the tokens of the texts alone, and <= the sample's exact count (template
    rendered, special tokens split as plain text), with each real tokenizer."""
    family, bound = family
    assert bound is not None and bound.max_token_bytes == 128 and bound.forms == ("NFC",)
    _, lb = min_text_tokens(texts, bound)
    alone = len(family.tokenizer("".join(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"])
    assert lb <= alone
    msgs = [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert lb <= len(family.token_ids([msgs], ["split"])[0])


def _jsonl(real_data: Path, path: Path, n: int, extra: list[dict]) -> Path:
    with open(real_data / "real_sft.jsonl") as f:
        lines = [next(f) for _ in range(n)]
    path.write_text("".join(lines) + "".join(json.dumps(r) + "\n" for r in extra))
    return path


def _cfg(inp: Path, real_data: Path, model_dir: Path, out: Path, seq_len: int, **kw):
    return load_config(input=[str(inp)], media_root=str(real_data), model=str(model_dir), output=str(out),
                       seq_len=seq_len, progress=False, workers=1, **kw)


def _rejects(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}


def test_a_text_too_long_for_l_is_rejected_untokenized_and_counts_again_for_a_larger_l(
        tmp_path, real_data, model_dir):
    big = {"id": "big", "conversations": [{"from": "human", "value": "word " * 40_000},  # 200 kB
                                          {"from": "gpt", "value": "ok"}]}
    inp = _jsonl(real_data, tmp_path / "in.jsonl", 30, [big])
    cache = tmp_path / "cache"
    report = run_pack(_cfg(inp, real_data, model_dir, tmp_path / "a", 512, cache_dir=str(cache)))
    rej = _rejects(tmp_path / "a")
    assert rej["big"]["reason"] == "overlong" and "before tokenizing" in rej["big"]["detail"]
    assert report["identity_holds"] and report["dropped_overlong"] >= 1 and report["samples_packed"] >= 20
    assert report["sources"][0]["dropped_overlong"] == report["dropped_overlong"]
    with pytest.raises(OverlongError, match="before tokenizing"):
        run_pack(_cfg(inp, real_data, model_dir, tmp_path / "e", 512, cache_dir=str(cache), overlong="error"))
    # L = 65,536 >= 200,000 / 128: the same cache is not reused for that task; the text is counted and fits
    report = run_pack(_cfg(inp, real_data, model_dir, tmp_path / "b", 65_536, cache_dir=str(cache)))
    assert report["reused"]["count_tasks_reused"] == 0 and "big" not in _rejects(tmp_path / "b")
    assert report["samples_packed"] == 31 and report["identity_holds"]


_PEAK = """
import json, resource, sys
from vlmpack.config import load_config
from vlmpack.pack.pipeline import run_pack
inp, media, model, out = sys.argv[1:5]
run_pack(load_config(input=[inp], media_root=media, model=model, output=out, seq_len=8192, progress=False,
                     workers=1, executor="local"))
# this process: VmHWM, the high-water mark of its own memory since exec (ru_maxrss of RUSAGE_SELF
# keeps the parent's mark across exec on Linux: under pytest-xdist, the worker's gigabytes)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"peak_kib": max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)}))
"""


def test_a_100_mb_user_text_is_rejected_without_the_tokenizer_and_memory_stays_modest(tmp_path, real_data,
                                                                                       model_dir):
    big = {"id": "huge", "conversations": [{"from": "human", "value": "x" * 100_000_000},
                                           {"from": "gpt", "value": "ok"}]}
    inp = _jsonl(real_data, tmp_path / "in.jsonl", 20, [big])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_PEAK), str(inp), str(real_data), str(model_dir),
                          str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    peak_gib = json.loads(res.stdout.splitlines()[-1])["peak_kib"] / 2**20
    rej = _rejects(out)
    assert rej["huge"]["reason"] == "overlong" and "before tokenizing" in rej["huge"]["detail"]
    report = json.loads((out / "report.json").read_text())
    assert report["samples_packed"] >= 15 and report["identity_holds"]
    assert peak_gib < 3.0, peak_gib  # the tokenizer alone took 13.5 GB on this text


def test_40000_images_in_one_sample_do_not_overflow_a_count(tmp_path, real_data, model_dir):
    first = json.loads((real_data / "real_sft.jsonl").read_text().splitlines()[0])
    n = 40_000
    many = {"id": "many", "images": first["images"] * n,
            "conversations": [{"from": "human", "value": "<image>" * n + "\nall of them?"},
                              {"from": "gpt", "value": "yes"}]}
    inp = _jsonl(real_data, tmp_path / "in.jsonl", 20, [many])
    report = run_pack(_cfg(inp, real_data, model_dir, tmp_path / "o", 8192))
    rej = _rejects(tmp_path / "o")
    assert rej["many"]["reason"] == "overlong", rej.get("many")  # 40,000 images x their tokens > 8,192
    assert report["identity_holds"] and report["samples_packed"] >= 15


def _bound_from_json(tokenizer):
    """The text bound's rule read from the whole ``tokenizer.json`` (the first implementation):
    BPE + a ByteLevel decoder + Unicode normal forms, the longest vocabulary entry or added token."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    dec = spec.get("decoder") or {}
    if spec["model"]["type"] != "BPE" or not (dec.get("type") == "ByteLevel" or any(
            d.get("type") == "ByteLevel" for d in dec.get("decoders", ()))):
        return None
    norm = spec.get("normalizer")
    parts = [] if norm is None else norm["normalizers"] if norm["type"] == "Sequence" else [norm]
    if any(p["type"] not in ("NFC", "NFKC", "NFD", "NFKD") for p in parts):
        return None
    longest = max(len(t) for t in spec["model"]["vocab"])
    added = max((len(a["content"].encode()) for a in spec["added_tokens"]), default=1)
    return max(longest, added), tuple(p["type"] for p in parts)


@pytest.mark.parametrize("fixture", ["model_dir", "llava_ov_dir"])
def test_text_bound_equals_the_rule_on_the_whole_tokenizer_json(request, fixture):
    """:func:`text_bound` reads the tokenizer's parts; the rule on its whole JSON gives the same bound
    (the Qwen2 vocabulary with Qwen2-VL's and LLaVA-OneVision's added tokens, and small BPE
    tokenizers with a sequence of normalizers and of decoders), and a tokenizer the rule does not
    cover gets none (WordPiece; BPE under a ``Replace`` normalizer or without a ByteLevel decoder)."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    def small(model, normalizer=None, decoder=None):
        tok = Tokenizer(model)
        if normalizer is not None:
            tok.normalizer = normalizer
        if decoder is not None:
            tok.decoder = decoder
        tok.add_special_tokens(["<|a_long_added_special_token|>"])
        return PreTrainedTokenizerFast(tokenizer_object=tok)

    def bpe():
        return models.BPE({"a": 0, "b": 1, "ab": 2, "abab": 3}, [("a", "b"), ("ab", "ab")])

    tok = load_model(request.getfixturevalue(fixture)).tokenizer
    got = text_bound(tok)
    assert (got.max_token_bytes, got.forms) == _bound_from_json(tok)
    covered = small(bpe(), normalizers.Sequence([normalizers.NFKC(), normalizers.NFC()]),
                    decoders.Sequence([decoders.ByteLevel(), decoders.Fuse()]))
    got = text_bound(covered)
    assert (got.max_token_bytes, got.forms) == _bound_from_json(covered) == (30, ("NFKC", "NFC"))
    for other in (small(models.WordPiece({"[UNK]": 0, "a": 1})), small(bpe(), normalizers.Replace("aa", "a"),
                                                                           decoders.ByteLevel()),
                  small(bpe(), None, decoders.Fuse())):
        assert text_bound(other) is None and _bound_from_json(other) is None
