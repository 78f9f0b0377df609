"""Defence in depth (issue 19, items 6 and 10), on a real pretokenized output of the demo set.

- The writer refuses a pack whose samples' recorded counts sum above ``seq_len``
  (:class:`vlmpack.errors.InternalError`, exit 70), written from a real run's records by a
  :class:`ShardTask` whose one pack holds too many of them; the same pack at its own length is written.
- The collator (:class:`vlmpack.train.PackCollator`) raises :class:`PackTooLongError` for a pack over
  the ``seq_len`` it records or the collator's, naming the likely causes, and :class:`TokenIdError`
  for pretokenized ids outside ``[0, len(tokenizer))``; both are ``PackError``\\ s, so the Energon task
  encoder skips or stops on them by ``on_bad_pack``.
- ``verify`` compares every ``input_ids.npy`` with the samples' messages encoded again: a clean
  output passes, one answer token replaced in place (same length, resealed so ``check`` passes) and
  an id beyond the vocabulary are ``problem`` lines naming the shard, the pack and the sample.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from demo_data.packs import demo_packs
from test_check import _edit_packs

from vlmpack.check import check_output
from vlmpack.errors import InternalError, PackError, PackTooLongError, TokenIdError, VlmpackError
from vlmpack.models import load_model
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.pack.write import MEMBER_COLUMNS, ShardTask, member_rows, write_shard
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator
from vlmpack.verify import verify_output

SEQ_LEN = 2048
CAUSES = ("count cache", "edited", "model_dir other than")


@pytest.fixture(scope="module")
def pre(real_data, model_dir) -> Path:
    """200 demo records packed at L = 2048 with ``--pretokenize``."""
    return demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=200, group_by_kind=False, pretokenize=True)


@pytest.fixture(scope="module")
def collator(model_dir) -> PackCollator:
    return PackCollator(str(model_dir))


def _ids(pack: dict) -> np.ndarray:
    return np.load(io.BytesIO(pack["input_ids.npy"]), allow_pickle=False)


def _npy(ids: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, ids.astype("<i4"), allow_pickle=False)
    return buf.getvalue()


def _edit_first_ids(out: Path, change) -> tuple[str, str, str]:
    """``change(ids, obj) -> (ids, sample id)`` on the first pack of the first shard, resealed (sha256,
    ``.tar.idx``, report, markers), so only reading the ids can find it; returns (shard, pack key,
    sample id)."""
    shard = sorted(p.name for p in out.glob("*.tar"))[0]
    done = {}

    def edit(packs):
        key, parts = packs[0]
        parts = dict(parts)
        ids, sid = change(_ids(parts).copy(), json.loads(parts["json"]))
        parts["input_ids.npy"] = _npy(ids)
        done.update(key=key, sid=sid)
        return [(key, list(parts.items())), *packs[1:]]

    _edit_packs(out, shard, edit)
    return shard, done["key"], done["sid"]


# ------------------------------------------------------------------------------------- writer (item 6)
def test_writer_refuses_a_pack_whose_counts_sum_above_seq_len(pre, real_data, tmp_path):
    """A plan that puts more of the run's real records in one pack than L holds (what a hand-edited
    count cache makes the planner do) stops the shard with an internal error naming the pack."""
    run = pre / RUN_DIR
    manifest = pq.read_table(run / "manifest.parquet", columns=list(MEMBER_COLUMNS))
    tokens = manifest.column("num_tokens").to_numpy().astype(np.int64)
    k = int(np.searchsorted(np.cumsum(tokens), SEQ_LEN, side="right")) + 1  # the first k records exceed L
    total = int(tokens[:k].sum())
    assert total > SEQ_LEN
    rows = member_rows(manifest, np.arange(k))

    def task(seq_len: int, out: Path) -> ShardTask:
        out.mkdir()
        return ShardTask(0, "shard-000000.tar", 7, rows, np.array([0, k], dtype=np.int64), seq_len,
                         str(out), str(run / "records"), media_root=str(real_data))

    with pytest.raises(InternalError) as e:
        write_shard(task(SEQ_LEN, tmp_path / "refused"))
    msg = str(e.value)
    assert "pack pack000000007" in msg and f"{total:,} tokens" in msg and f"seq_len {SEQ_LEN:,}" in msg, msg
    assert not isinstance(e.value, VlmpackError)  # vlmpack.cli.main: an internal error, exit 70
    assert not (tmp_path / "refused" / "shard-000000.tar").exists()
    res = write_shard(task(total, tmp_path / "fits"))  # the same records at their own length: written
    assert (res.num_packs, res.num_samples, res.num_tokens) == (1, k, total)


# ------------------------------------------------------------------------------------- collator
def test_collator_refuses_a_pack_longer_than_seq_len(pre, model_dir, collator):
    pack = next(p for p in read_packs(pre) if json.loads(p["json"])["num_tokens"] > 100)
    n = json.loads(pack["json"])["num_tokens"]
    assert collator(pack)["input_ids"].shape == (1, n)  # the clean pack, default seq_len: as before
    with pytest.raises(PackTooLongError) as e:
        PackCollator(str(model_dir), seq_len=n - 1)(pack)
    msg = str(e.value)
    assert f"pack {pack['__key__']!r}" in msg and f"{n:,} tokens, more than the collator's seq_len {n - 1:,}" in msg
    assert all(c in msg for c in CAUSES), msg
    shrunk = {**pack, "json": json.dumps({**json.loads(pack["json"]), "seq_len": n - 1}).encode()}
    with pytest.raises(PackTooLongError, match=f"more than its recorded seq_len {n - 1:,}"):
        collator(shrunk)


def test_collator_refuses_a_pack_that_encodes_longer_than_its_records(real_data, model_dir):
    """Counts lowered by hand (a plain pack, its samples and seq_len halved): with
    ``check_num_tokens=False`` nothing compares the counts, the encoded length still may not pass."""
    plain = demo_packs(real_data, model_dir, seq_len=SEQ_LEN, n_lines=200, group_by_kind=False)
    pack = next(p for p in read_packs(plain) if json.loads(p["json"])["num_tokens"] > 100)
    obj = json.loads(pack["json"])
    n = obj["num_tokens"]
    for s in obj["samples"]:
        s["num_tokens"] //= 2
    obj["num_tokens"] = obj["seq_len"] = sum(s["num_tokens"] for s in obj["samples"])
    with pytest.raises(PackTooLongError) as e:
        PackCollator(str(model_dir), check_num_tokens=False)({**pack, "json": json.dumps(obj).encode()})
    assert f"encodes to {n:,} tokens, more than its recorded seq_len {obj['seq_len']:,}" in str(e.value)
    assert all(c in str(e.value) for c in CAUSES)


def test_collator_refuses_ids_outside_the_vocabulary(pre, model_dir, collator):
    vocab = len(load_model(str(model_dir)).tokenizer)
    pack = next(iter(read_packs(pre)))
    for bad in (vocab, -1):
        ids = _ids(pack).copy()
        ids[3] = bad
        with pytest.raises(TokenIdError) as e:
            collator({**pack, "input_ids.npy": _npy(ids)})
        msg = str(e.value)
        assert f"pack {pack['__key__']!r}" in msg and f"[0, {vocab:,}), the first {bad} at token 3" in msg, msg
    ids = _ids(pack).copy()
    ids[3] = vocab - 1  # the last id is in the vocabulary (a wrong id, but a valid one)
    assert collator({**pack, "input_ids.npy": _npy(ids)})["input_ids"][0, 3] == vocab - 1
    with pytest.raises(TokenIdError, match="not 1-D integer token ids"):
        collator({**pack, "input_ids.npy": _npy(ids).replace(b"'<i4'", b"'<f4'")})


def test_new_errors_follow_on_bad_pack(pre, model_dir):
    """PackTooLongError / TokenIdError are PackErrors: ``skip`` raises Energon's SkipSample, ``fatal``
    its FatalSampleError naming the pack and the class."""
    pytest.importorskip("megatron.energon")
    from megatron.energon import SkipSample
    from megatron.energon.errors import FatalSampleError

    from vlmpack.energon.task_encoder import VlmpackTaskEncoder

    assert issubclass(PackTooLongError, PackError) and issubclass(TokenIdError, PackError)
    pack = next(iter(read_packs(pre)))
    n = json.loads(pack["json"])["num_tokens"]
    for policy, raised in (("skip", SkipSample), ("fatal", FatalSampleError)):
        te = VlmpackTaskEncoder(str(model_dir), on_bad_pack=policy, seq_len=n - 1)
        with pytest.raises(raised) as e:
            te._guarded("encode_sample", f"pack {pack['__key__']!r}", te.collator.encode, pack)
        if policy == "fatal":
            assert f"pack {pack['__key__']!r} cannot be trained on" in str(e.value)
            assert "PackTooLongError" in str(e.value)


# ------------------------------------------------------------------------------------- verify (item 10)
def test_clean_pretokenized_output_verifies(pre):
    res = verify_output(pre, workers=1, decode=True)
    assert res["problems"] == [] and res["recounted_shards"] >= 1


def test_a_replaced_answer_token_is_found_by_verify(pre, model_dir, collator, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(pre, out)
    family = load_model(str(model_dir))

    def replace(ids, obj):  # one trained-on token of the first sample -> another id, same length
        first = obj["samples"][0]
        at = int(np.flatnonzero(family.label_mask(ids[:first["num_tokens"]].astype(np.int64)))[0])
        ids[at] = (ids[at] + 1) % family.tokenizer.vocab_size  # another ordinary token
        replace.at = at
        return ids, first["id"]

    shard, key, sid = _edit_first_ids(out, replace)
    assert check_output(out, num_workers=0)["problems"] == []  # sealed: the gate cannot see it
    problems = verify_output(out, workers=1)["problems"]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{shard} {key} sample {sid!r}: input_ids.npy differs from its recorded messages")
    assert f"first at token {replace.at}:" in problems[0]


def test_an_id_beyond_the_vocabulary_is_found_by_verify(pre, model_dir, collator, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(pre, out)
    vocab = len(load_model(str(model_dir)).tokenizer)

    def beyond(ids, obj):
        ids[5] = vocab + 1000
        return ids, obj["samples"][0]["id"]

    shard, key, sid = _edit_first_ids(out, beyond)
    assert check_output(out, num_workers=0)["problems"] == []
    problems = verify_output(out, workers=1)["problems"]
    assert any(p.startswith(f"{shard} {key}: input_ids.npy holds 1 id(s) outside the tokenizer's vocabulary "
                            f"[0, {vocab:,}), the first {vocab + 1000} at token 5") for p in problems), problems
    assert any(f"sample {sid!r}: input_ids.npy differs" in p for p in problems), problems
    pack = next(p for p in read_packs(out) if p["__key__"] == key)
    with pytest.raises(TokenIdError, match=f"pack {key!r}"):
        collator(pack)
