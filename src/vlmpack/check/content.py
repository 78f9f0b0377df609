"""What ``OUT`` holds against what its run recorded, byte for byte (``vlmpack check`` with the run dir).

- Files (:func:`load_hashes`, :func:`check_files`): ``.vlmpack/hashes.json`` (sealed,
  :mod:`vlmpack.pack.seal`) must hold the sha256 of ``report.json``, ``rejects.jsonl``,
  ``.vlmpack/config.json``, ``manifest.parquet``, ``plan.npz`` and every shard and ``.tar.idx``;
  each is hashed again (a shard by :func:`vlmpack.check.shards.check_shard`, which streams it anyway).
- Samples (:func:`check_samples`, per pack): each sample's content sha256
  (:func:`vlmpack.packfmt.sample_digest` of its pack-object entry and its media bytes as the shard
  holds them) must be one the writer recorded for that pack in the shard's sealed marker
  (``.vlmpack/shards/<shard>.json``, ``result.content_sha256``): a changed character of a text or
  a field, or another media byte, is a problem naming the sample.
- Media identity (also :func:`check_samples`): the sha256 of each media part must be the one the
  count stage recorded for that item (the line after the sample's entry in
  ``.vlmpack/records/part-<task>.jsonl``, found through ``manifest.parquet``'s ``part``,
  ``rec_offset``, ``rec_len``): a count taken for other bytes (a stale cached count, media replaced
  after counting) is a problem naming the sample and part.

Every read is bounded and follows no link (:func:`vlmpack.check.findings.read_json`,
:func:`vlmpack.fsio.open_inside`); nothing raises for a crafted run record: it is a problem line.
At most :data:`MAX_LINES` sample lines are written, then one line with the count of the rest.
"""

from __future__ import annotations

import hashlib

from vlmpack.check.findings import Findings, eg, read_json
from vlmpack.energon.load import one_line
from vlmpack.fsio import LinkRefused, open_inside, unseal
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.pack.seal import FORMAT, HASHES, recorded_names
from vlmpack.packfmt import content_key, loads_json, sample_digest

#: The most per-sample problem lines written (the rest are counted in one more line).
MAX_LINES = 20
#: The most count-record files kept open at once.
_OPEN = 32
#: The most bytes read of one media item's ``[sha256, part, reference]`` in a count record beside three
#: bytes per byte of the media itself (a ``data:`` URI reference holds the media, percent-encoded at most
#: 3 bytes a byte); a longer line is a damaged record: memory stays bounded by the media already read.
_ITEM_BYTES = 64 << 10


def load_hashes(f: Findings) -> None:
    """``f.hashes`` (relative name -> ``{"sha256", "size"}``) from the sealed ``.vlmpack/hashes.json``;
    a problem when it is missing, unsealed or not of :data:`vlmpack.pack.seal.FORMAT`."""
    rel = f"{RUN_DIR}/{HASHES}"
    try:
        rec = unseal(read_json(f.out, rel))
    except FileNotFoundError:
        f.add(f"{f.out / rel} is missing: the files of {f.out} cannot be compared with the run's record of them "
              "(made by an older vlmpack, or a run that did not finish: run the same pack command again)")
        return
    except (OSError, ValueError) as e:
        f.add(f"{f.out / rel} cannot be read ({one_line(e)}): the files cannot be compared with the run's record")
        return
    files = rec.get("files") if isinstance(rec, dict) and rec.get("format") == FORMAT else None
    if not isinstance(files, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()):
        f.add(f"{f.out / rel} is no sealed {FORMAT} record (edited after packing?): the files cannot be compared "
              "with the run's record")
        return
    f.hashes = files


def recorded_sha256(f: Findings, name: str) -> str | None:
    """The sha256 ``hashes.json`` records for ``name`` (None without a record)."""
    return (f.hashes or {}).get(name, {}).get("sha256")


def check_files(f: Findings, shards: list[str]) -> None:
    """Every file of :func:`vlmpack.pack.seal.recorded_names` (shards aside: hashed by ``check_shard``)
    against ``f.hashes``; a name the record lacks is a problem too."""
    if f.hashes is None:
        return
    gone = sorted(str(g)[:200] for g in set(f.hashes) - set(recorded_names(shards)))
    if gone:
        f.add(f"{len(gone)} files recorded in {RUN_DIR}/{HASHES} are no (readable) part of the output now: {eg(gone)}")
    for name in recorded_names(shards):
        want = recorded_sha256(f, name)
        if want is None:
            f.add(f"{name} is not in the run's hash record {RUN_DIR}/{HASHES}: it cannot be compared")
            continue
        if name in shards:
            continue
        try:
            h = hashlib.sha256()
            with open_inside(f.out, name) as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except FileNotFoundError:
            f.add(f"{name} is missing; the run recorded it in {RUN_DIR}/{HASHES}")
            continue
        except (OSError, ValueError) as e:
            f.add(f"{name} cannot be read ({one_line(e)})")
            continue
        if h.hexdigest() != want:
            f.add(f"{name}: sha256 {h.hexdigest()[:16]}... differs from the {want[:16]}... recorded in "
                  f"{RUN_DIR}/{HASHES} ({name} was edited after packing)")


def shard_marker(f: Findings, name: str) -> dict:
    """The ``result`` of the shard's sealed marker ``.vlmpack/shards/<name>.json``, or ``{}`` (a
    problem with the run dir: its samples' content cannot be compared)."""
    rel = f"{RUN_DIR}/shards/{name}.json"
    try:
        result = (unseal(read_json(f.out, rel)) or {}).get("result")
    except (OSError, ValueError):
        result = None
    if not isinstance(result, dict) or not isinstance(result.get("content_sha256"), dict):
        if f.expected is not None:
            f.add(f"{rel} is missing, unsealed or holds no content_sha256: the samples of {name} cannot be "
                  "compared with what was packed")
        return result if isinstance(result, dict) else {}
    return result


def check_samples(f: Findings, shard: str, key: str, obj: dict, parts: dict[str, bytes | None],
                  recorded: dict | None) -> None:
    """Content sha256 and media identity of each sample of pack ``key`` (``obj``: its pack object,
    ``parts``: part name -> bytes; ``recorded``: the marker's ``content_sha256``, None without it)."""
    if f.expected is None:
        return
    want = recorded.get(key) if recorded is not None else None
    if recorded is not None and not isinstance(want, list):
        _line(f, f"{shard}/{key}: no content sha256 recorded for this pack at pack time (a pack added after packing)")
        want = None
    for s in obj["samples"]:
        data = [parts.get(m["part"]) for m in s["media"]]
        if any(d is None for d in data):  # a missing or unread part: its problem is said
            continue
        shas = [hashlib.sha256(d).hexdigest() for d in data]
        if f.content_keys is not None:  # --dedup exact: no two packed samples hold the same content
            first = f.content_keys.setdefault(content_key(s, shas), str(s["id"]))
            if first != str(s["id"]):
                _line(f, f"{shard}/{key} sample {s['id']!r}: the same content as sample {first!r}, but report.json "
                      "says the run packed with --dedup exact")
        if want is not None and sample_digest(s, shas) not in want:
            _line(f, f"{shard}/{key} sample {s['id']!r}: content sha256 differs from every one recorded for the pack "
                  f"at pack time ({RUN_DIR}/shards/{shard}.json): its text, fields or media were changed after packing")
        counted = _counted(f, (s.get("id_kind", "str"), str(s["id"])), [len(d) for d in data])
        for m, got, exp in zip(s["media"], shas, counted or ()):
            if got != exp:
                _line(f, f"{shard}/{key} sample {s['id']!r} part {m['part']}: sha256 {got[:16]}... of its bytes, the "
                      f"run counted {str(exp)[:16]}... ({RUN_DIR}/records): the recorded count is not of these bytes "
                      "(a stale cached count, or media replaced after counting)")


def _line(f: Findings, msg: str) -> None:
    f.content_lines += 1
    if f.content_lines <= MAX_LINES:
        f.add(msg)


def finish(f: Findings) -> None:
    """The line that counts the sample problems beyond :data:`MAX_LINES`; closes the count records."""
    if f.content_lines > MAX_LINES:
        f.add(f"... and {f.content_lines - MAX_LINES} more sample content problems")
    for fh in f.open_records.values():
        fh.close()
    f.open_records.clear()


def _counted(f: Findings, pair: tuple[str, str], sizes: list[int]) -> list | None:
    """The media sha256 list the count stage recorded for sample ``pair`` (media of ``sizes`` bytes
    in the shard), or None when the run record has no count record for it (its problem is said once)."""
    n = len(sizes)
    at = (f.records_at or {}).get(pair)
    if at is None:
        return None
    part, offset, length, num_media = at
    rel = f"{RUN_DIR}/records/part-{part:06d}.jsonl"
    try:
        fh = f.open_records.pop(rel, None) or open_inside(f.out, rel)
        f.open_records[rel] = fh  # most recent last
        if len(f.open_records) > _OPEN:
            f.open_records.pop(next(iter(f.open_records))).close()
        fh.seek(offset + length + 1)
        media = loads_json(fh.readline(num_media * _ITEM_BYTES + 3 * sum(sizes) + 3))  # [[sha256, part, ref], ...]
        if not (isinstance(media, list) and len(media) == num_media
                and all(isinstance(x, list) and x and isinstance(x[0], str) for x in media)):
            raise ValueError("no media [sha256, part, reference] list after the sample")
        shas = [x[0] for x in media]
    except (OSError, ValueError) as e:
        if not f.records_broken:
            f.records_broken = True
            what = str(e) if isinstance(e, LinkRefused) else one_line(e)
            f.add(f"the count record {rel} cannot be read at byte {offset + length + 1} ({what}): media identity "
                  "cannot be checked against what was counted")
        return None
    if len(shas) != n:
        _line(f, f"sample {pair[1]!r}: {n} media parts in the shard, the run counted {len(shas)}")
        return None
    return shas
