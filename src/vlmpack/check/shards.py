"""The shards of ``OUT``, for ``vlmpack check`` (steps 3 and 4 of :mod:`vlmpack.check`): per shard its
sha256 and size against the records, its tar read to the end-of-archive blocks through
:class:`vlmpack.packfmt.ShardPacks` (the one reader that groups members into packs), every pack
object and its parts, and its ``.tar.idx`` against the tar's offsets."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import numpy as np

from vlmpack.check.content import check_samples, recorded_sha256, shard_marker
from vlmpack.check.findings import Findings, eg, is_int
from vlmpack.energon.load import one_line
from vlmpack.fsio import LinkRefused, open_inside, read_inside
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.pack.seal import HASHES
from vlmpack.packfmt import EXTRA_PARTS, FORMAT, MemberTooLarge, ShardPacks, parse_input_ids, split_member
from vlmpack.packing.alignment import aligned_lengths
from vlmpack.packing.balance import rank_step_loads

#: The progress label of the packs read from the tars (:meth:`Findings.tick`).
SHARDS_STEP = "check shards"


def check_shard(f: Findings, name: str) -> None:
    """Every check of the shard ``name`` (raises ``OSError`` for a shard that cannot be read)."""
    path = f.out / name
    h, size = hashlib.sha256(), 0
    with open_inside(f.out, name) as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    f.totals["bytes"] += size
    marker = shard_marker(f, name) if f.expected is not None else {}  # the writer's ShardResult
    records = {"report.json": (f.report or {}).get("shard_sha256", {}).get(name),
               f"{RUN_DIR}/{HASHES}": recorded_sha256(f, name), f"{RUN_DIR}/shards/{name}.json": marker.get("sha256")}
    differ = [rec for rec, want in records.items() if want is not None and want != h.hexdigest()]
    if differ:
        f.add(f"{name}: sha256 {h.hexdigest()[:16]}... differs from the one recorded in {', '.join(differ)} "
              "(the shard was modified after packing)")
    if is_int(marker.get("nbytes")) and marker["nbytes"] != size:
        f.add(f"{name}: {size} bytes, the run record says {marker['nbytes']}")
    recorded = marker.get("content_sha256") if isinstance(marker.get("content_sha256"), dict) else None
    starts, end, whole = read_tar(f, name, path, size, recorded)
    count = (f.counts or {}).get(name)
    if whole and count is not None and count != len(starts):
        f.add(f".info.json counts {count} packs in {name}, the tar holds {len(starts)}")
    if count is not None and count > size // 512:  # more packs than its bytes can hold: not for Energon to size
        f.load_ok = False
    # no more offsets than one pack per 512-byte block of the tar could need: a bound whatever .info.json says
    cap = 8 * (max(len(starts), min(count or 0, size // 512)) + 1)
    try:
        raw = read_inside(f.out, name + ".idx", cap)
    except FileNotFoundError:
        f.add(f"{name}.idx is missing: Energon cannot index {name}")
        return
    except LinkRefused as e:
        f.add(str(e))
        f.load_ok = False
        return
    except ValueError:
        f.add(f"{name}.idx holds more than the {cap // 8 - 1} packs (+ end entry) {name} can hold")
        return
    if len(raw) % 8:
        f.add(f"{name}.idx is {len(raw)} bytes, not a multiple of 8 (corrupt)")
        return
    offs, want_offs = np.frombuffer(raw, "<u8").astype(np.int64), np.asarray(starts + [end], np.int64)
    if count is not None and len(offs) - 1 != count:
        f.add(f"{name}.idx holds {len(offs) - 1} packs (+ end entry), .info.json counts {count}")
    elif whole and len(offs) != len(want_offs):
        f.add(f"{name}.idx holds {len(offs)} offsets, the tar needs {len(want_offs)} (N packs + end)")
    elif whole and not np.array_equal(offs, want_offs):
        i = int(np.flatnonzero(offs != want_offs)[0])
        f.add(f"{name}.idx entry {i} is {offs[i]}, the tar has {want_offs[i]}")


def read_tar(f: Findings, name: str, path: Path, size: int, recorded: dict | None = None
             ) -> tuple[list[int], int, bool]:
    """Walk the tar's packs (:class:`vlmpack.packfmt.ShardPacks`, every part read up to its limit)
    and check every pack (``recorded``: the shard marker's ``content_sha256``, pack key -> sample
    digests); returns the packs' header offsets, the end-of-archive offset and whether the tar was
    whole (else problems were added)."""
    starts: list[int] = []
    too_large: set[str] = set()

    def bad(kind: str, m) -> None:
        if kind == "truncated":
            f.add(f"{name}: truncated (member {m.name} ends at byte {m.offset_data + m.size}, "
                  f"the file has {size})")
        elif kind == "too_large":
            f.add(str(MemberTooLarge(path, m)))
            too_large.add(split_member(m.name)[0])
            f.load_ok = False  # Energon would read it whole
        else:
            f.add(f"{name}: bad member {m.name[:200]!r} (not a regular file named <key>.<part>)")

    packs = ShardPacks(path, size=size, on_bad=bad)
    try:
        for pack in packs:
            if pack.key in f.keys:
                f.add(f"{name}: key {pack.key} appears twice in the dataset (keys must be unique, "
                      "contiguous)")
            f.keys[pack.key] = name
            starts.append(pack.offset)
            f.tick(SHARDS_STEP)
            if pack.key not in too_large:  # (its problem is said)
                check_pack(f, name, pack.key, pack.parts, recorded)
    except (tarfile.TarError, OSError, EOFError) as e:
        f.add(f"{name}: not a readable tar ({one_line(e)})")
        return starts, 0, False
    if not packs.whole:  # stopped at a truncated member
        return starts, 0, False
    end = packs.end
    with open_inside(f.out, name) as fh:
        fh.seek(end)
        tail = fh.read(1 << 16)
    if len(tail) < 1024 or tail.strip(b"\0"):
        f.add(f"{name}: no end-of-archive blocks after byte {end} (truncated, or data appended)")
        return starts, end, False
    return starts, end, True


def check_pack(f: Findings, shard: str, key: str, parts: dict[str, bytes | None],
               recorded: dict | None = None) -> None:
    """One pack: its object (read by the output layout's sink, ``f.sink``, from ``parts``, the part
    name -> bytes of its members, which it names as the object does; :func:`vlmpack.packfmt.parse_pack`
    gives each field its type) is a
    ``vlmpack.pack/1`` pack whose counts add up and whose samples reference exactly its media
    parts; its ids and tokens go into ``f``; each sample's content sha256 and media identity
    against the run record (:func:`vlmpack.check.content.check_samples`, ``recorded``: the shard
    marker's ``content_sha256``)."""
    where = f"{shard}/{key}"
    try:
        obj, parts = f.sink.read_pack(parts) if parts.get("json") is not None else (None, parts)
    except ValueError as e:
        obj = one_line(e)
    if not isinstance(obj, dict):
        why = obj if isinstance(obj, str) else f"not a {FORMAT} pack"
        f.add(f"{where}: bad or missing member {key}.json ({why})")
        return
    ids, total, media = [], 0, set()
    for s in obj["samples"]:
        pair = (s.get("id_kind", "str"), str(s["id"]))
        ids.append(pair)
        total += s["num_tokens"]
        media.update(m["part"] for m in s["media"])
        want = None if f.expected is None else f.expected.get(pair)
        if want is not None and want != s["num_tokens"]:
            f.token_diffs.append(f"{where} id {pair[1]!r}: {s['num_tokens']} vs {want}")
    seq_len, n, rep_len = obj["seq_len"], obj["num_tokens"], (f.report or {}).get("seq_len")
    if total != n:
        f.add(f"{where}: samples' num_tokens sum to {total}, the pack records {n}")
    elif n > seq_len:
        f.add(f"{where}: {n} tokens > seq_len {seq_len}")
    if is_int(rep_len) and seq_len != rep_len:
        f.add(f"{where}: seq_len {seq_len}, report.json says {rep_len}")
    multiple = ((f.report or {}).get("alignment") or {}).get("sample_multiple")
    if is_int(multiple) and multiple > 1 and total == n:  # --cp-size: the trainer pads every sample (THD)
        padded = int(aligned_lengths(np.array([s["num_tokens"] for s in obj["samples"]]), multiple).sum())
        if padded > seq_len:
            f.add(f"{where}: {padded} tokens with each sample padded to a multiple of {multiple} > seq_len {seq_len}")
    names = set(parts)
    if media - names:
        f.add(f"{where}: referenced media parts missing from the tar: {eg(sorted(media - names))}")
    if names - media - EXTRA_PARTS:
        f.add(f"{where}: bad member(s) referenced by no sample: {eg(sorted(names - media - EXTRA_PARTS))}")
    if parts.get("input_ids.npy") is not None:  # --pretokenize: the header must match its bytes and tokens
        try:
            length = len(parse_input_ids(parts["input_ids.npy"]))
            if length != n:
                f.add(f"{where}: input_ids.npy holds {length} ids, the pack records {n} tokens")
        except ValueError as e:  # its header claims what its bytes do not hold: np.load would allocate it
            f.add(f"{where}: bad member {key}.input_ids.npy ({one_line(e)})")
            f.load_ok = False
    check_samples(f, shard, key, obj, parts, recorded)
    f.packs[key] = (shard, ids)
    f.loads.append((sum(m["num_tokens"] for s in obj["samples"] for m in s["media"]), total))
    f.totals.update(packs=1, samples=len(ids), tokens=total)


def check_data_parallel(f: Findings) -> None:
    """With ``report.json``'s ``data_parallel`` (``--dp-size``): the packs, in output order (shards in
    order, packs in tar order), fill whole global batches, and their per-step, per-rank loads
    (:func:`vlmpack.packing.balance.rank_step_loads`) are the ``after`` figures the report records."""
    dp = (f.report or {}).get("data_parallel")
    if not isinstance(dp, dict) or not f.loads:
        return
    n, k, ranks = len(f.loads), dp.get("global_batch_size"), dp.get("dp_size")
    if not (is_int(k) and is_int(ranks) and k > 0 and ranks > 0 and k % ranks == 0):
        f.add(f"report.json: data_parallel records no valid dp_size / global_batch_size ({ranks!r}, {k!r})")
        return
    if n % k:
        f.add(f"{n} packs are not a multiple of the global batch size {k} (report.json's data_parallel)")
        return
    vision, tokens = (np.array(x, dtype=np.int64) for x in zip(*f.loads))
    found = rank_step_loads(vision, tokens, ranks, k)
    if found != dp.get("after"):
        f.add(f"the packs' per-rank loads in output order {found} differ from report.json's data_parallel "
              f"{dp.get('after')} (packs reordered or replaced)")
