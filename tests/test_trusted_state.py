"""State is data, never code; counts follow content, not size + mtime (issue 19, items 1 and 8).

On the real demo set and the real Qwen tokenizer:

- pickles planted in the run directory and the count cache (under the old ``*.result.pkl`` /
  ``figures.pkl`` names and in place of every new state file) are never executed: the run counts
  again and ends with the same shard bytes, and the file the pickle would create does not exist;
- a same-length edit of a cached records part file, or an edited sealed file, is seen (checksums)
  and counted again, so a new output from the cache holds the real text;
- an input file or an image replaced in place with the same size and mtime gets other counts
  (content sha256), and one replaced between counting and writing becomes a rejection with a reason
  (``media_changed``; a symlink out of ``--media-root``: ``media_outside_root``), never other bytes;
- hypothesis: a sealed JSON file, a saved count result and its Arrow/part files read back equal,
  and any changed byte makes them count as missing (or read back the same object).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from hostile_corpus import image_records_in, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.fsio import atomic_write, read_sealed_json, sealed_json_bytes
from vlmpack.media import fingerprint as fpmod
from vlmpack.pack import pipeline
from vlmpack.pack.count_task import MeasureResult, arrays_path, media_files_sha256, part_path, result_path
from vlmpack.pack.media_tokens import TOKEN_COLUMNS
from vlmpack.pack.pipeline import run_pack
from vlmpack.pack.results import read_result, save_result
from vlmpack.packfmt import read_packs
from vlmpack.records import Locator, ReadStats, Rejection

pytestmark = pytest.mark.slow


def _shards(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar*"))}


def _args(inp: Path, root: Path, model_dir: Path, out: Path, *extra) -> list:
    return ["pack", "--input", inp, "--media-root", root, "--model", model_dir, "--seq-len", 8192, "--output", out,
            "--no-progress", "--workers", 1, *extra]


@pytest.fixture(scope="module")
def small(tmp_path_factory, real_data) -> Path:
    """The first 300 records of the demo set: one count task, images and text."""
    path = tmp_path_factory.mktemp("small") / "small.jsonl"
    with open(real_data / "real_sft.jsonl", "rb") as f:
        path.write_bytes(b"".join(f.readline() for _ in range(300)))
    return path


class _Touch:
    """Unpickling this creates ``path`` (what a planted pickle could do: run any code)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def _cache_store(cache: Path) -> Path:
    # load/: the model load recipes, figures/: the report PNGs
    stores = [p for p in cache.iterdir() if p.is_dir() and p.name not in ("load", "figures")]
    assert len(stores) == 1
    return stores[0]


def test_planted_pickles_are_never_executed(tmp_path, small, real_data, model_dir):
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = _args(small, real_data, model_dir, out, "--cache-dir", cache)
    assert run_cli(args).returncode == 0
    want = _shards(out)
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Touch(marker))
    assert not marker.exists()
    pickle.loads(evil)  # the payload works: loading it creates the file
    assert marker.exists()
    marker.unlink()
    run, store = out / ".vlmpack", _cache_store(cache)
    planted = [run / "records" / "part-000000.result.pkl", run / "figures.pkl", store / "part-000000.result.pkl",
               run / "records" / "part-000000.result.json", store / "part-000000.arrow", run / "figures.json",
               run / "stages.json", run / "plan.npz", run / "outputs.json", next((run / "shards").glob("*.json"))]
    for p in planted:
        p.write_bytes(evil)
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    assert "do not match their checksums or cannot be read; counting it again" in proc.stderr
    assert _shards(out) == want and not marker.exists()
    report = json.loads((out / "report.json").read_text())
    assert report["reused"]["count_tasks_reused"] == 0 and report["reused"]["plan_reused"] is False
    # a new output from the cache whose pickles are still there: the same bytes, nothing executed
    (store / "part-000000.result.pkl").write_bytes(evil)
    proc = run_cli(_args(small, real_data, model_dir, tmp_path / "new", "--cache-dir", cache))
    assert proc.returncode == 0, proc.stderr
    assert _shards(tmp_path / "new") == want and not marker.exists()
    assert json.loads((tmp_path / "new" / "report.json").read_text())["reused"]["count_tasks_from_cache"] == 1


def test_same_length_edit_of_a_cached_text_is_counted_again(tmp_path, small, real_data, model_dir):
    cache = tmp_path / "cache"
    assert run_cli(_args(small, real_data, model_dir, tmp_path / "a", "--cache-dir", cache)).returncode == 0
    part = _cache_store(cache) / "part-000000.jsonl"
    data = bytearray(part.read_bytes())
    at = data.index(b'"text":"') + len(b'"text":"')
    data[at] = ord("Q") if data[at] != ord("Q") else ord("R")  # one letter of the first text: same length
    with open(part, "r+b") as f:  # in place, as an editor or a bit flip would
        f.write(data)
    proc = run_cli(_args(small, real_data, model_dir, tmp_path / "b", "--cache-dir", cache))
    assert proc.returncode == 0, proc.stderr
    assert "do not match their checksums" in proc.stderr
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["reused"]["count_tasks_from_cache"] == 0 and report["reused"]["count_tasks"] == 1
    assert _shards(tmp_path / "b") == _shards(tmp_path / "a")  # the real text, not the edited one
    assert part.read_bytes() != bytes(data)  # the cache entry was counted again and published


def test_input_replaced_in_place_with_the_same_size_and_mtime_is_counted_again(tmp_path, small, real_data,
                                                                               model_dir):
    inp = tmp_path / "in.jsonl"
    shutil.copyfile(small, inp)
    cache = tmp_path / "cache"
    kw = dict(media_root=str(real_data), model=str(model_dir), seq_len=8192, workers=1, progress=False,
              cache_dir=str(cache))
    run_pack(load_config(input=[str(inp)], output=str(tmp_path / "a"), **kw))
    before = _shards(tmp_path / "a")
    st0 = inp.stat()
    data = inp.read_bytes()
    assert b" the " in data
    inp.write_bytes(data.replace(b" the ", b" thy ", 1))  # one word of one text: the same size
    os.utime(inp, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    assert (inp.stat().st_size, inp.stat().st_mtime_ns) == (st0.st_size, st0.st_mtime_ns)
    report = run_pack(load_config(input=[str(inp)], output=str(tmp_path / "a"), **kw))  # a resume of the same OUT
    assert report["reused"]["count_tasks_reused"] == 0
    after = _shards(tmp_path / "a")
    assert after != before
    fresh = run_pack(load_config(input=[str(inp)], output=str(tmp_path / "b"), **{**kw, "cache_dir": "off"}))
    assert fresh["reused"]["count_tasks_reused"] == 0 and _shards(tmp_path / "b") == after


def _same_size_pair(real_data: Path) -> tuple[Path, Path]:
    """Two real PNGs of the demo set with the same byte size and other pixel sizes (other token counts)."""
    from PIL import Image

    by_size: dict[int, list[Path]] = {}
    for p in sorted((real_data / "images").rglob("*.png")):
        if "broken" not in str(p):
            by_size.setdefault(p.stat().st_size, []).append(p)
    for _, paths in sorted(by_size.items()):
        sized = {}
        for p in paths:
            with Image.open(p) as im:
                if im.width * im.height > 20000:
                    sized.setdefault(im.size, p)
        if len(sized) > 1:
            a, b = list(sized.values())[:2]
            return a, b
    raise AssertionError("no two demo images of the same byte size and other pixel sizes")


@pytest.fixture
def root(tmp_path, real_data) -> tuple[Path, Path, Path, Path]:
    """A media root with 20 real image records; the first one's image is ``target``, a copy of image
    ``a``; ``b`` is another real image of the same byte size. Returns (root, input, target, b)."""
    a, b = _same_size_pair(real_data)
    root = tmp_path / "root"
    recs = image_records_in(root, real_data, 150)
    target = root / recs[0]["images"][0]
    shutil.copyfile(a, target)
    os.utime(target, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    (root / "in.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return root, root / "in.jsonl", target, b


def _replace_in_place(target: Path, new: Path) -> None:
    """``target`` gets the bytes of ``new`` (same size) and its old mtime back."""
    st0 = target.stat()
    assert new.stat().st_size == st0.st_size and new.read_bytes() != target.read_bytes()
    with open(target, "r+b") as f:
        f.write(new.read_bytes())
    os.utime(target, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st0.st_size, st0.st_mtime_ns)


def _media_tokens_of(out: Path, data: bytes) -> list[int]:
    """num_tokens of every packed image whose bytes are ``data``."""
    found = []
    for raw in read_packs(out):
        obj = json.loads(raw["json"])
        for s in obj["samples"]:
            found += [m["num_tokens"] for m in s["media"] if raw.get(m["part"]) == data]
    return found


def test_image_replaced_in_place_with_the_same_size_and_mtime_is_counted_again(root, model_dir):
    from vlmpack.train import PackCollator

    root, inp, target, b = root
    args = _args(inp, root, model_dir, root / "out")
    assert run_cli(args).returncode == 0
    old = _media_tokens_of(root / "out", target.read_bytes())
    _replace_in_place(target, b)
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    assert "changed since it was counted; counting task 0 again" in proc.stderr
    new = _media_tokens_of(root / "out", b.read_bytes())
    assert old and new and old != new  # the new image's own count, not the old one's
    assert run_cli(["check", root / "out"]).returncode == 0
    collator = PackCollator(model_dir, mrope=False)
    for raw in read_packs(root / "out"):
        collator.encode(raw)  # PackMismatchError if a count were stale


@pytest.mark.parametrize("how", ["bytes", "symlink_out_of_root"])
def test_media_changed_between_count_and_write_is_a_rejection(how, root, model_dir, tmp_path, monkeypatch):
    root, inp, target, b = root
    counted = target.read_bytes()
    real_write = pipeline._write

    def write_after_a_change(*a, **k):
        if how == "bytes":
            _replace_in_place(target, b)
        else:  # the same bytes, but the path now leads out of --media-root
            outside = tmp_path / "outside.png"
            outside.write_bytes(counted)
            target.unlink()
            target.symlink_to(outside)
        return real_write(*a, **k)

    monkeypatch.setattr(pipeline, "_write", write_after_a_change)
    from test_report import _figure_spy

    draws = _figure_spy(monkeypatch)
    cfg = load_config(input=[str(inp)], media_root=str(root), model=str(model_dir), output=str(root / "out"),
                      seq_len=8192, workers=1, progress=False)
    users = [i + 1 for i, line in enumerate(inp.read_text().splitlines())
             if target.relative_to(root).as_posix() in json.loads(line)["images"]]  # 1-based lines
    report = run_pack(cfg)
    reason = {"bytes": "media_changed", "symlink_out_of_root": "media_outside_root"}[how]
    assert report["rejected_by_reason"] == {reason: len(users)} and report["identity_holds"]
    assert report["samples_packed"] == report["records_read"] - len(users)
    rejects = [json.loads(x) for x in (root / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["reason"], r["file"], r["line"]) for r in rejects] == [(reason, str(inp), n) for n in users]
    assert ("changed after it was counted" if how == "bytes" else "outside media root") in rejects[0]["detail"]
    packed = [m for raw in read_packs(root / "out") for k, m in raw.items() if k.startswith("img")]
    assert b.read_bytes() not in packed and counted not in packed  # the sample is in no pack
    assert report["sources"][0]["samples_packed"] == report["samples_packed"]
    # the figures drawn during the write stage did not know of the rejection: drawn again, with it
    assert [(name, d.reasons.get(reason, 0)) for name, d, _ in draws] == [("vlmpack-figures", 0),
                                                                          ("MainThread", len(users))]
    proc = run_cli(["check", root / "out"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monkeypatch.setattr(pipeline, "_write", real_write)
    again = run_pack(cfg)  # the next run counts the media again: the changed image is packed / rejected early
    if how == "bytes":
        assert again["rejected"] == 0 and again["samples_packed"] == again["records_read"]
        assert _media_tokens_of(root / "out", b.read_bytes())
    else:
        assert again["rejected_by_reason"] == {"media_outside_root": len(users)}


def test_fingerprint_trusts_an_unchanged_stat_and_hashes_otherwise(tmp_path, real_data, monkeypatch):
    a, b = _same_size_pair(real_data)
    path = tmp_path / "x.png"
    shutil.copyfile(a, path)
    fresh = fpmod.fingerprint(str(path))
    assert fresh.stat is None  # written just now: racy, hashed again at every check
    assert fresh.sha256 == hashlib.sha256(a.read_bytes()).hexdigest() and fresh.nbytes == a.stat().st_size
    monkeypatch.setattr(fpmod, "RACY_NS", -10**12)  # as if it had been written long ago
    fp = fpmod.fingerprint(str(path))
    assert fp.stat is not None and fpmod.Fingerprint.from_json(json.loads(json.dumps(fp.to_json()))) == fp
    calls = []
    real = fpmod.item_sha256
    monkeypatch.setattr(fpmod, "item_sha256", lambda ref: calls.append(ref) or real(ref))
    assert fpmod.unchanged(fp) and calls == []  # the stat shortcut: no byte read
    os.utime(path)  # touched, same bytes: hashed again, still unchanged
    assert fpmod.unchanged(fp) and calls == [str(path)]
    _replace_in_place(path, b)
    assert not fpmod.unchanged(fp)
    path.unlink()
    assert not fpmod.unchanged(fp)
    inline = "data:image/png;base64," + __import__("base64").b64encode(a.read_bytes()).decode()
    assert fpmod.fingerprint(inline).sha256 == fresh.sha256 and fpmod.unchanged(fpmod.fingerprint(inline))


# ------------------------------------------------------------------------------------------ hypothesis
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                     max_leaves=20)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "checksum"), _json, max_size=5),
       pos=st.integers(0, 10**6), new=st.integers(0, 255))
def test_sealed_json_reads_back_and_sees_any_edit(tmp_path, obj, pos, new):
    path = tmp_path / "s.json"
    raw = sealed_json_bytes(obj, indent=1)
    atomic_write(path, raw)
    assert read_sealed_json(path) == obj
    data = bytearray(raw)
    data[pos % len(data)] = new
    path.write_bytes(bytes(data))
    assert read_sealed_json(path) in (None, obj)  # an edit either breaks the seal or changes nothing read


def _result(n: int, rng: np.random.Generator, index: int) -> MeasureResult:
    ids = [f"id-{rng.integers(0, 10**6)}-{i}\u00e9" for i in range(n)]
    arr = lambda dt, hi: rng.integers(0, hi, n).astype(dt)  # noqa: E731
    media = [fpmod.Fingerprint(f"/m/{i}.png", int(rng.integers(1, 10**6)), hashlib.sha256(bytes([i])).hexdigest(),
                               None if i % 2 else (1, 2, 3, 4)) for i in range(int(rng.integers(0, 4)))]
    rej = [Rejection(Locator("in\udcff.jsonl", 3, 10, None, "line"), "invalid_json", "bad \u2603", None)]
    return MeasureResult(index=index, file_idx=1, ids=ids, num_tokens=arr(np.int32, 9000),
                         media_tokens=arr(np.int32, 900), num_media=arr(np.int32, 5), kind=arr(np.int8, 3),
                         media_bytes=arr(np.int64, 10**9), line=arr(np.int64, 10**6), offset=arr(np.int64, 10**9),
                         rec_offset=arr(np.int64, 10**6), rec_len=arr(np.int64, 10**4), id_kind=arr(np.int8, 3),
                         label_tokens=arr(np.int32, 900),
                         kind_tokens={c: arr(np.int32, 900) for c in TOKEN_COLUMNS.values()},
                         id_hash=arr(np.uint64, 2**62), media_files=media,
                         media_sha256=media_files_sha256(media), rejections=rej,
                         stats=ReadStats(n + 2, 1, n + 1, {"invalid_json": 1}), part_sha256="", part_size=0,
                         bound_counted_max=int(rng.integers(0, 10**4)), bound_skipped_min=int(rng.integers(0, 10**9)))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 50), seed=st.integers(0, 2**32 - 1), which=st.sampled_from(["part", "arrays", "result"]),
       pos=st.integers(0, 10**7), flip=st.integers(1, 255))
def test_saved_count_results_read_back_and_any_changed_byte_is_refused(tmp_path, n, seed, which, pos, flip):
    store = tmp_path / f"s{seed}-{n}"
    store.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    r = _result(n, rng, 7)
    part = b"".join(b'{"x":%d}\n["%s"]\n' % (i, b"0" * 64) for i in range(n)) or b""
    atomic_write(part_path(store, 7), part)
    r.part_sha256, r.part_size = hashlib.sha256(part).hexdigest(), len(part)
    save_result(store, r)
    back = read_result(store, 7, 1)
    assert back is not None and back.ids_array().to_pylist() == r.ids
    for name in ("num_tokens", "media_tokens", "num_media", "kind", "media_bytes", "line", "offset", "rec_offset",
                 "rec_len", "id_kind", "label_tokens", "id_hash", *TOKEN_COLUMNS.values()):
        got, want = ((getattr(back, name), getattr(r, name)) if name not in TOKEN_COLUMNS.values()
                     else (back.kind_tokens[name], r.kind_tokens[name]))
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert (back.bound_counted_max, back.bound_skipped_min) == (r.bound_counted_max, r.bound_skipped_min)
    assert (back.media_files, back.rejections, back.stats) == (r.media_files, r.rejections, r.stats)
    assert read_result(store, 8, 1) is None and read_result(store, 7, 0) is None  # another task's files
    path = {"part": part_path(store, 7), "arrays": arrays_path(store, 7), "result": result_path(store, 7)}[which]
    data = bytearray(path.read_bytes())
    if not data:
        return
    data[pos % len(data)] ^= flip
    path.write_bytes(bytes(data))
    again = read_result(store, 7, 1)
    if which == "result":  # JSON: a changed byte breaks the seal, or the JSON, or changes nothing read
        assert again is None or (again.media_files, again.rejections) == (r.media_files, r.rejections)
    else:
        assert again is None


def test_no_pickle_is_loaded_from_a_file_anywhere_in_vlmpack():
    """The package never unpickles a file (in-memory IPC between worker processes is not a file)."""
    src = Path(__file__).resolve().parents[1] / "src" / "vlmpack"
    for py in src.rglob("*.py"):
        text = py.read_text(encoding="utf-8")
        assert "pickle.load" not in text and "import pickle" not in text, py
        assert "allow_pickle=True" not in text, py
