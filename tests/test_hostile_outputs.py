"""Crafted outputs and blends (issue 19, "Nothing runs, nothing escapes"), on the real output of
``test_check.py`` (the demo set, three shards) and the classes of :mod:`hostile_outputs`.

- ``check`` and ``verify`` on every crafted output: exit 1 with the class's ``problem:`` line, no
  traceback, never exit 70 (a sealed ``VERIFY_ONLY`` class: ``check`` passes, ``verify`` finds it,
  e.g. pretokenized ids with an answer token replaced or an id beyond the vocabulary);
  ``inspect``: exit 2 with one error line. The witness file that code from
  the output would write never exists, and the FIFOs that crafted names and links point at outside
  ``OUT`` are never opened (the commands end).
- ``check BLEND.yaml``: a blend that names code outside its header is one problem, nothing loaded
  (the ``Popen`` in its subflavors never runs); a clean blend still loads, through vlmpack's own
  Energon metadata.
- Audio (issue 23 item 3): an audio member of a packed Qwen2.5-Omni output (``omni_packed``: real
  corpus files) replaced by another real audio file, of another length (``report.json`` resealed:
  ``check`` finds the content sha256, ``verify``'s recount the media tokens of its header) or of the
  same length with other bytes (all but the count record resealed: both find the media sha256 the
  count stage recorded, and the recount finds nothing); each is a ``problem:`` line, exit 1.
- ``pack``: a symbolic link where vlmpack writes or deletes is one error line (exit 2) and its target
  is left as it was; ``--overwrite`` deletes only vlmpack's own regular files.
- The readers' bounds themselves: a 6 GiB member is never read, nor a huge tar extended header;
  a pack object of any JSON shape is a pack or a ``ValueError``; nothing is opened through a link.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hostile_corpus import one_error_line, run_cli
from hostile_outputs import AUDIO_OUTPUTS, BLENDS, OUTPUTS, SHARD, VERIFY_ONLY, fifo, first_key, link
from hypothesis import given
from hypothesis import strategies as st
from test_check import packed  # noqa: F401 - the module's real output
from test_models_qwen2_5_omni import omni_dir  # noqa: F401 - the offline Qwen2.5-Omni directory

from vlmpack.check import check_output
from vlmpack.energon.metadataset import build_metadataset
from vlmpack.fsio import LinkRefused, open_inside
from vlmpack.packfmt import MAX_HEADER_BYTES, MemberTooLarge, ShardPacks, parse_pack, tarinfo

TIMEOUT = 300  # a command that opened one of the FIFOs would never end
#: Classes after which nothing may reach Energon (its metadata would run code, or it would read a link
#: or a member whole).
NOT_LOADED = ("edited_loader", "loader_outside_out", "dataset_yaml_names_a_module", "json_member_over_its_limit",
              "input_ids_header_claims_10_to_the_12",
              "info_counts_10_to_the_10", "info_names_a_shard_outside", "shard_is_a_link", "idx_is_a_link",
              "nv_meta_is_a_link")


def _crafted(packed: Path, tmp_path: Path, name: str) -> tuple[Path, Path, str]:  # noqa: F811
    """A copy of the real output damaged by the class ``name``; returns it, the witness path and
    the key of the first pack of SHARD (taken before the damage)."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    shutil.copytree(packed, out)
    outside.mkdir()
    key = first_key(out)
    OUTPUTS[name][0](out, outside, tmp_path / "RAN")
    return out, tmp_path / "RAN", key


def _problems(proc, *telling: str) -> list[str]:
    """Exit 1, ``problem:`` lines, one of them holding every string of ``telling``, no traceback."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout and "internal error" not in proc.stderr, proc.stderr
    problems = [x[len("problem: "):] for x in proc.stderr.splitlines() if x.startswith("problem: ")]
    assert any(all(t in p for t in telling) for p in problems), problems
    return problems


# ------------------------------------------------------------------------------- check, verify, inspect
@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_check_on_a_crafted_output(name, packed, tmp_path):  # noqa: F811
    out, ran, _ = _crafted(packed, tmp_path, name)
    proc = run_cli(["check", out, "--workers", "0"], timeout=TIMEOUT)
    if name in VERIFY_ONLY:  # sealed: the gate passes it, verify must find it
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
        return
    _problems(proc, *OUTPUTS[name][1])
    assert not ran.exists()
    if name in NOT_LOADED:
        assert "energon:" not in proc.stdout  # nothing was handed to Energon


@pytest.mark.parametrize("name", ["edited_loader", "json_nested_100k_deep", "media_entry_is_a_string",
                                  "json_member_over_its_limit", "shard_is_a_link", "run_dir_is_a_link",
                                  "answer_digit_edited_report_resealed", "answer_digit_edited_record_resealed",
                                  "rejects_edited", "report_counts_edited", "run_config_edited",
                                  "image_replaced_report_resealed", "image_replaced_content_record_resealed",
                                  *sorted(VERIFY_ONLY)])
def test_verify_on_a_crafted_output(name, packed, tmp_path, model_dir):  # noqa: F811
    out, ran, _ = _crafted(packed, tmp_path, name)
    proc = run_cli(["verify", out, "--workers", "1", "--model", model_dir], timeout=TIMEOUT)
    _problems(proc, *OUTPUTS[name][1])
    assert not ran.exists()


@pytest.mark.parametrize("name", sorted(n for n, case in OUTPUTS.items() if case[2]))
def test_inspect_on_a_crafted_output(name, packed, tmp_path, model_dir):  # noqa: F811
    out, _, key = _crafted(packed, tmp_path, name)
    args = [key if a == "@key" else a for a in OUTPUTS[name][2]]
    proc = run_cli(["inspect", out, *args, "--model", model_dir], timeout=TIMEOUT)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    line = one_error_line(proc.stderr)
    assert line.startswith("vlmpack: error: ") and all(t in line for t in OUTPUTS[name][3]), line


# ------------------------------------------------------------------------------- audio members
#: Corpus files of the Omni output: two MP3s of other lengths, two WAVs of one length (one word at
#: 22,050 and 11,025 Hz: the same media tokens, other bytes).
OMNI_AUDIO = ("word.mp3", "short.mp3", "speech_word.wav", "word_11k.wav")


@pytest.fixture(scope="module")
def omni_packed(tmp_path_factory, real_data, omni_dir) -> Path:  # noqa: F811
    """``vlmpack pack`` of one audio sample per :data:`OMNI_AUDIO` file and a few demo text records
    with the Qwen2.5-Omni directory."""
    from cache_dir import CACHE
    from conftest import cache_lock
    from demo_data.audio_corpus import build_audio_corpus

    from vlmpack.config import load_config
    from vlmpack.pack.pipeline import run_pack

    with cache_lock():
        files = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
    tmp = tmp_path_factory.mktemp("omni_hostile")
    texts = [r for x in (real_data / "real_sft.jsonl").read_text().splitlines()[:40]
             if not (r := json.loads(x)).get("images") and not r.get("videos")][:4]
    audio = [{"id": f"audio-{name}", "messages": [
        {"role": "user", "content": [{"type": "audio", "path": str(files[name])}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": "A sound."}]} for name in OMNI_AUDIO]
    (tmp / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*texts[:2], *audio, *texts[2:]]))
    out = tmp / "out"
    report = run_pack(load_config(input=[str(tmp / "in.jsonl")], model=str(omni_dir), output=str(out), seq_len=4096,
                                  workers=1, progress=False, allow_absolute_media=True))
    assert report["rejected"] == 0 and report["samples_by_kind"]["audio"] == len(OMNI_AUDIO)
    return out


@pytest.mark.parametrize("name", sorted(AUDIO_OUTPUTS))
def test_check_and_verify_on_a_replaced_audio_member(name, omni_packed, tmp_path):
    craft, check_words, verify_words, recount_sees_it = AUDIO_OUTPUTS[name]
    out = tmp_path / "out"
    shutil.copytree(omni_packed, out)
    craft(out)
    _problems(run_cli(["check", out, "--workers", "0"], timeout=TIMEOUT), *check_words)
    problems = _problems(run_cli(["verify", out, "--workers", "1"], timeout=TIMEOUT), *verify_words)
    assert any("media tokens from its header" in p for p in problems) == recount_sees_it, problems


# ------------------------------------------------------------------------------- blends
def _blend(packed: Path, path: Path, edit=None, ran: Path | None = None) -> Path:  # noqa: F811
    doc = build_metadataset([(str(packed), json.loads((packed / "report.json").read_text()))],
                            subflavors=[{"source": "demo"}])
    path.write_text(yaml.safe_dump(edit(doc, ran) if edit else doc))
    return path


@pytest.mark.parametrize("name", sorted(BLENDS))
def test_check_refuses_a_blend_that_names_code(name, packed, tmp_path):  # noqa: F811
    edit, telling = BLENDS[name]
    proc = run_cli(["check", _blend(packed, tmp_path / "blend.yaml", edit, tmp_path / "RAN"), "--workers", "0"],
                   timeout=TIMEOUT)
    assert len(_problems(proc, *telling)) == 1
    assert not (tmp_path / "RAN").exists()


def test_a_blend_loads_through_vlmpacks_own_metadata(packed, tmp_path):  # noqa: F811
    """The blend Energon loads is the one read (written again by vlmpack) over views of the outputs:
    a clean blend passes and its draws are named by the output's own path."""
    proc = run_cli(["check", _blend(packed, tmp_path / "blend.yaml"), "--workers", "0"], timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert f"packs drawn: 64 from {packed}" in proc.stdout


def test_a_blend_over_an_edited_loader_loads_nothing(packed, tmp_path):  # noqa: F811
    out, ran, _ = _crafted(packed, tmp_path, "edited_loader")
    proc = run_cli(["check", _blend(out, tmp_path / "blend.yaml"), "--workers", "0"], timeout=TIMEOUT)
    _problems(proc, "sample_loader.py differs")
    assert not ran.exists()


# ------------------------------------------------------------------------------- pack: links in OUT
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _pack(packed: Path, real_data: Path, model_dir: Path, out: Path, *extra):  # noqa: F811
    return run_cli(["pack", "--input", packed.parent / "sub.jsonl", "--media-root", real_data, "--model", model_dir,
                    "--seq-len", 2048, "--output", out, "--workers", 1, "--no-progress", "--max-packs-per-shard", 16,
                    *extra], timeout=TIMEOUT)


def _victim_run_dir(out: Path, victim: Path) -> str:
    shutil.move(out / ".vlmpack", victim)
    (out / ".vlmpack").symlink_to(victim)
    return ".vlmpack"


def _victim_nv_meta(out: Path, victim: Path) -> str:
    shutil.move(out / ".nv-meta", victim)
    (out / ".nv-meta").symlink_to(victim)
    return ".nv-meta"


def _victim_lock(out: Path, victim: Path) -> str:
    victim.mkdir()
    link(out / ".vlmpack" / "lock", victim / "precious.txt")
    return ".vlmpack/lock"


def _victim_shard(out: Path, victim: Path) -> str:
    victim.mkdir()
    link(out / SHARD, victim / "precious.txt")
    return SHARD


@pytest.mark.parametrize("setup,extra", [(_victim_run_dir, ["--seq-len", 4096, "--overwrite"]),
                                         (_victim_nv_meta, []), (_victim_lock, []),
                                         (_victim_shard, ["--seq-len", 4096, "--overwrite"])],
                         ids=["run_dir", "nv_meta", "lock", "shard"])
def test_pack_refuses_a_link_in_out(setup, extra, packed, tmp_path, real_data, model_dir):  # noqa: F811
    out, victim = tmp_path / "out", tmp_path / "victim"
    shutil.copytree(packed, out, symlinks=True)
    where = setup(out, victim)
    (victim / "precious.txt").write_text("user data")
    before = _snapshot(victim)
    proc = _pack(packed, real_data, model_dir, out, *extra)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert f"{out / where} is a symbolic link" in line and "follows none" in line, line
    assert _snapshot(victim) == before and (out / where).is_symlink()


def test_overwrite_deletes_only_vlmpacks_regular_files(packed, tmp_path, real_data, model_dir):  # noqa: F811
    out, victim = tmp_path / "out", tmp_path / "victim"
    shutil.copytree(packed, out)
    victim.mkdir()
    (victim / "precious.txt").write_text("user data")
    mine = [out / ".nv-meta" / "notes.txt", out / ".vlmpack" / "notes.txt", out / ".vlmpack" / "shards" / "notes.txt"]
    for p in mine:
        p.write_text("user data")
    (out / ".nv-meta" / ".info.json.tmp").symlink_to(victim / "precious.txt")  # a planted temp file: replaced
    proc = _pack(packed, real_data, model_dir, out, "--seq-len", 4096, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert all(p.read_text() == "user data" for p in mine) and (victim / "precious.txt").read_text() == "user data"
    assert json.loads((out / "report.json").read_text())["seq_len"] == 4096
    problems = check_output(out, num_workers=0)["problems"]  # the file left in .nv-meta is named, nothing loaded
    assert len(problems) == 1 and "notes.txt" in problems[0] and "does not write" in problems[0], problems


# ------------------------------------------------------------------------------- the readers' bounds
def test_a_6_gib_member_is_never_read(tmp_path):
    path, size = tmp_path / "big.tar", 6 << 30
    with open(path, "wb") as f:  # a sparse file: the member's bytes take no disk
        f.write(tarinfo("pack000000000.json", size).tobuf(tarfile.PAX_FORMAT))
        f.seek(size, os.SEEK_CUR)
        f.write(b"\0" * 10240)
    tracemalloc.start()
    try:
        with pytest.raises(MemberTooLarge, match="6,442,450,944 bytes"):
            list(ShardPacks(path))
        seen = []
        packs = list(ShardPacks(path, on_bad=lambda kind, m: seen.append(kind)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == ["too_large"] and packs[0].parts == {"json": None}
    assert peak < 16 << 20, peak


def test_a_huge_tar_extended_header_is_never_read(tmp_path):
    ti = tarinfo("pack000000000.json", 2)
    ti.pax_headers = {"comment": "x" * (MAX_HEADER_BYTES + 1)}
    with tarfile.open(tmp_path / "pax.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(ti, io.BytesIO(b"{}"))
    with pytest.raises(tarfile.ReadError, match="extended tar header"):
        list(ShardPacks(tmp_path / "pax.tar"))


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["format", "seq_len", "num_tokens", "samples", "id", "media", "messages",
                                          "part", "kind", "role", "content", "type", "text", "x"]), inner, max_size=6),
                     max_leaves=30)


@given(_JSON)
def test_any_json_is_a_pack_object_or_a_value_error(value):
    """Whatever a crafted ``<key>.json`` holds, readers get a pack object or one ``ValueError``."""
    for body in (json.dumps(value), json.dumps({"format": "vlmpack.pack/1", "seq_len": 8, "num_tokens": 1,
                                                "samples": [value]})):
        try:
            obj = parse_pack(body.encode())
        except ValueError:
            continue
        assert isinstance(obj, dict) and isinstance(obj["samples"], list)


def test_nothing_is_opened_through_a_link_or_waited_on(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "dirlink").symlink_to(tmp_path / "real")
    (tmp_path / "filelink").symlink_to(tmp_path / "real" / "f")
    fifo(tmp_path / "pipe")
    for rel in ("dirlink/f", "filelink", "pipe"):
        with pytest.raises(LinkRefused):
            open_inside(tmp_path, rel)
    with pytest.raises(ValueError):
        open_inside(tmp_path, "../x")
    assert open_inside(tmp_path, "real/f").read() == b"x"
