"""Context parallelism in Megatron-Core's THD layout (issue 22 item 1), on real packs of the demo set.

``vlmpack pack --cp-size`` plans every sample padded to a multiple of 2 x CP (x TP with sequence
parallelism); the collator built with the same sizes pads each sample's span; the per-rank split
(:func:`vlmpack.train.thd.cp_indices`, restated from Transformer Engine) gives every rank whole, equal
chunks, checked against Megatron-Core's own RoPE slice ``_get_thd_freqs_on_this_cp_rank``; and
:func:`vlmpack.energon.thd.packed_seq_params` builds Megatron-Core's ``PackedSeqParams``.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from demo_data.packs import demo_packs
from typer.testing import CliRunner

from vlmpack.check import check_output
from vlmpack.cli import app
from vlmpack.config import load_config
from vlmpack.errors import PackTooLongError
from vlmpack.pack.stages import PlanOptions
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator
from vlmpack.train.thd import cp_indices, cp_shard

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SEQ_LEN = 512


@pytest.fixture(scope="module")
def cp_out(real_data, model_dir):
    """The first 300 demo records packed for CP 4 (each sample planned padded to a multiple of 8)."""
    return demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=300, cp_size=4)


@pytest.fixture(scope="module")
def cp_packs(cp_out):
    return list(read_packs(cp_out))


@pytest.fixture(scope="module")
def plain(model_dir):
    return PackCollator(model_dir, rope_impl="numpy")


def _padded(meta: dict, m: int) -> int:
    return sum(-(-s["num_tokens"] // m) * m for s in meta["samples"])


def test_pack_plans_each_sample_padded_and_check_holds_it(cp_out, cp_packs):
    report = json.loads((cp_out / "report.json").read_text())
    a = report["alignment"]
    assert (a["cp_size"], a["tp_size"], a["sequence_parallel"], a["sample_multiple"]) == (4, 1, False, 8)
    metas = [json.loads(p["json"]) for p in cp_packs]
    padded = [_padded(m, 8) for m in metas]
    assert max(padded) == a["padded_tokens_per_pack_max"] <= SEQ_LEN
    assert a["padding_tokens"] == sum(padded) - sum(m["num_tokens"] for m in metas) > 0
    assert check_output(cp_out, num_workers=0)["problems"] == []


def test_check_finds_a_pack_over_seq_len_once_padded(cp_out, tmp_path):
    """A report whose alignment the packs do not hold (a larger multiple) is a finding per pack."""
    out = tmp_path / "out"
    shutil.copytree(cp_out, out, symlinks=True)
    report = json.loads((out / "report.json").read_text())
    report["alignment"]["sample_multiple"] = 256
    (out / "report.json").write_text(json.dumps(report))
    problems = check_output(out, num_workers=0)["problems"]
    assert any("with each sample padded to a multiple of 256 > seq_len 512" in p for p in problems)


@pytest.mark.parametrize("sizes", [dict(cp_size=4), dict(cp_size=2, tp_size=2, sequence_parallel=True)])
def test_collator_pads_every_sample_span(cp_packs, model_dir, plain, sizes):
    c = PackCollator(model_dir, rope_impl="numpy", seq_len=SEQ_LEN, **sizes)
    assert c.sample_multiple == 8
    for raw in cp_packs[:30]:
        b, ref = c(raw), plain(raw)
        cu, cu_pad = b["cu_seqlens"].numpy(), b["cu_seqlens_padded"].numpy()
        lens = np.diff(ref["cu_seqlens"].numpy())
        assert cu.dtype == cu_pad.dtype == np.int32 and len(cu) == len(cu_pad) == len(lens) + 1
        assert np.array_equal(cu, ref["cu_seqlens"].numpy())
        assert np.array_equal(np.diff(cu_pad), -(-lens // 8) * 8)
        assert b["input_ids"].shape[1] == cu_pad[-1] <= SEQ_LEN and b["num_padding"] == cu_pad[-1] - cu[-1]
        real = np.concatenate([np.arange(a, a + n) for a, n in zip(cu_pad[:-1], lens)])
        pad = np.setdiff1d(np.arange(cu_pad[-1]), real)
        assert torch.equal(b["input_ids"][:, real], ref["input_ids"])
        assert torch.equal(b["labels"][:, real], ref["labels"])
        assert torch.equal(b["position_ids"][..., real], ref["position_ids"])
        assert (b["input_ids"][0, pad] == c.pad_token_id).all() and (b["labels"][0, pad] == -100).all()
        assert b["max_seqlen"] == ref["max_seqlen"] and b["max_seqlen_padded"] == int(np.diff(cu_pad).max())
        for key in ("images_per_sample", "videos_per_sample", "media_tokens_per_sample"):
            assert torch.equal(b[key], ref[key])


@pytest.mark.parametrize("cp", [2, 4])
def test_each_cp_rank_gets_whole_equal_chunks(cp_packs, model_dir, cp):
    """The split CP does: each span cut into 2 x CP chunks, rank r gets chunks r and 2CP-1-r; every
    token goes to exactly one rank; labels and positions follow; positions equal Megatron-Core's
    RoPE slice for the rank (``_get_thd_freqs_on_this_cp_rank`` with the span's offset)."""
    from megatron.core.models.common.embeddings.rope_utils import _get_thd_freqs_on_this_cp_rank

    c = PackCollator(model_dir, rope_impl="numpy", cp_size=cp, seq_len=SEQ_LEN)
    for raw in cp_packs[:20]:
        b = c(raw)
        cu_pad = b["cu_seqlens_padded"].numpy().astype(np.int64)
        total = int(cu_pad[-1])
        seen = np.zeros(total, dtype=np.int64)
        for r in range(cp):
            idx = cp_indices(cu_pad, cp, r)
            shard = cp_shard(b, cp, r)
            assert len(idx) == total // cp and shard["input_ids"].shape == (1, total // cp)
            seen[idx] += 1
            at = 0
            for a, z in zip(cu_pad[:-1], cu_pad[1:]):
                chunk = (z - a) // (2 * cp)
                mine = idx[at:at + 2 * chunk]
                assert np.array_equal(mine[:chunk], np.arange(a + r * chunk, a + (r + 1) * chunk))
                assert np.array_equal(mine[chunk:], np.arange(z - (r + 1) * chunk, z - r * chunk))
                rope = _get_thd_freqs_on_this_cp_rank(r, cp, torch.empty(2 * chunk), b["text_position_ids"][0],
                                                      offset=int(a))
                assert torch.equal(shard["text_position_ids"][0, at:at + 2 * chunk], rope)
                at += 2 * chunk
            assert torch.equal(shard["labels"], b["labels"][:, idx])
            assert torch.equal(shard["position_ids"], b["position_ids"][..., idx])
            assert shard["cu_seqlens_padded"] is b["cu_seqlens_padded"]
        assert (seen == 1).all()


def test_split_refuses_spans_cp_cannot_cut(cp_packs, plain):
    b = plain(cp_packs[0])
    with pytest.raises(ValueError, match="not a multiple of 2 x CP"):
        cp_indices(b["cu_seqlens_padded"], 4, 0)


def test_packed_seq_params_is_megatron_cores(cp_packs, model_dir, plain):
    from megatron.core.packed_seq_params import PackedSeqParams

    from vlmpack.energon.thd import packed_seq_params

    b = PackCollator(model_dir, rope_impl="numpy", cp_size=4)(cp_packs[0])
    p = packed_seq_params(b)
    assert isinstance(p, PackedSeqParams) and p.qkv_format == "thd"
    assert torch.equal(p.cu_seqlens_q, b["cu_seqlens"]) and torch.equal(p.cu_seqlens_kv_padded, b["cu_seqlens_padded"])
    assert p.max_seqlen_q == b["max_seqlen_padded"]
    # a batch whose padding is its own segment ([n+2]): the padding joins the last sample's span
    b = PackCollator(plain.model_dir, rope_impl="numpy", pad_to_multiple_of=128)(cp_packs[0])
    p = packed_seq_params(b)
    assert len(p.cu_seqlens_q) == len(p.cu_seqlens_q_padded) == len(b["cu_seqlens"])
    assert int(p.cu_seqlens_q_padded[-1]) == b["input_ids"].shape[1] and p.cu_seqlens_q_padded.dtype == torch.int32


def test_collator_refuses_a_pack_over_seq_len_once_padded(real_data, model_dir):
    """Packs planned without --cp-size can exceed L once a CP trainer pads them: a bad pack, not a crash."""
    packs = list(read_packs(demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=300)))
    c = PackCollator(model_dir, rope_impl="numpy", cp_size=8, seq_len=SEQ_LEN)
    over = [p for p in packs if _padded(json.loads(p["json"]), 16) > SEQ_LEN]
    fits = [p for p in packs if _padded(json.loads(p["json"]), 16) <= SEQ_LEN]
    assert over and fits
    for p in over[:5]:
        with pytest.raises(PackTooLongError, match="padded to a multiple of 16"):
            c(p)
    assert c(fits[0])["input_ids"].shape[1] <= SEQ_LEN


def test_options_fingerprint_and_plan(real_data, model_dir, tmp_path):
    """Default sizes leave the fingerprint as it was; CP and TP x SP set the planned multiple."""
    base = dict(input=[str(real_data / "real_sft.jsonl")], model=str(model_dir), output=str(tmp_path / "o"))
    plain = load_config(**base)
    assert not {"cp_size", "tp_size", "sequence_parallel"} & set(plain.fingerprint_payload()["options"])
    assert PlanOptions.of(plain).pad_to_multiple_of is None
    cp = load_config(**base, cp_size=2)
    assert cp.fingerprint() != plain.fingerprint() and PlanOptions.of(cp).pad_to_multiple_of == 4
    assert PlanOptions.of(load_config(**base, cp_size=2, tp_size=4, sequence_parallel=True)).pad_to_multiple_of == 16
    assert PlanOptions.of(load_config(**base, cp_size=2, pad_to_multiple_of=3)).pad_to_multiple_of == 12
    assert PlanOptions.of(load_config(**base, tp_size=4)).pad_to_multiple_of is None  # TP alone pads nothing


def test_plan_cli_with_cp_size(tmp_path):
    lengths = np.random.default_rng(0).integers(1, 900, 2000)
    (tmp_path / "l.txt").write_text("\n".join(map(str, lengths)))
    runner = CliRunner()
    rows = {}
    for flags in ([], ["--cp-size", "8"]):
        res = runner.invoke(app, ["plan", str(tmp_path / "l.txt"), "-L", "2048", "--json", *flags])
        assert res.exit_code == 0, res.output
        rows[len(flags)] = json.loads(res.output)[0]
    assert rows[2]["packs"] > rows[0]["packs"]
    res = runner.invoke(app, ["plan", str(tmp_path / "l.txt"), "--cp-size", "0"])
    assert res.exit_code == 2 and "cp_size=0 is invalid" in res.output
