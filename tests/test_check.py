"""``vlmpack check`` as a gate: a real output passes; every kind of damage gives ``problem:`` lines.

One real output of the demo set (first 300 records, L = 2048 so that a few samples are dropped as
overlong, 16 packs per shard so that there are several shards) is made once per module; each case
copies it and damages it. "Sealed" damage also recomputes everything a checksum could catch
(sha256, sizes, ``.tar.idx``, ``.info.json``, report totals, run-dir markers, ``hashes.json``), so
that only the comparison with the run record (the manifest, completeness, each sample's content
sha256 recorded at pack time) or Energon itself can find it.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from cli_runner import run_cli

from vlmpack.check import check_output
from vlmpack.pack.seal import write_hashes
from vlmpack.packfmt import ShardPacks, tarinfo

SHARD = "shard-000001.tar"


@pytest.fixture(scope="module")
def packed(tmp_path_factory, real_data, model_dir) -> Path:
    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    tmp = tmp_path_factory.mktemp("check")
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:300]
    (tmp / "sub.jsonl").write_text("".join(lines), encoding="utf-8")
    out = tmp / "out"
    report = run_pack(load_config(input=[str(tmp / "sub.jsonl")], media_root=str(real_data), model=str(model_dir),
                                  seq_len=2048, output=str(out), workers=1, progress=False, max_packs_per_shard=16))
    assert report["shards"] >= 3 and report["dropped_overlong"] > 0
    return out


@pytest.fixture
def out(packed, tmp_path) -> Path:
    dst = tmp_path / "out"
    shutil.copytree(packed, dst)
    return dst


# ------------------------------------------------------------------------------------------- helpers
def _read_tar(path: Path) -> list[tuple[str, list[tuple[str, bytes]]]]:
    """[(key, [(part, bytes), ...]), ...] in tar order (vlmpack.packfmt.ShardPacks)."""
    return [(p.key, list(p.parts.items())) for p in ShardPacks(path)]


def _write_tar(path: Path, packs) -> list[int]:
    """Write packs like the writer does; returns the N+1 ``.tar.idx`` offsets."""
    offsets = []
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for key, parts in packs:
            offsets.append(tf.offset)
            for part, data in sorted(parts):
                tf.addfile(tarinfo(f"{key}.{part}", len(data)), io.BytesIO(data))
        offsets.append(tf.offset)
    return offsets


def _edit_packs(out: Path, shard: str, edit) -> None:
    """Rewrite ``shard`` with ``edit(packs) -> packs`` (then :func:`_reseal` it)."""
    _write_tar(out / shard, edit(_read_tar(out / shard)))
    _reseal(out)


def _edit_json(out: Path, shard: str, edit) -> None:
    """Apply ``edit(key, obj)`` to every pack JSON of ``shard``, sealed."""
    def f(packs):
        new = []
        for key, parts in packs:
            parts = [(p, json.dumps(edit(key, json.loads(d))).encode() if p == "json" else d) for p, d in parts]
            new.append((key, parts))
        return new
    _edit_packs(out, shard, f)


def _reseal(out: Path) -> None:
    """Recompute sha256, sizes, idx, .info.json counts, report totals, markers of every shard and the
    run's hash record ``hashes.json`` (not the samples' content sha256 recorded at pack time)."""
    import hashlib

    import numpy as np

    report = json.loads((out / "report.json").read_text())
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    totals = {"packs": 0, "samples_packed": 0, "tokens": 0, "shard_bytes": 0}
    for name in info["shard_counts"]:
        path = out / name
        packs = _read_tar(path)
        offsets = _write_tar(path, packs)
        (out / (name + ".idx")).write_bytes(np.asarray(offsets, "<u8").tobytes())
        objs = [json.loads(dict(parts)["json"]) for _, parts in packs]
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        info["shard_counts"][name] = len(packs)
        report["shard_sha256"][name] = sha
        reseal_marker(out, name, sha256=sha, nbytes=len(data), num_packs=len(packs))
        totals["packs"] += len(packs)
        totals["samples_packed"] += sum(len(o["samples"]) for o in objs)
        totals["tokens"] += sum(o["num_tokens"] for o in objs)
        totals["shard_bytes"] += len(data)
    report.update(totals)
    (out / "report.json").write_text(json.dumps(report))
    (out / ".nv-meta" / ".info.json").write_text(json.dumps(info, indent=2))
    write_hashes(out, list(info["shard_counts"]))


def reseal_marker(out: Path, name: str, **result) -> None:
    """Update the ``result`` fields of shard ``name``'s marker and seal it again (what a checksum of
    the run record could catch; the samples' content sha256 recorded at pack time stay as they were
    unless ``content_sha256`` is given)."""
    from vlmpack.fsio import sealed_json_bytes

    marker = out / ".vlmpack" / "shards" / (name + ".json")
    m = json.loads(marker.read_text())
    m.pop("checksum", None)
    m["result"].update(result)
    marker.write_bytes(sealed_json_bytes(m))


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(["check", path, *args], timeout=600)


def _assert_fails(path: Path, *telling: str, args: tuple[str, ...] = (), workers: int = 0) -> list[str]:
    """The CLI exits 1 with ``problem:`` lines, one of them holding every string of ``telling``, and
    no traceback; returns the problem lines. ``workers``: Energon loader processes of the check (0,
    in the CLI's own process, unless a case is about the workers' path: the clean output and the
    undecodable image are checked with 2)."""
    r = _cli(path, "--workers", str(workers), *args)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    problems = [x[len("problem: "):] for x in r.stderr.splitlines() if x.startswith("problem: ")]
    assert problems, r.stderr
    assert any(all(t in p for t in telling) for p in problems), problems
    return problems


# ------------------------------------------------------------------------------------------- clean
def test_clean_output_passes(packed):
    res = check_output(packed, num_workers=2)
    report = json.loads((packed / "report.json").read_text())
    assert res["problems"] == []
    assert res["packs"] == report["packs"] and res["samples"] == report["samples_packed"]
    assert res["tokens"] == report["tokens"] and res["max_pack_tokens"] <= report["seq_len"]
    assert res["duplicates"] == 0 and res["unique_ids"] == res["samples"] == sum(res["ids"].values())
    r = _cli(packed)
    assert r.returncode == 0, r.stderr
    assert "check passed" in r.stdout and "problem:" not in r.stderr and "Traceback" not in r.stderr


def test_resealed_untouched_output_passes(out):
    """The sealing helper itself changes nothing the check could see (else sealed cases prove nothing)."""
    _edit_packs(out, SHARD, lambda packs: packs)
    assert check_output(out, num_workers=0)["problems"] == []


# ------------------------------------------------------------------------------------------- raw damage
def test_one_letter_text_edit_breaks_the_sha256(out):
    path = out / SHARD
    with tarfile.open(path) as tf:
        m = next(m for m in tf if m.name.endswith(".json"))
    data = bytearray(path.read_bytes())
    body = bytes(data[m.offset_data:m.offset_data + m.size])
    start = body.index(b'"text":"') + len(b'"text":"')
    i = next(j for j in range(start, len(body)) if chr(body[j]).isalpha())
    data[m.offset_data + i] = ord("x" if body[i] != ord("x") else "y")  # same length: the tar stays valid
    path.write_bytes(bytes(data))
    problems = _assert_fails(out, SHARD, "sha256")
    assert check_output(out, num_workers=0)["problems"] == problems


def test_truncated_shard(out):
    path = out / SHARD
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 5])
    _assert_fails(out, SHARD, "truncated")


def test_missing_idx(out):
    (out / (SHARD + ".idx")).unlink()
    _assert_fails(out, SHARD + ".idx", "missing")


def test_wrong_idx_entry(out):
    import numpy as np

    idx = out / (SHARD + ".idx")
    offs = np.fromfile(idx, "<u8")
    offs[1] += 512
    idx.write_bytes(offs.tobytes())
    _assert_fails(out, SHARD + ".idx", "entry 1")


def test_foreign_tar(out):
    shutil.copy(out / "shard-000000.tar", out / "shard-000099.tar")
    _assert_fails(out, "foreign", "shard-000099.tar")


def test_missing_shard(out):
    (out / SHARD).unlink()
    _assert_fails(out, SHARD, "missing")


def test_empty_dir(tmp_path):
    _assert_fails(tmp_path, "empty")


def test_nonexistent_dir(tmp_path):
    _assert_fails(tmp_path / "nope", "does not exist")


def test_corrupt_report(out):
    rp = out / "report.json"
    rp.write_text(rp.read_text()[:100])
    _assert_fails(out, "report.json", "corrupt")


def test_no_nv_meta(out):
    shutil.rmtree(out / ".nv-meta")
    _assert_fails(out, ".nv-meta", "Energon cannot load")


def test_missing_run_dir_is_a_problem_unless_asked(out):
    shutil.rmtree(out / ".vlmpack")
    _assert_fails(out, "run record", "--no-run-dir")
    r = _cli(out, "--no-run-dir")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------- sealed damage
def test_dropped_pack_is_found_by_completeness(out):
    lost = json.loads(dict(_read_tar(out / SHARD)[2][1])["json"])["samples"]
    _edit_packs(out, SHARD, lambda packs: packs[:2] + packs[3:])
    problems = check_output(out, num_workers=0)["problems"]
    assert len(problems) == 1 and "lost" in problems[0] and f"{len(lost)} samples" in problems[0], problems
    _assert_fails(out, "lost", repr(lost[0]["id"]))


def test_sample_removed_from_a_pack_is_found_by_completeness(out):
    gone = {}

    def edit(key, obj):
        if not gone and len(obj["samples"]) > 1:
            s = obj["samples"].pop()
            gone["id"] = s["id"]
            obj["num_tokens"] -= s["num_tokens"]
        return obj

    _edit_json(out, SHARD, edit)
    problems = check_output(out, num_workers=0)["problems"]
    assert len(problems) == 1 and "lost" in problems[0] and repr(gone["id"]) in problems[0], problems
    _assert_fails(out, "lost", repr(gone["id"]))


def test_wrong_recorded_sample_count(out):
    changed = {}

    def edit(key, obj):  # +1 on one sample, -1 on the next: the pack's sum still holds (packs are full)
        if not changed and len(obj["samples"]) > 1:
            obj["samples"][0]["num_tokens"] += 1
            obj["samples"][1]["num_tokens"] -= 1
            changed["ids"] = [obj["samples"][0]["id"], obj["samples"][1]["id"]]
        return obj

    _edit_json(out, SHARD, edit)
    assert changed
    problems = check_output(out, num_workers=0)["problems"]
    counts = [p for p in problems if "manifest" in p]
    assert len(counts) == 1 and all(repr(i) in counts[0] for i in changed["ids"]), problems
    # and each edited sample is no longer the one packed (its content sha256 recorded at pack time)
    content = [p for p in problems if "content sha256 differs" in p]
    assert len(problems) == 3 and all(any(repr(i) in p for p in content) for i in changed["ids"]), problems
    _assert_fails(out, "num_tokens", repr(changed["ids"][0]))


def test_wrong_recorded_pack_count(out):
    def edit(key, obj):
        if key.endswith("0"):
            obj["num_tokens"] -= 1
        return obj

    _edit_json(out, SHARD, edit)
    _assert_fails(out, SHARD, "sum to")


def test_pack_over_seq_len(out):
    def edit(key, obj):
        obj["seq_len"] = obj["num_tokens"] - 1
        return obj

    _edit_json(out, SHARD, edit)
    _assert_fails(out, "> seq_len")


def test_duplicated_sample(out):
    def edit(packs):
        first = json.loads(dict(packs[0][1])["json"])
        second = dict(packs[1][1])
        obj = json.loads(second["json"])
        dup = next(s for s in first["samples"] if not s["media"])
        obj["samples"].append(dup)
        obj["num_tokens"] += dup["num_tokens"]
        obj["seq_len"] = max(obj["seq_len"], obj["num_tokens"])
        second["json"] = json.dumps(obj).encode()
        return [packs[0], (packs[1][0], list(second.items()))] + packs[2:]

    _edit_packs(out, SHARD, edit)
    res = check_output(out, num_workers=0)
    assert res["duplicates"] == 1
    assert any("more than once" in p for p in res["problems"]), res["problems"]
    _assert_fails(out, "more than once")


def test_undecodable_image_is_found_through_energon(out):
    """A bad media member that every checksum agrees with: only loading it (Energon, then the
    training side's decoder) can see it; the problem names the shard, the pack, the sample and the part."""
    hit = {}

    def edit(packs):
        new = []
        for key, parts in packs:
            if not hit and any(p.startswith("img") for p, _ in parts):
                hit["key"] = key
                parts = [(p, b"not an image" if p.startswith("img") else d) for p, d in parts]
            new.append((key, parts))
        return new

    _edit_packs(out, SHARD, edit)
    res = check_output(out, num_workers=2)
    assert any(f"{SHARD}/{hit['key']}: sample " in p and "does not decode" in p for p in res["problems"]), res
    _assert_fails(out, "does not decode", hit["key"], workers=2)


def test_each_distinct_media_part_is_decoded_once(packed, monkeypatch):
    """The Energon pass decodes a part whose bytes (and kind, extension) already decoded once, not
    again: as many decodes as distinct image parts, fewer than the parts the shards hold."""
    import dataclasses
    import hashlib

    import vlmpack.check.load as load

    parts = [(p.rpartition(".")[2], hashlib.sha256(d).digest())
             for shard in sorted(packed.glob("*.tar")) for pack in ShardPacks(shard)
             for p, d in pack.parts.items() if p.startswith("img")]
    assert len(set(parts)) < len(parts)  # the demo set reuses images across samples
    image = load.KINDS["image"]
    calls = []

    def counted(raw, name, where):
        calls.append(name)
        image.check_stored(raw, name, where)

    monkeypatch.setitem(load.KINDS, "image", dataclasses.replace(image, check_stored=counted))
    res = check_output(packed, num_workers=0)
    assert res["problems"] == []
    assert len(calls) == len(set(parts))


def test_each_reference_of_an_undecodable_part_is_reported(out):
    """Only parts that decoded are remembered: one bad PNG part stored in two packs is two problems."""
    hit = []

    def edit(packs):
        new = []
        for key, parts in packs:
            if len(hit) < 2 and any(p.startswith("img") and p.endswith(".png") for p, _ in parts):
                hit.append(key)
                parts = [(p, b"not an image" if p.startswith("img") and p.endswith(".png") else d)
                         for p, d in parts]
            new.append((key, parts))
        return new

    _edit_packs(out, SHARD, edit)
    res = check_output(out, num_workers=0)
    assert len(hit) == 2
    for key in hit:
        assert any(f"{SHARD}/{key}: sample " in p and "does not decode" in p for p in res["problems"]), res


def test_ids_compare_as_kind_and_id(out):
    """With the ``id_kind`` column and key, an id that changed kind is lost + injected, not equal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    man = out / ".vlmpack" / "manifest.parquet"
    t = pq.read_table(man)
    if "id_kind" not in t.column_names:
        pq.write_table(t.append_column("id_kind", pa.array([0] * len(t), pa.int8())), man)
    first = {}

    def edit(key, obj):
        for s in obj["samples"]:
            s.setdefault("id_kind", "str")
        if not first:
            first["id"] = obj["samples"][0]["id"]
            obj["samples"][0]["id_kind"] = "line"
        return obj

    _edit_json(out, SHARD, edit)
    problems = check_output(out, num_workers=0)["problems"]
    assert len(problems) == 3, problems
    assert any("lost" in p and repr(first["id"]) in p for p in problems)
    assert any("not in the manifest" in p and "(line)" in p for p in problems)
    assert any("content sha256 differs" in p and repr(first["id"]) in p for p in problems)


def test_report_of_a_failed_run(out):
    (out / "report.json").write_text(json.dumps({"status": "failed", "stage": "count", "records_read": 300}))
    _assert_fails(out, "failed run", "count")


def test_frozen_gc_freezes_what_is_alive_and_always_unfreezes():
    """The Energon passes' ``frozen_gc``: objects alive at the start are out of collection inside the
    block (a full collection does not see them), all are back after it, also when the block raises."""
    import gc

    from vlmpack.energon.load import frozen_gc

    alive = [[i] for i in range(1000)]
    assert gc.get_freeze_count() == 0
    with frozen_gc():
        assert gc.get_freeze_count() >= len(alive)
        assert not any(o is alive for o in gc.get_objects())
    assert gc.get_freeze_count() == 0 and any(o is alive for o in gc.get_objects())
    with pytest.raises(RuntimeError), frozen_gc():
        raise RuntimeError("stop")
    assert gc.get_freeze_count() == 0
