"""The crafted-output corpus of ``test_hostile_outputs.py`` (issue 19, "Nothing runs, nothing escapes").

Each class of :data:`OUTPUTS` turns a copy of a real vlmpack output into a crafted one (what a
downloaded or edited output may hold) and names what ``vlmpack check`` / ``verify`` must say
(``problem:`` lines, exit 1; a class of :data:`VERIFY_ONLY` is sealed so that ``check`` passes it and
only ``verify`` finds it) and, where it applies, what ``vlmpack inspect`` must say (one error
line, exit 2). Each class of :data:`BLENDS` is a hand-made blend YAML over a real output and the
one problem ``vlmpack check BLEND.yaml`` must give. Each class of :data:`AUDIO_OUTPUTS` replaces an
audio member of a packed Qwen2.5-Omni output (another real audio file of another length, or of the
same length with other bytes) and names what ``check`` and ``verify`` must say;
:func:`replace_sound_track` gives a video member of a Qwen2.5-Omni output packed with
``use_audio_in_video`` another sound track (``test_omni_video.py``).

Two witnesses, both outside ``OUT``:

- ``RAN``: a file that code from the output or the blend would create (a ``sample_loader.py`` that
  writes it, a ``Popen`` that touches it). It must never exist.
- a FIFO: where a crafted name or a symbolic link points outside ``OUT``, it points at a FIFO; a
  command that opened it would wait forever, so one that ends (the tests' timeout) never opened it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from test_check import SHARD, _edit_json, _read_tar, _reseal, _write_tar, reseal_marker

from vlmpack.pack.seal import write_hashes
from vlmpack.packfmt import MAX_PART_BYTES, tarinfo

#: ``{name: (craft(out, outside, ran), check/verify problem words, inspect arguments or None, inspect error words)}``:
#: ``craft`` damages the output ``out`` (``outside``: a folder beside it, ``ran``: the witness path).
OUTPUTS: dict[str, tuple[Callable[[Path, Path, Path], None], tuple[str, ...], list[str] | None, tuple[str, ...]]] = {}
#: ``{name: (edit(blend document, ran) -> document, problem words)}``.
BLENDS: dict[str, tuple[Callable[[dict, Path], dict], tuple[str, ...]]] = {}
#: Classes sealed so well that ``check`` passes them (exit 0): only ``verify`` finds them.
VERIFY_ONLY: set[str] = set()


def output_class(problem: tuple[str, ...], inspect: list[str] | None = None, inspect_error: tuple[str, ...] = (),
                 verify_only: bool = False):
    """Register the decorated craft function in :data:`OUTPUTS` under its name (and in
    :data:`VERIFY_ONLY` with ``verify_only``)."""
    def register(fn):
        OUTPUTS[fn.__name__] = (fn, problem, inspect, inspect_error)
        if verify_only:
            VERIFY_ONLY.add(fn.__name__)
        return fn
    return register


def first_key(out: Path) -> str:
    """The key of the first pack of :data:`SHARD`."""
    return _read_tar(out / SHARD)[0][0]


def seal_shard(out: Path, offsets: list[int]) -> None:
    """Record :data:`SHARD` as it now is (sha256 in ``report.json``, its sealed marker and the run's
    ``hashes.json``, size, ``.tar.idx`` from ``offsets``) without parsing its packs: only reading
    them can find what was done."""
    data = (out / SHARD).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    report = json.loads((out / "report.json").read_text())
    report["shard_sha256"][SHARD] = sha
    (out / "report.json").write_text(json.dumps(report))
    reseal_marker(out, SHARD, sha256=sha, nbytes=len(data))
    (out / (SHARD + ".idx")).write_bytes(np.asarray(offsets, "<u8").tobytes())
    write_hashes(out, list(report["shard_sha256"]))


def swap_json(out: Path, body: bytes) -> None:
    """The first pack of :data:`SHARD` keeps only a JSON member, ``body`` (sealed)."""
    packs = _read_tar(out / SHARD)
    packs[0] = (packs[0][0], [("json", body)])
    seal_shard(out, _write_tar(out / SHARD, packs))


def fifo(path: Path) -> Path:
    """A FIFO at ``path`` (opening it to read would block: the witness that nothing opened it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def link(at: Path, target: Path) -> None:
    """Replace ``at`` (a file or a folder) with a symbolic link to ``target``."""
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    else:
        at.unlink()
    at.symlink_to(target)


# ------------------------------------------------------------------------- item 2: nothing of OUT runs
def _writes_ran(ran: Path) -> str:
    return f"\nopen({str(ran)!r}, 'w').write('ran')\n"


@output_class(("sample_loader.py differs from what vlmpack writes", "Energon imports and runs"))
def edited_loader(out, outside, ran):
    meta = out / ".nv-meta" / "sample_loader.py"
    meta.write_text(meta.read_text() + _writes_ran(ran))


@output_class(("dataset.yaml differs", "sample_loader ../../evil.py outside .nv-meta"))
def loader_outside_out(out, outside, ran):
    (out.parent / "evil.py").write_text(_writes_ran(ran) + "def sample_loader(raw):\n    return raw\n"
                                        "def part_filter(part):\n    return True\n")
    meta = out / ".nv-meta" / "dataset.yaml"
    meta.write_text(meta.read_text().replace("sample_loader.py:", "../../evil.py:"))


@output_class(("dataset.yaml differs", "it names subprocess.Popen"))
def dataset_yaml_names_a_module(out, outside, ran):
    (out / ".nv-meta" / "dataset.yaml").write_text(
        f"sample_type:\n  __module__: subprocess\n  __class__: Popen\n  args: [touch, {ran}]\n"
        "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n")


# ------------------------------------------------------------------------- item 7: crafted content
@output_class(("nested deeper than 64 levels",), ["--pack", "@key"], ("nested deeper than 64 levels",))
def json_nested_100k_deep(out, outside, ran):
    swap_json(out, b"[" * 100_000 + b"]" * 100_000)


@output_class(("a JSON list, not a pack object",), ["--pack", "@key"], ("a JSON list, not a pack object",))
def pack_json_is_a_list(out, outside, ran):
    swap_json(out, b'[{"format": "vlmpack.pack/1"}]')


@output_class(("sample 0 has media that are not a list of",), ["--pack", "@key"],
              ("sample 0 has media that are not a list of",))
def media_entry_is_a_string(out, outside, ran):
    def edit(key, obj):
        if obj["samples"][0]["media"] and not hasattr(edit, "done"):
            obj["samples"][0]["media"][0] = obj["samples"][0]["media"][0]["part"]
            edit.done = True
        return obj
    _edit_json(out, SHARD, edit)
    assert hasattr(edit, "done")


@output_class((f"bytes, more than the {MAX_PART_BYTES['json']:,} vlmpack reads",), ["--pack", "@key"],
              (f"bytes, more than the {MAX_PART_BYTES['json']:,} vlmpack reads",))
def json_member_over_its_limit(out, outside, ran):
    """SHARD becomes one pack whose JSON member claims one byte more than the limit (a sparse file)."""
    key, size = first_key(out), MAX_PART_BYTES["json"] + 1
    with open(out / SHARD, "wb") as f:
        f.write(tarinfo(f"{key}.json", size).tobuf(tarfile.PAX_FORMAT))
        f.seek(size + (-size % 512), io.SEEK_CUR)
        end = f.tell()
        f.write(b"\0" * 10240)
    seal_shard(out, [0, end])


@output_class((".info.json counts 10000000000 packs",), ["--random", "1"], ("more than its", "bytes can hold"))
def info_counts_10_to_the_10(out, outside, ran):
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    info["shard_counts"][SHARD] = 10 ** 10
    (out / ".nv-meta" / ".info.json").write_text(json.dumps(info, indent=2))


@output_class(("is no file name in",), ["--random", "1"], ("which is no shard file of",))
def info_names_a_shard_outside(out, outside, ran):
    fifo(outside / "shard-000000.tar")
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    info["shard_counts"] = {f"../{outside.name}/shard-000000.tar": 16, **info["shard_counts"]}
    (out / ".nv-meta" / ".info.json").write_text(json.dumps(info, indent=2))


# ------------------------------------------------------------------------- item 10: pretokenized ids
def pretokenize_first_pack(out: Path, change: Callable[[np.ndarray, object], np.ndarray]) -> None:
    """Give the first pack of :data:`SHARD` the ``input_ids.npy`` that ``--pretokenize`` writes (its
    samples' ``family.encode`` with the model recorded in the run directory), passed through
    ``change(ids, family)``, and reseal the output: ``check`` then passes, the ids are all that differ."""
    from vlmpack.models import load_model

    family = load_model(json.loads((out / ".vlmpack" / "config.json").read_text())["options"]["model"])
    packs = _read_tar(out / SHARD)
    key, parts = packs[0]
    obj = json.loads(dict(parts)["json"])
    ids = np.concatenate([family.encode([{**m, "content": [{"type": c["type"]} if "part" in c else c
                                                            for c in m["content"]]} for m in s["messages"]],
                                        [x["num_tokens"] for x in s["media"]], s.get("special_tokens"))
                          for s in obj["samples"]])
    assert len(ids) == obj["num_tokens"]
    buf = io.BytesIO()
    np.save(buf, change(ids.astype("<i4"), family), allow_pickle=False)
    packs[0] = (key, [*parts, ("input_ids.npy", buf.getvalue())])
    _write_tar(out / SHARD, packs)
    _reseal(out)  # sha256, sizes, .tar.idx, report totals, markers


@output_class(("input_ids.npy differs from its recorded messages encoded again",), verify_only=True)
def input_ids_answer_token_replaced(out, outside, ran):
    """One trained-on (answer) token replaced by another ordinary token: same length, same counts."""
    def change(ids, family):
        at = int(np.flatnonzero(family.label_mask(ids.astype(np.int64)))[0])
        ids[at] = (ids[at] + 1) % family.tokenizer.vocab_size
        return ids
    pretokenize_first_pack(out, change)


@output_class(("input_ids.npy holds 1 id(s) outside the tokenizer's vocabulary",), verify_only=True)
def input_ids_beyond_the_vocabulary(out, outside, ran):
    def change(ids, family):
        ids[1] = len(family.tokenizer) + 7
        return ids
    pretokenize_first_pack(out, change)


# ------------------------------------------------------------------------- item 9: links in OUT are not followed
@output_class((f"shard {SHARD} is a symbolic link",), ["--pack", "@key"], ("is a symbolic link",))
def shard_is_a_link(out, outside, ran):
    link(out / SHARD, fifo(outside / SHARD))


@output_class((f"{SHARD}.idx is a symbolic link",))
def idx_is_a_link(out, outside, ran):
    link(out / (SHARD + ".idx"), fifo(outside / (SHARD + ".idx")))


@output_class(("report.json is a symbolic link",))
def report_is_a_link(out, outside, ran):
    link(out / "report.json", fifo(outside / "report.json"))


@output_class((".nv-meta is a symbolic link",), ["--random", "1"], (".nv-meta is a symbolic link",))
def nv_meta_is_a_link(out, outside, ran):
    """``.nv-meta`` -> a folder outside whose loader would write RAN and whose ``.info.json`` is a FIFO."""
    shutil.copytree(out / ".nv-meta", outside / "meta")
    (outside / "meta" / "sample_loader.py").write_text(
        (outside / "meta" / "sample_loader.py").read_text() + _writes_ran(ran))
    (outside / "meta" / ".info.json").unlink()
    fifo(outside / "meta" / ".info.json")
    link(out / ".nv-meta", outside / "meta")


@output_class((".vlmpack is a symbolic link", "completeness cannot be checked"))
def run_dir_is_a_link(out, outside, ran):
    """``.vlmpack`` -> a folder outside whose run record is FIFOs."""
    (outside / "run" / "shards").mkdir(parents=True)
    for name in ("manifest.parquet", "plan.npz", "config.json", f"shards/{SHARD}.json"):
        fifo(outside / "run" / name)
    link(out / ".vlmpack", outside / "run")


@output_class(("bad member", "input_ids.npy"))
def input_ids_header_claims_10_to_the_12(out, outside, ran):
    """The first pack gets an ``input_ids.npy`` whose header claims 10^12 int32 ids over 64 bytes
    (NumPy's loader would allocate what the header claims); report.json resealed."""
    body = io.BytesIO()
    np.lib.format.write_array_header_1_0(body, {"descr": "<i4", "fortran_order": False, "shape": (10**12,)})
    packs = _read_tar(out / SHARD)
    packs[0][1].append(("input_ids.npy", body.getvalue() + bytes(64)))
    seal_shard(out, _write_tar(out / SHARD, packs))


@output_class(("the run record in", "is not read", "plan.npz member", "is compressed"))
def plan_npz_deflate_bomb(out, outside, ran):
    """``plan.npz`` replaced by a deflated one whose ``order`` is 800 MB of zeros (under 1 MB on disk)."""
    import zipfile

    with zipfile.ZipFile(out / ".vlmpack" / "plan.npz", "w", zipfile.ZIP_DEFLATED) as z, \
            z.open("order.npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (10**8,)})
        zeros = bytes(10**7)
        for _ in range(80):
            fh.write(zeros)


@output_class(("the run record in", "is not read", "plan.npz member", "claims 8,000,000,000,000 bytes"))
def plan_npz_header_claims_10_to_the_12(out, outside, ran):
    """``plan.npz`` whose stored ``order.npy`` header claims 10^12 int64 (np.load would allocate them)."""
    import zipfile

    body = io.BytesIO()
    np.lib.format.write_array_header_1_0(body, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
    with zipfile.ZipFile(out / ".vlmpack" / "plan.npz", "w", zipfile.ZIP_STORED) as z:
        z.writestr("order.npy", body.getvalue() + bytes(64))


@output_class(("the run record in", "is not read", "bytes of rows once read"))
def manifest_parquet_bomb(out, outside, ran):
    """``manifest.parquet`` of 10^7 rows of one id (a few hundred KB on disk, gigabytes once read as
    Python lists)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 10**7
    table = pa.table({"id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["x" * 64])),
                      "num_tokens": pa.array(np.ones(n, np.int32))})
    pq.write_table(table, out / ".vlmpack" / "manifest.parquet", compression="zstd", use_dictionary=True)


# ------------------------------------------------------------------------- blends (item 2)
def blend_class(problem: tuple[str, ...]):
    """Register the decorated blend edit in :data:`BLENDS` under its name."""
    def register(fn):
        BLENDS[fn.__name__] = (fn, problem)
        return fn
    return register


@blend_class(("splits.train.blend.0.subflavors.cmd names code to import (subprocess.Popen)",
              "only in its MetadatasetV2 header", "refused, nothing loaded"))
def subflavor_runs_popen(doc, ran):
    doc["splits"]["train"]["blend"][0]["subflavors"] = {
        "cmd": {"__module__": "subprocess", "__class__": "Popen", "args": ["touch", str(ran)]}}
    return doc


@blend_class(("splits.train.blend.0.dataset_config is not a key of the blend form",))
def entry_names_another_dataset_yaml(doc, ran):
    doc["splits"]["train"]["blend"][0]["dataset_config"] = "../../evil.yaml"
    return doc


@blend_class(("its header names __module__ 'subprocess'",))
def header_names_another_module(doc, ran):
    doc["__module__"] = "subprocess"
    return doc


# ------------------------------------------------------------------------- item 3: every edit is seen
def reseal_report(out: Path, offsets: list[int] | None = None, shard: str = SHARD) -> None:
    """The attack of issue 19 item 3: the shard's sha256 (and the shards' total size) resealed in
    ``report.json`` (and its ``.tar.idx`` from ``offsets``), the run directory left as the run wrote it."""
    report = json.loads((out / "report.json").read_text())
    report["shard_sha256"][shard] = hashlib.sha256((out / shard).read_bytes()).hexdigest()
    report["shard_bytes"] = sum((out / name).stat().st_size for name in report["shard_sha256"])
    (out / "report.json").write_text(json.dumps(report, indent=1))
    if offsets is not None:
        (out / (shard + ".idx")).write_bytes(np.asarray(offsets, "<u8").tobytes())


def reseal_content_record(out: Path, offsets: list[int], shard: str = SHARD) -> None:
    """The shard resealed everywhere a checksum of a file or of a sample's content could catch an
    edit: ``report.json`` and ``.tar.idx`` (:func:`reseal_report`), its marker with the content sha256
    of the samples as they now are, and the run's hash record: only the count stage's record of each
    media item's sha256 (``.vlmpack/records``) is left as the run wrote it."""
    from vlmpack.packfmt import parse_pack, sample_digest

    digests = {}
    for key, parts in _read_tar(out / shard):
        parts = dict(parts)
        digests[key] = [sample_digest(s, [hashlib.sha256(parts[m["part"]]).hexdigest() for m in s["media"]])
                        for s in parse_pack(parts["json"])["samples"]]
    data = (out / shard).read_bytes()
    reseal_report(out, offsets, shard)
    reseal_marker(out, shard, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data), content_sha256=digests)
    write_hashes(out, list(json.loads((out / "report.json").read_text())["shard_sha256"]))


def edit_answer_digit(out: Path) -> str:
    """One digit of an assistant answer of :data:`SHARD` becomes another one, in place (the tar's
    bytes keep their length; Qwen's tokenizer splits digits one by one, so the token count stays):
    returns the sample's id."""
    data = bytearray((out / SHARD).read_bytes())
    with tarfile.open(out / SHARD) as tf:
        members = [m for m in tf if m.name.endswith(".json")]
    for m in members:
        body = bytes(data[m.offset_data:m.offset_data + m.size])
        obj = json.loads(body)
        for s in obj["samples"]:
            for c in (c for msg in s["messages"] if msg["role"] == "assistant" for c in msg["content"]):
                at = next((i for i, ch in enumerate(c.get("text", "")) if ch in "0123456789"), None)
                if at is not None:
                    c["text"] = c["text"][:at] + ("1" if c["text"][at] != "1" else "2") + c["text"][at + 1:]
                    new = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
                    assert len(new) == len(body) and new != body
                    data[m.offset_data:m.offset_data + m.size] = new
                    (out / SHARD).write_bytes(bytes(data))
                    return s["id"]
    raise AssertionError(f"no assistant answer with a digit in {SHARD}")


def replace_image(out: Path) -> list[int]:
    """An image of :data:`SHARD` replaced by another image of the output with the same recorded
    size and media tokens (other bytes): returns the new ``.tar.idx`` offsets."""
    def images(path):
        for key, parts in _read_tar(path):
            obj, parts = json.loads(dict(parts)["json"]), dict(parts)
            for s in obj["samples"]:
                for m in s["media"]:
                    yield (m["width"], m["height"], m["num_tokens"]), key, m["part"], parts[m["part"]]

    others = {}
    for path in sorted(out.glob("*.tar")):
        for size, _, _, data in images(path):
            others.setdefault(size, set()).add(data)
    for size, key, part, data in images(out / SHARD):
        other = next((d for d in sorted(others[size]) if d != data), None)
        if other is not None:
            packs = [(k, [(p, other if (k, p) == (key, part) else d) for p, d in parts])
                     for k, parts in _read_tar(out / SHARD)]
            return _write_tar(out / SHARD, packs)
    raise AssertionError("no two images of the same size and media tokens")


@output_class(("content sha256 differs from every one recorded", "at pack time"))
def answer_digit_edited_report_resealed(out, outside, ran):
    edit_answer_digit(out)
    reseal_report(out)


@output_class(("content sha256 differs from every one recorded",))
def answer_digit_edited_record_resealed(out, outside, ran):
    """Everything a checksum of a file could catch is sealed again (report, marker, hashes.json)."""
    edit_answer_digit(out)
    data = (out / SHARD).read_bytes()
    reseal_report(out)
    reseal_marker(out, SHARD, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data))
    write_hashes(out, list(json.loads((out / "report.json").read_text())["shard_sha256"]))


@output_class(("rejects.jsonl: sha256", "edited after packing"))
def rejects_edited(out, outside, ran):
    text = (out / "rejects.jsonl").read_text()
    (out / "rejects.jsonl").write_text(text.replace('"reason": "overlong"', '"reason": "not_utf8"', 1))
    assert (out / "rejects.jsonl").read_text() != text


@output_class(("report.json: sha256", "edited after packing"))
def report_counts_edited(out, outside, ran):
    report = json.loads((out / "report.json").read_text())
    report["rejected"] += 1
    report["records_read"] += 1
    (out / "report.json").write_text(json.dumps(report, indent=1))


@output_class((".vlmpack/config.json: sha256", "edited after packing"))
def run_config_edited(out, outside, ran):
    cfg = out / ".vlmpack" / "config.json"
    cfg.write_text(cfg.read_text().replace('"seq_len": 2048', '"seq_len": 2049', 1))
    assert '"seq_len": 2049' in cfg.read_text()


@output_class(("content sha256 differs from every one recorded",))
def image_replaced_report_resealed(out, outside, ran):
    """Also a stale-count line (tests/test_run_record.py checks both)."""
    reseal_report(out, replace_image(out))


@output_class(("the recorded count is not of these bytes", "a stale cached count"))
def image_replaced_content_record_resealed(out, outside, ran):
    """The shard, its marker (content sha256 of the samples as they are now included) and the hash
    record all agree: only the count stage's record of each media item's sha256 can see it."""
    reseal_content_record(out, replace_image(out))


@output_class(("the count record", "cannot be read", "media identity cannot be checked"))
def count_record_is_a_fifo(out, outside, ran):
    """The count stage's records replaced by FIFOs: never opened, one problem line."""
    for part in sorted((out / ".vlmpack" / "records").glob("part-*.jsonl")):
        part.unlink()
        fifo(part)


# ------------------------------------------------------------------------- audio members (issue 23 item 3)
def replace_audio(out: Path, same_tokens: bool) -> tuple[str, list[int]]:
    """An audio member (``aud<N>.<ext>``) of the output replaced, under its own name, by the bytes of
    another audio member of the output with the same extension and other bytes, whose recorded media
    tokens are the same (``same_tokens``: equal length, e.g. the same word at another sample rate) or
    not (another length). Returns the shard edited and its new ``.tar.idx`` offsets."""
    def audio(path):
        for key, parts in _read_tar(path):
            parts = dict(parts)
            for s in json.loads(parts["json"])["samples"]:
                for m in s["media"]:
                    if m["kind"] == "audio":
                        yield m["part"].rsplit(".", 1)[1], m["num_tokens"], key, m["part"], parts[m["part"]]

    shards = sorted(p.name for p in out.glob("*.tar"))
    every = [a for name in shards for a in audio(out / name)]
    for name in shards:
        for ext, tokens, key, part, data in audio(out / name):
            other = next((d for e, n, _, _, d in every if e == ext and d != data and (n == tokens) == same_tokens),
                         None)
            if other is not None:
                packs = [(k, [(p, other if (k, p) == (key, part) else d) for p, d in parts])
                         for k, parts in _read_tar(out / name)]
                return name, _write_tar(out / name, packs)
    raise AssertionError(f"no two audio members of one extension with {'equal' if same_tokens else 'other'} counts")


def audio_replaced_other_length_report_resealed(out):
    """Another real audio file of another length under the member's name, ``report.json`` resealed:
    its content sha256 is none recorded (check) and its header gives other media tokens (verify)."""
    shard, offsets = replace_audio(out, same_tokens=False)
    reseal_report(out, offsets, shard)


def audio_replaced_same_length_content_record_resealed(out):
    """Another real audio file with the same media tokens (other bytes), and everything but the count
    record resealed: no count differs, so only the media sha256 the count stage recorded sees it."""
    shard, offsets = replace_audio(out, same_tokens=True)
    reseal_content_record(out, offsets, shard)


#: The audio classes, crafted on a packed Qwen2.5-Omni output (``test_hostile_outputs.omni_packed``):
#: ``{name: (craft(out), check problem words, verify problem words, whether verify's recount sees it)}``.
AUDIO_OUTPUTS: dict[str, tuple[Callable[[Path], None], tuple[str, ...], tuple[str, ...], bool]] = {
    f.__name__: (f, check, verify, recount) for f, check, verify, recount in [
        (audio_replaced_other_length_report_resealed, ("content sha256 differs from every one recorded",),
         ("media tokens from its header",), True),
        (audio_replaced_same_length_content_record_resealed,
         ("the recorded count is not of these bytes", "a stale cached count"),
         ("the recorded count is not of these bytes",), False),
    ]}


# ------------------------------------------------------------------------- a video's sound track (issue 23 item 4)
def replace_sound_track(out: Path) -> tuple[str, str, str, list[int]]:
    """The first ``.mp4`` video member of the output (shards in name order) replaced, under its own
    name, by its own pictures (the video stream's packets copied, not re-encoded) with the sound of
    the output's first audio member as its sound track (AAC 16 kHz, mp4 with its index in front:
    :func:`demo_data.audio_corpus.dub_video`), a track of another length than the one counted. For a
    Qwen2.5-Omni output packed with ``use_audio_in_video``. Returns ``(shard, sample id, part, new
    .tar.idx offsets)``; the report is not resealed (:func:`reseal_report`)."""
    import tempfile

    from demo_data.audio_corpus import Dubbed, dub_video

    def members(path):
        for key, parts in _read_tar(path):
            parts = dict(parts)
            for s in json.loads(parts["json"])["samples"]:
                for m in s["media"]:
                    yield key, s["id"], m["kind"], m["part"], parts[m["part"]]

    shards = sorted(p.name for p in out.glob("*.tar"))
    every = [(name, *m) for name in shards for m in members(out / name)]
    sound = next(data for _, _, _, kind, _, data in every if kind == "audio")
    name, key, sid, part, video = next((n, k, s, p, d) for n, k, s, kind, p, d in every
                                       if kind == "video" and p.endswith(".mp4"))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "video.mp4").write_bytes(video)
        (Path(tmp) / "sound").write_bytes(sound)
        redubbed = dub_video(Dubbed("redubbed.mp4", "video.mp4", "sound", "mp4", "aac", 16000),
                             Path(tmp) / "video.mp4", Path(tmp) / "sound", Path(tmp) / "redubbed.mp4").read_bytes()
    packs = [(k, [(p, redubbed if (k, p) == (key, part) else d) for p, d in parts])
             for k, parts in _read_tar(out / name)]
    return name, sid, part, _write_tar(out / name, packs)
