"""WebDataset input that is not one clean shard: shards joined with ``cat``, repeated members,
members without a key, members above the size caps (issue 19 items 5 and 12), a hard link to a
symbolic link (issue 20 item 7).

Joined shards read every sample of each (as GNU tar ``--ignore-zeros``), over any task split, with
exact offsets; a repeated member is ``duplicate_member``; keyless and non-file members are counted;
a json member above ``--max-member-bytes`` is ``member_too_large`` and a media item above
``--max-media-bytes`` ``media_too_large``, both unread (a 3 GiB sparse member costs no memory);
one ``vlmpack pack`` run over all of it keeps read = packed + rejected.
"""

from __future__ import annotations

import json
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from vlmpack.config import load_config
from vlmpack.errors import ConfigError, InputError
from vlmpack.media.probe import probe_media
from vlmpack.media.ref import parse_ref, read_ref
from vlmpack.pack.validate import validate_sample
from vlmpack.records import MAX_MEDIA_BYTES, ReadStats, Rejection, Sample
from vlmpack.sources.wds import WdsSource

pytestmark = pytest.mark.slow


def _shards(real_data: Path) -> list[Path]:
    return sorted((real_data / "wds").glob("*.tar"))


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> bytes:
    """One tar member as bytes (header + data + padding), as tar writers store it."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.type, ti.linkname, ti.mtime = (len(data) if kind == tarfile.REGTYPE else 0), kind, link, 0
    return ti.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512)


def _body(shard: Path) -> bytes:
    """A shard's bytes up to its end-of-archive blocks (more members can follow)."""
    with tarfile.open(shard) as tf:
        tf.getmembers()
        return shard.read_bytes()[:tf.offset]


def _facts(records) -> list[tuple]:
    """(id, messages, media bytes) of each sample, (key, reason) of each rejection."""
    return [(r.id, r.messages, [read_ref(m.path) for m in r.media]) if isinstance(r, Sample)
            else (r.locator.key, r.reason) for r in records]


def _conversation(sample_id: str, pad: int = 0) -> bytes:
    obj = {"id": sample_id, "conversations": [{"from": "human", "value": "say hi"}, {"from": "gpt", "value": "hi"}]}
    return json.dumps(obj).encode() + b" " * pad


def test_joined_shards_read_every_sample_of_each_over_any_split(tmp_path, real_data):
    a, b = _shards(real_data)[:2]
    joined = tmp_path / "ab.tar"
    joined.write_bytes(a.read_bytes() + b.read_bytes())
    want = _facts(WdsSource.read(str(a), 0, -1, 1)) + _facts(WdsSource.read(str(b), 0, -1, 1))
    whole = list(WdsSource.read(str(joined), 0, -1, 1))
    assert _facts(whole) == want and len(want) > 400
    # the second shard's samples point into the second half: offsets are the joined file's (hard links too)
    second = whole[len(whole) - len(list(WdsSource.read(str(b), 0, -1, 1))):]
    assert all(parse_ref(m.path).offset > a.stat().st_size for s in second for m in s.media)
    assert all(s.locator.offset >= a.stat().st_size for s in second)
    tasks = WdsSource.split(str(joined), 300_000)
    assert len(tasks) > 4 and any(s < a.stat().st_size < e for s, e, _ in tasks[:-1])  # a task crosses the join
    stats, parts = ReadStats(), []
    for start, end, first in tasks:
        parts += WdsSource.read(str(joined), start, end, first, stats=stats)
    assert [(r.id, r.locator) for r in parts] == [(r.id, r.locator) for r in whole]
    assert stats.records == len(whole)
    # the same shard twice: the second copy's hard links name its own members, not the first copy's
    twice = tmp_path / "aa.tar"
    twice.write_bytes(a.read_bytes() * 2)
    again = list(WdsSource.read(str(twice), 0, -1, 1))
    n = len(again) // 2
    assert _facts(again[n:]) == _facts(again[:n]) == want[:n]
    assert all(parse_ref(m.path).offset > a.stat().st_size for s in again[n:] for m in s.media)
    # many zero blocks between the archives (more than one 1 MiB read), then the second shard
    padded = tmp_path / "padded.tar"
    padded.write_bytes(a.read_bytes() + bytes((1 << 20) + 3 * 512) + b.read_bytes())
    assert _facts(WdsSource.read(str(padded), 0, -1, 1)) == want


def test_bytes_after_the_end_of_an_archive_are_a_tar_or_one_line(tmp_path, real_data):
    a, b = _shards(real_data)[:2]
    data = a.read_bytes()
    junk = tmp_path / "junk.tar"
    junk.write_bytes(data + b"not a tar header, appended by mistake".ljust(512, b"!"))
    with pytest.raises(InputError, match=rf"{junk}: the bytes at {len(data)} after the end-of-archive") as e:
        WdsSource.split(str(junk), 1 << 20)
    assert "\n" not in str(e.value)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data + b.read_bytes()[: b.stat().st_size // 2])  # the second shard cut inside a member
    with pytest.raises(InputError, match="truncated"):
        WdsSource.split(str(cut), 1 << 20)
    between = tmp_path / "between.tar"
    between.write_bytes(data + _body(b))  # the second shard without its end-of-archive blocks
    with pytest.raises(InputError, match="no end-of-archive blocks"):
        list(WdsSource.read(str(between), 0, -1, 1))


def test_repeated_members_keyless_members_and_the_member_cap(tmp_path, real_data):
    shard = _shards(real_data)[0]
    with tarfile.open(shard) as tf:
        cap = max(m.size for m in tf if m.name.endswith(".json"))  # every json of the shard is read
    extra = [_member("README", b"how this shard was made\n"), _member("notes", b"x"),
             _member("docs/", kind=tarfile.DIRTYPE),
             _member("twice.json", _conversation("twice")), _member("twice.json", _conversation("twice-2")),
             _member("lnk.png", kind=tarfile.SYMTYPE, link="elsewhere.png"),
             # a hard link to the symbolic link (it stopped the whole run): only its sample is rejected
             _member("hl.json", _conversation("hl")), _member("hl.png", kind=tarfile.LNKTYPE, link="lnk.png"),
             _member("big.json", _conversation("big", pad=cap)), _member("fine.json", _conversation("fine"))]
    edited = tmp_path / "edited.tar"
    edited.write_bytes(_body(shard) + b"".join(extra) + bytes(1024))
    stats = ReadStats()
    got = list(WdsSource.read(str(edited), 0, -1, 1, stats=stats, max_member_bytes=cap))
    base = _facts(WdsSource.read(str(shard), 0, -1, 1))
    assert _facts(got[:len(base)]) == base  # the shard's own samples are untouched
    tail = got[len(base):]
    assert [(r.locator.key, r.reason) for r in tail if isinstance(r, Rejection)] == [
        ("twice", "duplicate_member"), ("hl", "member_not_file"), ("big", "member_too_large")]
    assert [r.id for r in tail if isinstance(r, Sample)] == ["fine"]
    assert "twice.json" in next(r.detail for r in tail if isinstance(r, Rejection))
    assert (stats.members_without_key, stats.members_not_files) == (2, 1)  # README, notes; the symlink
    assert stats.reasons == {"duplicate_member": 1, "member_not_file": 1, "member_too_large": 1}
    # counted once whatever the task split
    split_stats = ReadStats()
    for start, end, first in WdsSource.split(str(edited), 100_000):
        list(WdsSource.read(str(edited), start, end, first, stats=split_stats, max_member_bytes=cap))
    assert (split_stats.members_without_key, split_stats.members_not_files, split_stats.records) == (
        2, 1, stats.records)


def test_a_3_gib_sparse_member_is_rejected_unread(tmp_path, real_data):
    """A json part and a media part of 3 GiB each (sparse: no disk, no memory unless read)."""
    huge = 3 << 30
    path = tmp_path / "huge.tar"
    with open(path, "wb") as f:
        for name in ("big.json", "img.png"):
            if name == "img.png":
                f.write(_member("img.json", json.dumps({"id": "img", "images": ["png"], "conversations": [
                    {"from": "human", "value": "<image>\nwhat?"}, {"from": "gpt", "value": "a"}]}).encode()))
            info = tarfile.TarInfo(name)
            info.size = huge
            f.write(info.tobuf(tarfile.GNU_FORMAT))
            f.seek(huge, os.SEEK_CUR)  # the data: a hole
        f.write(_member("ok.json", _conversation("ok")) + bytes(1024))
    assert os.stat(path).st_blocks * 512 < (16 << 20)  # really sparse
    tracemalloc.start()
    try:
        got = list(WdsSource.read(str(path), 0, -1, 1))
        checked = [validate_sample(r, check="verify") if isinstance(r, Sample) else r for r in got]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(r.locator.key, r.reason) if isinstance(r, Rejection) else r.id for r in checked] == [
        ("big", "member_too_large"), ("img", "media_too_large"), "ok"]
    assert f"{huge:,} bytes" in checked[1].detail and f"{MAX_MEDIA_BYTES:,}" in checked[1].detail
    assert peak < (32 << 20), peak


def test_media_cap_on_files_and_its_ceiling(tmp_path, real_data, model_dir):
    image = real_data / json.loads((real_data / "real_sft.jsonl").open().readline())["images"][0]
    assert probe_media(str(image), "image", max_bytes=image.stat().st_size).width > 0  # at the cap: read
    with pytest.raises(Exception, match="more than --max-media-bytes") as e:
        probe_media(str(image), "image", max_bytes=image.stat().st_size - 1)
    assert e.value.reason == "media_too_large"
    sparse = tmp_path / "huge.png"
    with open(sparse, "wb") as f:
        f.truncate(MAX_MEDIA_BYTES + 1)
    with pytest.raises(Exception, match="more than --max-media-bytes"):
        probe_media(str(sparse), "image")
    with pytest.raises(ConfigError, match="max_media_bytes"):  # above what vlmpack check reads: refused
        load_config(input=[str(_shards(real_data)[0])], model=str(model_dir), output=str(tmp_path / "o"),
                    max_media_bytes=MAX_MEDIA_BYTES + 1)


def test_pack_reads_joined_shards_whole_and_rejects_per_sample(tmp_path, real_data, model_dir):
    """One ``vlmpack pack`` over shard 0 (+ a README, a symbolic link, a repeated member and an
    oversized json member) joined with shard 1, media capped below its largest image: every sample of
    both shards is read, the run goes on, read = packed + rejected, rejects.jsonl names each reason."""
    from hostile_corpus import run_cli

    a, b = _shards(real_data)[:2]
    samples = list(WdsSource.read(str(a), 0, -1, 1)) + list(WdsSource.read(str(b), 0, -1, 1))
    sizes = {s.id: [parse_ref(m.path).size for m in s.media] for s in samples}
    media_cap = max(x for v in sizes.values() for x in v) - 1
    too_big = {i for i, v in sizes.items() if max(v, default=0) > media_cap}
    with tarfile.open(a) as ta, tarfile.open(b) as tb:
        json_cap = max(m.size for tf in (ta, tb) for m in tf if m.name.endswith(".json"))
    extra = [_member("README", b"made by hand\n"), _member("lnk.png", kind=tarfile.SYMTYPE, link="x.png"),
             _member("twice.json", _conversation("twice")), _member("twice.json", _conversation("twice")),
             _member("big.json", _conversation("big", pad=json_cap))]
    joined = tmp_path / "joined.tar"
    joined.write_bytes(_body(a) + b"".join(extra) + bytes(10240) + b.read_bytes())
    out = tmp_path / "out"
    res = run_cli(["pack", "--input", joined, "--model", model_dir, "--output", out, "--seq-len", 8192,
                   "--workers", 2, "--no-progress", "--max-member-bytes", json_cap, "--max-media-bytes", media_cap,
                   "--max-reject-fraction", 1])
    assert res.returncode == 0, res.stderr
    report = json.loads((out / "report.json").read_text())
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert report["records_read"] == len(samples) + 2 and report["identity_holds"]
    assert report["samples_packed"] == len(samples) - len(too_big) and len(too_big) >= 1
    assert report["rejected_by_reason"] == {"duplicate_member": 1, "member_too_large": 1,
                                            "media_too_large": len(too_big)}
    assert {(r["key"] if r["reason"] != "media_too_large" else r["id"], r["reason"]) for r in rejects} == {
        ("twice", "duplicate_member"), ("big", "member_too_large"), *((i, "media_too_large") for i in too_big)}
    assert (report["members_without_key"], report["members_not_files"]) == (1, 1)
    assert "tar members in no sample" in res.stdout and "1 without a key" in res.stdout
