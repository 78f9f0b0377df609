"""Energon: the vlmpack TaskEncoders on real data, through get_train_dataset / get_savable_loader.

- offline packs written by ``vlmpack pack`` from the real demo set: every batch equals the
  collator's output on the same packs read with plain ``tarfile`` (Energon's PIL decoding gives
  the same pixels), and ``save_state_rank`` -> ``restore_state_rank`` in a new loader continues
  with exactly the same batches;
- online packing of the unpacked real demo WebDataset (``energon prepare``d as CrudeWebdataset):
  packs fit ``seq_len``, every sample's tokens equal ``family.encode``, and resume is exact too;
- ``on_bad_pack``: a real output with one pack whose recorded count is off and one whose image is
  cut, loaded through Energon: ``"skip"`` (default) drops exactly those packs with one log line
  each, ``"fatal"`` stops at the first with Energon's ``FatalSampleError`` naming it; a
  ``ConfigError`` (Energon's decoder switched on) is fatal under either policy; online packing
  skips / stops on an unpacked sample whose image is cut.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.energon")

from demo_data.packs import demo_packs  # noqa: E402
from megatron.energon import SampleDecoder, WorkerConfig, get_loader, get_savable_loader, get_train_dataset  # noqa: E402
from megatron.energon.errors import FatalSampleError  # noqa: E402

from vlmpack.energon.task_encoder import VlmpackOnlineTaskEncoder, VlmpackTaskEncoder  # noqa: E402
from vlmpack.packfmt import read_packs
from vlmpack.train import PackCollator  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
              pytest.mark.usefixtures("frozen_objects")]


def _loader(path, te, **kw):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=1)
    args = dict(batch_size=2, shuffle_buffer_size=8, max_samples_per_sequence=4, worker_config=wc,
                task_encoder=te) | kw
    return get_savable_loader(get_train_dataset(str(path), **args))


def _same(a: dict, b: dict) -> bool:
    keys = ("input_ids", "labels", "position_ids", "cu_seqlens", "pixel_values", "image_grid_thw")
    return a.get("__keys__") == b.get("__keys__") and a["sample_ids"] == b["sample_ids"] and all(
        (k not in a and k not in b) or torch.equal(a[k], b[k]) for k in keys)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _close(*loaders):
    """Stop the loaders' persistent worker processes now (torch's ``DataLoader`` keeps them in
    ``_iterator`` until it is collected; collected inside a later test's loader, each worker's join
    waited out its 5 s timeout: 20 s of this file's 31)."""
    for loader in loaders:
        it = getattr(loader, "_iterator", None)
        if it is not None:
            it._shutdown_workers()


def _check_resume(path, make_te, **kw):
    loader = _loader(path, make_te(), **kw)
    loader2 = _loader(path, make_te(), **kw)
    try:
        it = iter(loader)
        first = _take(it, 3)
        state = pickle.loads(pickle.dumps(loader.save_state_rank()))
        expected = _take(it, 3)
        loader2.restore_state_rank(state)
        got = _take(iter(loader2), 3)
    finally:
        _close(loader, loader2)
    assert all(_same(a, b) for a, b in zip(expected, got)), ([e["__keys__"] for e in expected],
                                                             [g["__keys__"] for g in got])
    return first + expected


@pytest.fixture(scope="module")
def packed(real_data, model_dir):
    return demo_packs(real_data, model_dir, seq_len=512, n_lines=300)


def test_offline_batches_equal_direct_collation_and_resume_exactly(packed, model_dir):
    batches = _check_resume(packed, lambda: VlmpackTaskEncoder(str(model_dir), position_layout=4))
    raw = {p["__key__"]: p for p in read_packs(packed)}
    direct = PackCollator(model_dir, position_layout=4)
    assert any("pixel_values" in b for b in batches)
    for b in batches:
        ref = direct.batch([raw[k] for k in b["__keys__"]])
        ref["__keys__"] = b["__keys__"]
        assert _same(b, ref)
        assert b["input_ids"].shape[1] == sum(json.loads(raw[k]["json"])["num_tokens"] for k in b["__keys__"])


def _prepare_crude(out: Path) -> None:
    energon = Path(sys.executable).with_name("energon")
    subprocess.run([str(energon), "prepare", str(out), "--non-interactive", "--split-ratio", "1,0,0",
                    "--sample-type", "CrudeWebdataset", "--no-progress"], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def crude_wds(real_data, tmp_path_factory):
    """One shard of the real unpacked demo WebDataset, prepared by the real ``energon prepare``."""
    out = tmp_path_factory.mktemp("crude")
    src = sorted((Path(real_data) / "wds").glob("*.tar"))[-1]
    shutil.copy(src, out / src.name)
    _prepare_crude(out)
    return out


def test_online_packing_energon(crude_wds, model_dir):
    seq_len = 1024

    def make_te():
        return VlmpackOnlineTaskEncoder(str(model_dir), seq_len=seq_len, rope_impl="numpy")

    batches = _check_resume(crude_wds, make_te, batch_size=1, packing_buffer_size=12)
    fam = make_te().collator.family
    multi = 0
    for b in batches:
        cu = b["cu_seqlens"].tolist()
        assert cu[-1] <= seq_len and b["input_ids"].shape[1] == cu[-1]
        multi += len(cu) > 2
        # the image-pad runs of each sample hold exactly its grids' features
        grids = b["image_grid_thw"].prod(-1) // 4 if "image_grid_thw" in b else torch.zeros(0)
        pads = int((b["input_ids"] == fam.image_token_id).sum())
        assert pads == int(grids.sum())
    assert multi > 0, "online packing put several samples into a pack"


def test_measure_item_equals_vlmpack_pack_counts(packed, model_dir):
    """The online count is the one ``vlmpack pack`` recorded, for every sample of the real packs."""
    from vlmpack.models import load_model
    from vlmpack.train.encode import read_pack
    from vlmpack.train.online import measure_item

    fam = load_model(str(model_dir))
    n = 0
    for raw in read_packs(packed):
        for item in read_pack(raw).items:
            assert measure_item(fam, item) == item.recorded_tokens, item.id
            n += 1
    assert n > 100


# ------------------------------------------------------------------------------ on_bad_pack
def _overwrite_member(shard: Path, name: str, change) -> None:
    """Replace tar member ``name``'s bytes in place by ``change(bytes)`` (same size: the tar and its
    .idx stay valid)."""
    with tarfile.open(shard) as tf:
        m = tf.getmember(name)
        data = tf.extractfile(m).read()
    new = change(data)
    assert len(new) == len(data) and new != data
    with open(shard, "r+b") as f:
        f.seek(m.offset_data)
        f.write(new)


def _cut(data: bytes) -> bytes:
    """An image that does not decode: its signature and header kept, the rest zeroed."""
    from vlmpack.errors import MediaDecodeError
    from vlmpack.train.encode import open_image

    out = data[:33] + b"\x00" * (len(data) - 33)
    with pytest.raises(MediaDecodeError):
        open_image(out)
    return out


@pytest.fixture(scope="module")
def bad_packs(packed, tmp_path_factory):
    """A copy of the real output where one pack records one token more than it holds (a digit of
    its ``num_tokens`` changed in place) and another pack's first image is cut: ``(out, mismatch
    key, undecodable key, all keys)``."""
    out = tmp_path_factory.mktemp("bad") / "packs"
    shutil.copytree(packed, out)
    (shard,) = sorted(out.glob("*.tar"))
    raw = list(read_packs(out))
    with_img = [p for p in raw if any(k.startswith("img") for k in p)]
    text = [p for p in raw if not any(k.startswith("img") for k in p)]
    mismatch, undecodable = text[len(text) // 2]["__key__"], with_img[len(with_img) // 2]["__key__"]

    def one_more(data: bytes) -> bytes:
        m = re.search(rb'"num_tokens":(\d+),"samples"', data)
        n = int(m.group(1))
        assert len(str(n + 1)) == len(str(n))
        return data[: m.start(1)] + str(n + 1).encode() + data[m.end(1):]

    _overwrite_member(shard, f"{mismatch}.json", one_more)
    img = sorted(k for p in raw if p["__key__"] == undecodable for k in p if k.startswith("img0."))[0]
    _overwrite_member(shard, f"{undecodable}.{img}", _cut)
    return out, mismatch, undecodable, [p["__key__"] for p in raw]


def _epoch_keys(path, te, **kw) -> list[str]:
    """One epoch, in shard order, in this process (``num_workers=0``: log records reach caplog)."""
    args = dict(batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0), task_encoder=te) | kw
    return [k for b in get_loader(get_train_dataset(str(path), **args)) for k in b["__keys__"]]


def _logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vlmpack.energon.task_encoder"]


def test_on_bad_pack_skip_drops_exactly_the_bad_packs_with_one_line_each(bad_packs, model_dir, caplog):
    out, mismatch, undecodable, keys = bad_packs
    with caplog.at_level("WARNING", logger="vlmpack.energon.task_encoder"):
        got = _epoch_keys(out, VlmpackTaskEncoder(str(model_dir)))  # the default is "skip"
    assert got == [k for k in keys if k not in (mismatch, undecodable)]
    logged = _logged(caplog)
    assert len(logged) == 2 and all("\n" not in line for line in logged)
    by_key = {k: next(line for line in logged if f"pack {k!r}" in line) for k in (mismatch, undecodable)}
    assert "(PackMismatchError)" in by_key[mismatch] and "records" in by_key[mismatch]
    assert "(MediaDecodeError)" in by_key[undecodable] and "does not decode" in by_key[undecodable]


def test_on_bad_pack_skip_stops_after_tolerance_skips_in_a_row(bad_packs, model_dir):
    """Skips are not counted by Energon: the encoder counts them (here: a tolerance of 1)."""
    out, mismatch, undecodable, keys = bad_packs
    first = next(k for k in keys if k in (mismatch, undecodable))
    with pytest.raises(FatalSampleError, match=f"1 packs or samples skipped in a row, the last pack {first!r}"):
        _epoch_keys(out, VlmpackTaskEncoder(str(model_dir), bad_pack_tolerance=1))


def test_on_bad_pack_fatal_stops_at_the_first_bad_pack(bad_packs, model_dir):
    out, mismatch, undecodable, keys = bad_packs
    first = next(k for k in keys if k in (mismatch, undecodable))
    kind = "PackMismatchError" if first == mismatch else "MediaDecodeError"
    with pytest.raises(FatalSampleError) as e:
        _epoch_keys(out, VlmpackTaskEncoder(str(model_dir), on_bad_pack="fatal"))
    msg = str(e.value)
    assert f"pack {first!r} cannot be trained on (on_bad_pack='fatal'): {kind}" in msg, msg
    assert type(e.value.__context__) is FatalSampleError and type(e.value.__context__.__cause__).__name__ == kind


def test_config_error_is_fatal_under_skip(packed, model_dir):
    """Energon's decoder switched on: images reach the collator as tensors, a ConfigError for every
    pack, so the first one stops training even with ``on_bad_pack="skip"``."""
    te = VlmpackTaskEncoder(str(model_dir))
    te.decoder = SampleDecoder()
    with pytest.raises(FatalSampleError, match="ConfigError: .* media of type Tensor cannot be used"):
        _epoch_keys(packed, te)


def test_bad_on_bad_pack_is_a_config_error(model_dir):
    from vlmpack.errors import ConfigError

    with pytest.raises(ConfigError, match="on_bad_pack"):
        VlmpackTaskEncoder(str(model_dir), on_bad_pack="ignore")
    with pytest.raises(ConfigError, match="bad_pack_tolerance"):
        VlmpackTaskEncoder(str(model_dir), bad_pack_tolerance=-1)


@pytest.fixture(scope="module")
def crude_wds_cut(real_data, tmp_path_factory):
    """The crude shard with its first sample's image cut in place: ``(dir, key of that sample)``."""
    out = tmp_path_factory.mktemp("crude_cut")
    src = sorted((Path(real_data) / "wds").glob("*.tar"))[-1]
    shutil.copy(src, out / src.name)
    with tarfile.open(out / src.name) as tf:
        first = next(m.name for m in tf.getmembers() if not m.name.endswith(".json"))
    _overwrite_member(out / src.name, first, _cut)
    _prepare_crude(out)
    return out, first.split(".", 1)[0]


def test_online_on_bad_pack_skips_or_stops_on_an_undecodable_image(crude_wds_cut, model_dir, caplog):
    out, key = crude_wds_cut

    def make_te(**kw):
        return VlmpackOnlineTaskEncoder(str(model_dir), seq_len=1024, rope_impl="numpy", **kw)

    with pytest.raises(FatalSampleError, match=f"sample {key!r} cannot be trained on .*MediaDecodeError"):
        _epoch_keys(out, make_te(on_bad_pack="fatal"), packing_buffer_size=8)
    args = dict(batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None, packing_buffer_size=8,
                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0), task_encoder=make_te())
    with caplog.at_level("WARNING", logger="vlmpack.energon.task_encoder"):
        it = iter(get_loader(get_train_dataset(str(out), **args)))
        packs = [k for b in _take(it, 3) for k in b["__keys__"]]
    samples = [s for k in packs for s in k.split("+")]
    assert key not in samples and len(samples) > 3
    logged = _logged(caplog)
    assert any(f"sample {key!r}" in line and "(MediaDecodeError)" in line for line in logged), logged
    # the real shard also holds samples whose JSON names image parts that are not there: skipped
    # as vlmpack pack rejects them, one line each
    assert all("(MediaDecodeError)" in line or "(media_missing)" in line for line in logged), logged


def test_online_rejections_are_skipped_even_when_fatal(crude_wds, model_dir, caplog):
    """What ``vlmpack pack`` rejects (here: JSONs naming image parts the real shard lacks) is not a
    bad pack: skipped with its reason code under ``on_bad_pack="fatal"`` too, for a whole epoch."""
    te = VlmpackOnlineTaskEncoder(str(model_dir), seq_len=1024, rope_impl="numpy", on_bad_pack="fatal")
    with caplog.at_level("WARNING", logger="vlmpack.energon.task_encoder"):
        packs = _epoch_keys(crude_wds, te, packing_buffer_size=8)
    logged = _logged(caplog)
    missing = {re.search(r"sample '([^']+)'", line).group(1) for line in logged}
    assert missing and all("(media_missing)" in line and "not in the shard" in line for line in logged), logged
    samples = {s for k in packs for s in k.split("+")}
    assert len(samples) > 100 and not missing & samples
