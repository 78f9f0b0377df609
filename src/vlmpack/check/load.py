"""The Energon half of ``vlmpack check`` (step 6 of :mod:`vlmpack.check`): one pass of Energon's own
loader over ``OUT``'s shards, every pack it yields compared with what the tars hold (``Findings.keys``,
``Findings.packs``), every media part decoded as the training side does, each distinct part once
(equal bytes decode alike: a part whose kind, extension and sha256 already decoded in this pass is
not decoded again; one that fails is decoded, and reported, at each reference). Energon is given
:func:`vlmpack.energon.load.energon_view`: ``.nv-meta`` as vlmpack writes it (the bytes generated,
not the files of ``OUT``, which :mod:`vlmpack.check.nvmeta` found equal), so nothing ``OUT`` holds runs."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from vlmpack.check.findings import Findings, eg, is_int
from vlmpack.energon.load import ErrorLog, energon_view, iter_energon_packs, one_line
from vlmpack.errors import ConfigError, VlmpackError
from vlmpack.media.kinds import KINDS, kind_of_part


def take(f: Findings, pack, res: dict, seen: Counter, pairs: Counter, decoded: set[tuple[str, str, bytes]]
         ) -> None:
    """Account one pack Energon yielded and compare it with the tar's; ``decoded`` holds the
    (kind, extension, sha256) of the media parts that decoded so far in this pass (updated)."""
    key, n = pack.__key__, pack.num_tokens if is_int(pack.num_tokens) else 0
    samples = [s for s in pack.samples if isinstance(s, dict)] if isinstance(pack.samples, list) else []
    ids = [(s.get("id_kind", "str"), str(s.get("id"))) for s in samples]
    seen[key] += 1
    pairs.update(ids)
    res["ids"].update(p[1] for p in ids)
    res.update(packs=res["packs"] + 1, samples=res["samples"] + len(ids), tokens=res["tokens"] + n,
               max_pack_tokens=max(res["max_pack_tokens"], n))
    if key not in f.keys:
        f.add(f"Energon yielded pack {key}, which the tars do not hold")
    elif key in f.packs and ids != f.packs[key][1]:
        f.add(f"{f.packs[key][0]}/{key}: Energon yielded other sample ids than the tar holds")
    n_media = sum(len(s.get("media") or ()) for s in samples)
    if len(pack.media) != n_media:
        f.add(f"{f.keys.get(key, '?')}/{key}: Energon yielded {len(pack.media)} media for {n_media} "
              "referenced")
    owner = {m.get("part"): s.get("id") for s in samples for m in (s.get("media") or ()) if isinstance(m, dict)}
    for part, raw in zip(pack.media_parts, pack.media):  # decoded as the training side does
        where = f"{f.keys.get(key, '?')}/{key}: sample {owner.get(part)!r} part {part}"
        kind = KINDS[kind_of_part(str(part)) or "image"]  # a part of no kind's name: decoded as an image
        same = None
        if isinstance(raw, (bytes, bytearray, memoryview)):
            same = (kind.name, str(part).rpartition(".")[2], hashlib.sha256(raw).digest())
            if same in decoded:
                continue
        try:
            kind.check_stored(raw, str(part), where)
        except VlmpackError as e:
            f.add(str(e))
        else:
            if same is not None:
                decoded.add(same)


def check_energon(f: Findings, num_workers: int) -> dict:
    """Load the shards of ``f.out`` once through Energon (``num_workers`` loader processes), with
    vlmpack's own ``.nv-meta`` bytes for ``f.counts`` (:func:`~vlmpack.energon.load.energon_view`;
    call it only when ``f.meta_ok`` and ``f.load_ok``), and add what differs from the tars to ``f``;
    returns the counts as Energon yielded them (``packs``, ``samples``, ``unique_ids``, ``tokens``,
    ``max_pack_tokens``, ``duplicates``, ``ids``)."""
    res = {"packs": 0, "samples": 0, "tokens": 0, "max_pack_tokens": 0, "ids": Counter()}
    seen: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    decoded: set[tuple[str, str, bytes]] = set()
    raised = None
    with tempfile.TemporaryDirectory(prefix="vlmpack-check-") as tmp:
        log = ErrorLog(Path(tmp) / "errors.jsonl")
        try:  # Energon's prints, pin_memory / PIL palette warnings: noise here (failures reach `log`)
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    energon_view(f.out, f.counts or {}, f.sink.check_files()) as view:
                warnings.simplefilter("ignore")
                f.tick("load through Energon", 0, len(f.packs) or None)
                for pack in iter_energon_packs(view, num_workers=num_workers, error_handler=log):
                    take(f, pack, res, seen, pairs, decoded)
                    f.tick("load through Energon")
        except ConfigError as e:
            f.add(f"cannot load through Energon: {e}")
            return res
        except Exception as e:  # noqa: BLE001 - whatever Energon raises is a finding of the gate
            raised = one_line(e)
        errors = [json.loads(x) for x in log.path.read_text().splitlines()] if log.path.exists() else []
    for err in errors[:10]:
        f.add(f"Energon could not load {err['shard'] or '?'}/{err['key'] or '?'}: {err['error']}")
    if len(errors) > 10:
        f.add(f"Energon could not load {len(errors) - 10} more samples")
    lost = [k for k in f.packs if k not in seen]
    if raised is not None:
        f.add(f"Energon raised while loading (after {res['packs']} of {len(f.packs)} packs): {raised}")
    elif lost:
        n = sum(len(f.packs[k][1]) for k in lost)
        f.add(f"Energon did not yield {len(lost)} packs ({n} samples lost at load): "
              f"{eg([f'{f.packs[k][0]}/{k}' for k in lost])}")
    twice = [k for k, v in seen.items() if v > 1]
    if twice:
        f.add(f"Energon yielded {len(twice)} packs more than once: {eg(twice)}")
    res.update(unique_ids=len(res["ids"]), duplicates=sum(1 for v in pairs.values() if v > 1))
    return res
