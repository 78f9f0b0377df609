"""The Energon half of ``vlmpack check`` (step 6 of :mod:`vlmpack.check`): one pass of Energon's own
loader over ``OUT``, every pack it yields compared with what the tars hold, every media part decoded
as the training side does. A mixin of the checker in :mod:`vlmpack.check`, which holds the tars'
findings (``keys``, ``packs``) and the problem list (``add``).
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from vlmpack.energon.load import ErrorLog, iter_energon_packs, one_line
from vlmpack.errors import ConfigError, VlmpackError


def eg(items: list, n: int = 3) -> str:
    """The first ``n`` items as ``"a, b, c, ..."`` (problem lines name a few examples)."""
    return ", ".join(str(x) for x in items[:n]) + (", ..." if len(items) > n else "")


def is_int(v) -> bool:
    """An ``int`` that is not a ``bool`` (JSON counts)."""
    return isinstance(v, int) and not isinstance(v, bool)


class EnergonChecks:
    """``take`` and ``check_energon`` of the checker (attributes ``out``, ``keys``, ``packs`` and
    ``add`` come from :class:`vlmpack.check._Checker`)."""

    # ---------------------------------------------------------------------------- Energon
    def take(self, pack, res: dict, seen: Counter, pairs: Counter) -> None:
        """Account one pack Energon yielded and compare it with the tar's."""
        from vlmpack.train.encode import open_image
        key, n = pack.__key__, pack.num_tokens if is_int(pack.num_tokens) else 0
        samples = [s for s in pack.samples if isinstance(s, dict)] if isinstance(pack.samples, list) else []
        ids = [(s.get("id_kind", "str"), str(s.get("id"))) for s in samples]
        seen[key] += 1
        pairs.update(ids)
        res["ids"].update(p[1] for p in ids)
        res.update(packs=res["packs"] + 1, samples=res["samples"] + len(ids), tokens=res["tokens"] + n,
                   max_pack_tokens=max(res["max_pack_tokens"], n))
        if key not in self.keys:
            self.add(f"Energon yielded pack {key}, which the tars do not hold")
        elif key in self.packs and ids != self.packs[key][1]:
            self.add(f"{self.packs[key][0]}/{key}: Energon yielded other sample ids than the tar holds")
        n_media = sum(len(s.get("media") or ()) for s in samples)
        if len(pack.media) != n_media:
            self.add(f"{self.keys.get(key, '?')}/{key}: Energon yielded {len(pack.media)} media for {n_media} "
                     "referenced")
        owner = {m.get("part"): s.get("id") for s in samples for m in (s.get("media") or ()) if isinstance(m, dict)}
        for part, raw in zip(pack.media_parts, pack.media):  # decoded as the training side does
            where = f"{self.keys.get(key, '?')}/{key}: sample {owner.get(part)!r} part {part}"
            if str(part).startswith("vid"):  # a video part: every frame decodes, as many as its header says
                from vlmpack.errors import MediaError
                from vlmpack.media.probe import probe_bytes
                try:
                    probe_bytes(bytes(raw), "video", "decode", name=str(part))
                except MediaError as e:
                    self.add(f"{where}: video does not decode ({e.detail}); re-pack it")
                continue
            try:
                open_image(raw, where=where)
            except VlmpackError as e:
                self.add(str(e))

    def check_energon(self, num_workers: int) -> dict:
        res = {"packs": 0, "samples": 0, "tokens": 0, "max_pack_tokens": 0, "ids": Counter()}
        seen: Counter[str] = Counter()
        pairs: Counter[tuple[str, str]] = Counter()
        raised = None
        with tempfile.TemporaryDirectory(prefix="vlmpack-check-") as tmp:
            log = ErrorLog(Path(tmp) / "errors.jsonl")
            try:  # Energon's prints, pin_memory / PIL palette warnings: noise here (failures reach `log`)
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    for pack in iter_energon_packs(self.out, num_workers=num_workers, error_handler=log):
                        self.take(pack, res, seen, pairs)
            except ConfigError as e:
                self.add(f"cannot load through Energon: {e}")
                return res
            except Exception as e:  # noqa: BLE001 - whatever Energon raises is a finding of the gate
                raised = one_line(e)
            errors = [json.loads(x) for x in log.path.read_text().splitlines()] if log.path.exists() else []
        for err in errors[:10]:
            self.add(f"Energon could not load {err['shard'] or '?'}/{err['key'] or '?'}: {err['error']}")
        if len(errors) > 10:
            self.add(f"Energon could not load {len(errors) - 10} more samples")
        lost = [k for k in self.packs if k not in seen]
        if raised is not None:
            self.add(f"Energon raised while loading (after {res['packs']} of {len(self.packs)} packs): {raised}")
        elif lost:
            n = sum(len(self.packs[k][1]) for k in lost)
            self.add(f"Energon did not yield {len(lost)} packs ({n} samples lost at load): "
                     f"{eg([f'{self.packs[k][0]}/{k}' for k in lost])}")
        twice = [k for k, v in seen.items() if v > 1]
        if twice:
            self.add(f"Energon yielded {len(twice)} packs more than once: {eg(twice)}")
        res.update(unique_ids=len(res["ids"]), duplicates=sum(1 for v in pairs.values() if v > 1))
        return res
