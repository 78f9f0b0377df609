"""Input integrity on real data: a cut or corrupt compressed input is never read silently, a file
that is not JSONL is refused by content before it is read as lines, and bad input paths get one
line each (issue 7, item 3 and the input-path part of item 8)."""

from __future__ import annotations

import builtins
import bz2
import errno
import functools
import gzip
import io
import json
import logging
import lzma
import os
import random
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlmpack.config import load_config
from vlmpack.errors import ConfigError, InputError
from vlmpack.fsio import printable_path
from vlmpack.readers import iter_lines, read_range, sniff_input
from vlmpack.readers.sniff import describe
from vlmpack.records import ReadStats

NOT_JSONL = "not JSONL; vlmpack reads JSONL ("


@pytest.fixture(scope="module")
def sft(real_data) -> bytes:
    """The first 900 lines of the real SFT set (about 1 MB: several zstd blocks, gzip/xz/bz2 blocks)."""
    with open(real_data / "real_sft.jsonl", "rb") as fh:
        return b"".join(fh.readline() for _ in range(900))


def _zstd(data: bytes, checksum: bool) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=checksum).compress(data)


@functools.cache
def _encodings(data: bytes) -> dict[str, tuple[bytes, list[int]]]:
    """codec -> (compressed bytes, offsets where a member ends: a cut there leaves a valid file)."""
    half = data.index(b"\n", len(data) // 2) + 1
    out: dict[str, tuple[bytes, list[int]]] = {}
    for name, comp in [("gzip", gzip.compress), ("zstd", lambda b: _zstd(b, True)),
                       ("zstd-nocheck", lambda b: _zstd(b, False)), ("xz", lzma.compress), ("bz2", bz2.compress)]:
        one = comp(data)
        out[name] = (one, [len(one)])
        first, second = comp(data[:half]), comp(data[half:])
        out[name + "-2members"] = (first + second, [len(first), len(first) + len(second)])
    return out


CODECS = ["gzip", "gzip-2members", "zstd", "zstd-2members", "zstd-nocheck", "zstd-nocheck-2members",
          "xz", "xz-2members", "bz2", "bz2-2members"]


def _read_all(path: Path) -> tuple[list[bytes], InputError | None]:
    """Every line ``iter_lines`` yields before it ends or raises :class:`InputError`."""
    got: list[bytes] = []
    try:
        for _, _, raw in iter_lines(str(path)):
            got.append(raw)
    except InputError as e:
        return got, e
    return got, None


def _assert_cut_is_loud(path: Path, lines: list[bytes]) -> None:
    if path.stat().st_size == 1:  # 1 byte cannot be told from a 1-byte text file: refused or 1 rejection
        try:
            sniff_input(str(path))
        except InputError as e:
            assert "\n" not in str(e) and str(path) in str(e)
            return
        assert [type(r).__name__ for r in read_range(str(path))] == ["Rejection"]
        return
    got, err = _read_all(path)
    assert err is not None, f"{path.name}: a cut file was read silently ({len(got)} of {len(lines)} lines)"
    msg = str(err)
    assert "\n" not in msg and str(path) in msg and "truncated or corrupt" in msg
    assert got == lines[: len(got)]  # what came before the break is the original's prefix
    if got:  # the line number reported is the last complete line handed out
        assert re.search(rf"after line {len(got)} \(which ends at byte {sum(len(x) + 1 for x in got)}\)", msg)
    reached = int(re.search(r"at decompressed byte (\d+)", msg).group(1))
    assert reached >= sum(len(x) + 1 for x in got)
    # read_range (what the counting tasks use) stops the same way
    with pytest.raises(InputError, match=re.escape(str(path))):
        for _ in read_range(str(path), stats=ReadStats()):
            pass
    # sniffing reads only the head: it passes or fails with the same kind of one line
    try:
        sniff_input(str(path))
    except InputError as e:
        assert "\n" not in str(e) and str(path) in str(e)


@pytest.mark.parametrize("codec", CODECS)
def test_cut_compressed_input_is_never_read_silently(sft, tmp_path, codec):
    blob, ends = _encodings(sft)[codec]
    lines = sft.split(b"\n")[:-1]
    whole = tmp_path / f"whole.{codec}"
    whole.write_bytes(blob)
    got, err = _read_all(whole)
    assert err is None and got == lines
    rng = random.Random(f"cuts-{codec}")
    cuts = {1, 2, 3, 5, 9, 12, len(blob) - 1, len(blob) - 4, ends[0] - 1, ends[0] + 1}
    cuts |= {rng.randrange(1, len(blob)) for _ in range(14)}
    for cut in sorted(c for c in cuts - set(ends) if 0 < c < len(blob)):
        path = tmp_path / f"cut{cut}.{codec}"
        path.write_bytes(blob[:cut])
        _assert_cut_is_loud(path, lines)


@pytest.mark.parametrize("codec", ["gzip-2members", "zstd-2members", "xz-2members", "bz2-2members"])
def test_cut_exactly_between_members_is_a_valid_shorter_file(sft, tmp_path, codec):
    """The documented limit: a file cut exactly after a complete member is a valid file."""
    blob, ends = _encodings(sft)[codec]
    path = tmp_path / "first-member"
    path.write_bytes(blob[: ends[0]])
    half = sft.index(b"\n", len(sft) // 2) + 1
    assert _read_all(path) == (sft[:half].split(b"\n")[:-1], None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(0.0, 1.0, exclude_max=True))
def test_cut_multiframe_zstd_anywhere(sft, tmp_path, frac):
    blob, ends = _encodings(sft)["zstd-nocheck-2members"]
    cut = 1 + int(frac * (len(blob) - 1))
    if cut in ends:
        cut -= 1
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(blob[:cut])
    _assert_cut_is_loud(path, sft.split(b"\n")[:-1])


@pytest.mark.parametrize("codec", ["gzip-2members", "zstd-2members", "xz-2members", "bz2-2members"])
def test_bit_flips_are_caught_or_harmless(sft, tmp_path, codec):
    """Codecs with a checksum (gzip CRC32 + ISIZE, zstd content checksum, xz CRC64, bzip2 CRC32):
    a flipped bit gives InputError or a read identical to the original, never other lines."""
    blob, _ = _encodings(sft)[codec]
    lines = sft.split(b"\n")[:-1]
    rng = random.Random(f"flips-{codec}")
    errors = 0
    for i in range(30):
        bad = bytearray(blob)
        pos = rng.randrange(len(bad))
        bad[pos] ^= 1 << rng.randrange(8)
        path = tmp_path / f"flip{i}"
        path.write_bytes(bytes(bad))
        try:
            sniff_input(str(path))
        except InputError as e:
            assert "\n" not in str(e) and str(path) in str(e)
            errors += 1
            continue
        got, err = _read_all(path)
        if err is not None:
            assert "\n" not in str(err) and str(path) in str(err)
            errors += 1
        else:
            assert got == lines, f"{codec}: flip at byte {pos} changed the data silently"
    assert errors > 0


def test_bit_flips_in_unchecked_zstd_never_crash_and_are_warned_about(sft, tmp_path, caplog):
    blob, _ = _encodings(sft)["zstd-nocheck-2members"]
    plain = tmp_path / "plain.jsonl.zst"
    plain.write_bytes(blob)
    with caplog.at_level(logging.WARNING, logger="vlmpack.readers.sniff"):
        sniff_input(str(plain))
    assert "no content checksum" in caplog.text and str(plain) in caplog.text
    rng = random.Random("unchecked")
    for i in range(30):
        bad = bytearray(blob)
        bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        path = tmp_path / f"flip{i}.zst"
        path.write_bytes(bytes(bad))
        try:
            sniff_input(str(path))
        except InputError:
            continue
        _read_all(path)  # InputError or a read; anything else fails the test


@pytest.mark.parametrize("codec,extra,ok", [
    ("gzip", b"\x00" * 13, True),  # gzip's zero padding
    ("xz", b"\x00" * 8, True),  # xz stream padding
    ("gzip", b"junk after the end\n", False),
    ("zstd", b"junk after the end\n", False),
    ("bz2", b"junk after the end\n", False),
    ("xz", b"junk after the end\n", False),
    ("zstd", b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd", True),  # a skippable frame
])
def test_bytes_after_the_last_member(sft, tmp_path, codec, extra, ok):
    blob, _ = _encodings(sft)[codec]
    path = tmp_path / f"x.{codec}"
    path.write_bytes(blob + extra)
    got, err = _read_all(path)
    if ok:
        assert err is None and got == sft.split(b"\n")[:-1]
    else:
        assert err is not None and str(path) in str(err) and "\n" not in str(err)


def test_skippable_frame_first_is_zstd(sft, tmp_path):
    path = tmp_path / "skip-first.zst"
    path.write_bytes(b"\x5a\x2a\x4d\x18\x02\x00\x00\x00hi" + _zstd(sft, True))
    sniff_input(str(path))
    assert _read_all(path) == (sft.split(b"\n")[:-1], None)


# --- sniffing: not JSONL is refused by content ----------------------------------------------------------------

def _png(real_data: Path) -> Path:
    return next(p for p in sorted((real_data / "images").rglob("*.png")) if "broken" not in p.parts)


def _refused(path: Path, what: str) -> None:
    with pytest.raises(InputError) as e:
        sniff_input(str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path} looks like ") and what in msg and NOT_JSONL in msg, msg


def test_webdataset_tars_are_refused(real_data, tmp_path):
    tars = sorted((real_data / "wds").glob("*.tar"))
    assert tars
    for t in tars:
        _refused(t, "a tar archive (WebDataset?)")
    gz = tmp_path / "shard.tar.gz"
    gz.write_bytes(gzip.compress(tars[0].read_bytes()))
    _refused(gz, "a tar archive (WebDataset?) compressed with gzip")
    # an old-style (v7) tar header has no ustar magic: its checksum is what identifies it
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        tf.add(str(real_data / "broken.jsonl"), arcname="broken.jsonl")
    v7 = bytearray(buf.getvalue())
    v7[257:265] = b"\x00" * 8
    v7[148:156] = b" " * 8
    v7[148:156] = b"%06o\x00 " % sum(v7[:512])
    (tmp_path / "v7.tar").write_bytes(bytes(v7))
    _refused(tmp_path / "v7.tar", "a tar archive")


def test_parquet_arrow_zip_lmdb_are_refused(real_data, tmp_path):
    import pyarrow as pa
    import pyarrow.ipc
    import pyarrow.parquet as pq

    records = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:200]]
    table = pa.table({"id": [str(r.get("id")) for r in records], "json": [json.dumps(r) for r in records]})
    pq.write_table(table, tmp_path / "x.parquet")
    _refused(tmp_path / "x.parquet", "a Parquet file")
    with pa.OSFile(str(tmp_path / "x.arrow"), "wb") as sink, pyarrow.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    _refused(tmp_path / "x.arrow", "an Arrow IPC file")
    with zipfile.ZipFile(tmp_path / "x.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(real_data / "real_sft.jsonl", "real_sft.jsonl")
    _refused(tmp_path / "x.zip", "a zip archive")
    # an LMDB data file (no lmdb package here): meta page = 16-byte page header, then magic 0xBEEFC0DE, version 1
    page = bytearray(4096)
    page[10:12] = (0x08).to_bytes(2, "little")  # P_META
    page[16:24] = (0xBEEFC0DE).to_bytes(4, "little") + (1).to_bytes(4, "little")
    (tmp_path / "data.mdb").write_bytes(bytes(page) * 2)
    _refused(tmp_path / "data.mdb", "an LMDB database file")


def test_media_and_executables_are_refused(real_data, tmp_path):
    from PIL import Image

    png = _png(real_data)
    _refused(png, "a PNG image")
    jpg = next(p for p in sorted((real_data / "images").rglob("*.jpg")) if "broken" not in p.parts)
    _refused(jpg, "a JPEG image")
    for fmt, what in [("GIF", "a GIF image"), ("WEBP", "a WebP image"), ("TIFF", "a TIFF image"),
                      ("BMP", "a BMP image")]:
        out = tmp_path / f"img.{fmt.lower()}"
        with Image.open(png) as im:
            im.convert("RGB").save(out, format=fmt)
        _refused(out, what)
    videos = sorted((real_data / "videos").rglob("*.mp4"))
    if videos:
        _refused(videos[0], "an MP4/QuickTime (ISO media) file")
    ls = tmp_path / "ls"
    shutil.copy("/bin/ls", ls)
    _refused(ls, "a binary file (ELF executable)")
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(random.Random(7).randbytes(100_000))
    _refused(rnd, "a binary file")
    nul_free = bytes(b or 1 for b in random.Random(8).randbytes(20_000))  # no NUL: the share rule decides
    (tmp_path / "nonul.bin").write_bytes(nul_free)
    _refused(tmp_path / "nonul.bin", "a binary file")
    (tmp_path / "random.zst").write_bytes(_zstd(random.Random(9).randbytes(100_000), True))
    _refused(tmp_path / "random.zst", "a binary file")


def test_text_that_is_not_jsonl_is_refused(real_data, tmp_path):
    records = [json.loads(x) for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:50]]
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-16")
    _refused(utf16, "UTF-16 text")
    utf16le = tmp_path / "utf16le.jsonl"  # no BOM
    utf16le.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-16-le")
    _refused(utf16le, "UTF-16 text")
    pretty = tmp_path / "pretty.json"  # one JSON document that is no array of records (an array is read: json)
    pretty.write_text(json.dumps({"data": records}, indent=2))
    _refused(pretty, "a pretty-printed JSON document")
    lfs = tmp_path / "lfs.jsonl"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 7091080\n")
    _refused(lfs, "a Git LFS pointer")
    html = tmp_path / "download.jsonl"
    html.write_text("<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n")
    _refused(html, "an HTML page")


def test_real_jsonl_files_are_accepted(real_data, tmp_path):
    for name in ("real_sft.jsonl", "broken.jsonl"):
        sniff_input(str(real_data / name))
        data = (real_data / name).read_bytes()
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(data))
        (tmp_path / f"{name}.zst").write_bytes(_zstd(data, True))
        sniff_input(str(tmp_path / f"{name}.gz"))
        sniff_input(str(tmp_path / f"{name}.zst"))
    # broken.jsonl's non-UTF-8 record first, its other records after: a rejection, not a refusal
    lines = (real_data / "broken.jsonl").read_bytes().split(b"\n")
    bad = [x for x in lines if _not_utf8(x)]
    assert bad
    first_bad = tmp_path / "first-line-not-utf8.jsonl"
    first_bad.write_bytes(b"\n".join(bad + [x for x in lines if not _not_utf8(x)]))
    sniff_input(str(first_bad))
    # an empty file has no records; it is not refused here
    (tmp_path / "empty.jsonl").write_bytes(b"")
    sniff_input(str(tmp_path / "empty.jsonl"))


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@settings(max_examples=60, deadline=None)
@given(junk=st.binary(min_size=1, max_size=300).map(lambda b: b.replace(b"\n", b"")), where=st.integers(1, 400))
def test_one_binary_record_among_real_ones_is_not_a_refusal(sft, junk, where):
    lines = sft.split(b"\n")[:-1]
    lines.insert(min(where, len(lines)), junk)
    head = b"\n".join(lines)[: 64 << 10]
    assert describe(head) is None


# --- input and output paths -----------------------------------------------------------------------------------

@pytest.fixture()
def paths(real_data, model_dir, tmp_path):
    return {"input": [str(real_data / "broken.jsonl")], "model": str(model_dir), "output": str(tmp_path / "out")}


def _config_error(match: str, **kw) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        load_config(**kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_directory_glob_missing_and_special_inputs(paths, real_data, tmp_path):
    jsonl = sorted(str(p) for p in real_data.glob("*.jsonl"))
    assert len(jsonl) >= 2
    assert load_config(**{**paths, "input": [str(real_data)]}).input == jsonl  # a directory: its inputs, sorted
    assert load_config(**{**paths, "input": [str(real_data / "*.jsonl")]}).input == jsonl
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no input here")
    _config_error(r"is a directory without input files", **{**paths, "input": [str(tmp_path / "empty")]})
    _config_error(r"matches no file", **{**paths, "input": [str(real_data / "*.nothing")]})
    _config_error("input file not found", **{**paths, "input": [str(tmp_path / "nope.jsonl")]})
    _config_error("input file not found", **{**paths, "input": [str(real_data / "broken.jsonl" / "x")]})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _config_error("is not a regular file", **{**paths, "input": [str(fifo)]})
    _config_error("holds a NUL character", **{**paths, "input": [str(tmp_path / "a\x00b")]})


def test_duplicate_inputs(paths, real_data, tmp_path):
    src = str(real_data / "broken.jsonl")
    _config_error("is given twice; give each input once", **{**paths, "input": [src, src]})
    dotted = str(real_data / ".." / real_data.name / "broken.jsonl")
    _config_error("is given twice", **{**paths, "input": [src, dotted]})
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    msg = _config_error("is given twice", **{**paths, "input": [src, str(link)]})
    assert f"the same file as {src}" in msg
    hard = tmp_path / "hard.jsonl"
    shutil.copy(src, tmp_path / "copy.jsonl")
    os.link(tmp_path / "copy.jsonl", hard)
    _config_error("is given twice", **{**paths, "input": [str(tmp_path / "copy.jsonl"), str(hard)]})
    load_config(**{**paths, "input": [src, str(real_data / "real_sft.jsonl")]})  # two files are fine


def test_unreadable_input(paths, real_data, tmp_path, monkeypatch):
    src = tmp_path / "locked.jsonl"
    shutil.copy(real_data / "broken.jsonl", src)
    real_open = builtins.open

    def deny(file, *a, **kw):
        if os.fspath(file) == str(src):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(src))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", deny)
    msg = _config_error("cannot read input", **{**paths, "input": [str(src)]})
    assert str(src) in msg and "Permission denied" in msg


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file")
def test_unreadable_input_by_mode(paths, real_data, tmp_path):
    src = tmp_path / "locked.jsonl"
    shutil.copy(real_data / "broken.jsonl", src)
    src.chmod(0)
    _config_error("cannot read input", **{**paths, "input": [str(src)]})


def test_output_that_is_a_file(paths, tmp_path):
    f = tmp_path / "report.txt"
    f.write_text("mine\n")
    _config_error("is an existing file, not a directory", **{**paths, "output": str(f)})
    _config_error("which is a file", **{**paths, "output": str(f / "sub" / "out")})
    assert f.read_text() == "mine\n"
    load_config(**{**paths, "output": str(tmp_path / "new" / "out")})  # a new directory is fine


def test_content_refusal_through_load_config(paths, real_data, tmp_path):
    tar = sorted((real_data / "wds").glob("*.tar"))[0]
    assert load_config(**{**paths, "input": [str(tar)]}).input == [str(tar)]  # a WebDataset shard: read in place
    tgz = tmp_path / "shard.tar.gz"
    tgz.write_bytes(gzip.compress(tar.read_bytes()[:50_000]))
    with pytest.raises(InputError, match="compressed tar: WebDataset shards are read in place"):
        load_config(**{**paths, "input": [str(tgz)]})
    with pytest.raises(InputError, match="looks like a tar archive"):
        load_config(**{**paths, "input": [str(tar)], "input_format": "jsonl"})


def test_non_utf8_input_names(paths, real_data, tmp_path):
    name = os.fsdecode(b"caf\xe9 data.jsonl")  # a surrogate escape in the str
    src = tmp_path / name
    shutil.copy(real_data / "broken.jsonl", src)
    cfg = load_config(**{**paths, "input": [str(src)]})
    assert cfg.input == [str(src)]
    msg = _config_error("is given twice", **{**paths, "input": [str(src), str(src)]})
    assert "caf\\xe9 data.jsonl" in msg
    msg.encode("utf-8")  # printable: no lone surrogates left
    assert printable_path("a\nb") == "a\\nb"
    cut = tmp_path / os.fsdecode(b"cut\xff.jsonl.gz")
    cut.write_bytes(gzip.compress((real_data / "broken.jsonl").read_bytes())[:200])
    with pytest.raises(InputError) as e:
        list(iter_lines(str(cut)))
    assert "cut\\xff.jsonl.gz" in str(e.value)
    str(e.value).encode("utf-8")


# --- end to end through the CLI ---------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(args)


def test_cli_cut_zstd_is_one_line_exit_2(real_data, model_dir, sft, tmp_path):
    blob, ends = _encodings(sft)["zstd-2members"]
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(blob[: (ends[0] + ends[1]) // 2])  # inside the second frame
    proc = _cli("pack", "--input", str(cut), "--media-root", str(real_data), "--model", str(model_dir),
                "--output", str(tmp_path / "out"), "--workers", "2", "--no-progress")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vlmpack: error: {cut}: the zstd stream ends inside frame 2")
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "report.json").exists()


def test_cli_refuses_a_tar_gz_and_a_directory(real_data, model_dir, tmp_path):
    tgz = tmp_path / "shard.tgz"
    tgz.write_bytes(gzip.compress(sorted((real_data / "wds").glob("*.tar"))[0].read_bytes()[:50_000]))
    for bad, what in [(tgz, "tar"), (tmp_path, "is a directory without input files")]:
        proc = _cli("pack", "--input", str(bad), "--media-root", str(real_data), "--model", str(model_dir),
                    "--output", str(tmp_path / "out"), "--no-progress")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vlmpack: error:") and what in lines[0]
        assert not (tmp_path / "out").exists()
