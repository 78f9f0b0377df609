"""``vlmpack check``: a gate that ``OUT`` is exactly what ``vlmpack pack`` wrote, and that it loads.

Checks, cheapest first; every finding is one line in ``problems`` and nothing raises:

1. ``OUT`` is an existing, non-empty directory with a readable ``report.json`` (an object with
   ``shard_sha256``) and ``.nv-meta/`` (``.info.json`` with ``shard_counts``, ``split.yaml``,
   ``dataset.yaml``).
2. Shard lists: ``.info.json`` and ``report.json`` list the same shards, each of them exists,
   and no ``<prefix>-*`` file (a tar, an ``.idx``, a ``.tmp``) listed by neither lies in ``OUT``.
3. Per shard: the sha256 (streamed) equals ``report.json``'s, the size the run dir marker's,
   and all sizes sum to ``shard_bytes``; the tar reads to its end-of-archive zero blocks (not
   truncated, nothing appended); every member is a regular file ``<key>.<part>`` with contiguous,
   globally unique keys; each key has a ``json`` part of format ``vlmpack.pack/1`` and exactly
   the media parts it references; ``<shard>.idx`` exists and holds N+1 offsets equal to the
   tar's sample header offsets and its end-of-archive offset, N = ``.info.json``'s count.
4. Token counts: in each pack the samples' ``num_tokens`` sum to the pack's ``num_tokens``
   ``<= seq_len`` (= ``report.json``'s); each sample's ``num_tokens`` equals the manifest's;
   the totals equal ``report.json``'s ``packs``, ``samples_packed`` and ``tokens``.
5. Completeness against the run dir ``OUT/.vlmpack`` (``manifest.parquet``: columns ``id``,
   ``num_tokens``, optional int8 ``id_kind``; ``plan.npz``: :class:`vlmpack.packing.PackPlan`
   whose ``overlong`` rows were dropped): every manifest id not overlong is in exactly one pack,
   and no other id is. Ids are compared as ``(kind, id)`` with kind ``"str"|"int"|"line"``
   (manifest ``id_kind`` 0/1/2, pack JSON ``"id_kind"``; missing means ``"str"``). A missing run
   dir is a problem unless ``run_dir=False``.
6. Energon (when ``.nv-meta`` is complete): one pass of Energon's own ``get_train_dataset(OUT,
   repeat=False, auto_decode=False)``; every pack found in the tars comes out exactly once with
   the same sample ids, nothing else comes out, and every media part decodes with the training
   side's :func:`vlmpack.train.encode.open_image` (accepted formats only: a shard never makes
   ``check`` open an EPS). Samples Energon fails on (in training it
   logs and skips them) and exceptions it raises become problem lines naming shard and key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np

from vlmpack.check_load import EnergonChecks
from vlmpack.check_load import eg as _eg
from vlmpack.check_load import is_int as _is_int
from vlmpack.energon.load import iter_energon_packs
from vlmpack.energon.load import one_line as _one_line
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.packfmt import EXTRA_PARTS, FORMAT, ShardPacks
from vlmpack.records import ID_KINDS  # manifest ``id_kind`` int8 value -> pack JSON ``"id_kind"``

__all__ = ["check_output", "iter_energon_packs"]



def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


class _Checker(EnergonChecks):
    """One check of ``out``: the problems found and what the tars hold."""

    def __init__(self, out: Path):
        self.out = out
        self.problems: list[str] = []
        self.report: dict | None = None
        self.counts: dict[str, int] | None = None  # .info.json shard_counts
        self.meta_ok = False  # .nv-meta complete: Energon may load it
        self.expected: dict[tuple[str, str], int] | None = None  # manifest (kind, id) -> num_tokens, not overlong
        self.keys: dict[str, str] = {}  # every key found in a tar -> its shard
        self.packs: dict[str, tuple[str, list[tuple[str, str]]]] = {}  # key -> (shard, (kind, id) of its samples)
        self.totals: Counter[str] = Counter()
        self.token_diffs: list[str] = []

    def add(self, msg: str) -> None:
        self.problems.append(msg)

    # ---------------------------------------------------------------------------- records
    def load_records(self) -> bool:
        """Read report.json and .nv-meta; False when the report says the run failed (nothing more to check)."""
        rp, meta = self.out / "report.json", self.out / ".nv-meta"
        try:
            rep = _read_json(rp)
            if isinstance(rep, dict) and rep.get("status") == "failed":
                self.add(f"{rp} records a failed run (stage {rep.get('stage')!r}): {self.out} is no usable output")
                return False
            if not isinstance(rep, dict) or not isinstance(rep.get("shard_sha256"), dict):
                raise ValueError("not a vlmpack report (no shard_sha256 object)")
            self.report = rep
        except FileNotFoundError:
            self.add(f"{rp} is missing: shard hashes cannot be checked (not a finished vlmpack output)")
        except (OSError, ValueError) as e:
            self.add(f"{rp} is corrupt ({_one_line(e)}): shard hashes cannot be checked")
        if not meta.is_dir():
            self.add(f"{meta} is missing: Energon cannot load {self.out}")
            return True
        try:
            counts = _read_json(meta / ".info.json")["shard_counts"]
            if not isinstance(counts, dict) or not all(_is_int(v) for v in counts.values()):
                raise ValueError("shard_counts is not an object of integers")
            self.counts = counts
        except FileNotFoundError:
            self.add(f"{meta / '.info.json'} is missing: Energon cannot load {self.out}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.add(f"{meta / '.info.json'} is corrupt ({_one_line(e)})")
        missing = [n for n in ("split.yaml", "dataset.yaml") if not (meta / n).is_file()]
        if missing:
            self.add(f"{meta} lacks {', '.join(missing)}: Energon cannot load {self.out}")
        self.meta_ok = self.counts is not None and not missing
        return True

    def load_run_dir(self) -> None:
        run = self.out / RUN_DIR
        man, plan_path = run / "manifest.parquet", run / "plan.npz"
        if not man.is_file() or not plan_path.is_file():
            self.add(f"the run record {run}/manifest.parquet + plan.npz is missing: completeness and per-sample "
                     "token counts cannot be checked (pass --no-run-dir to check without it)")
            return
        try:
            import pyarrow.parquet as pq

            from vlmpack.packing import PackPlan

            table = pq.read_table(man)
            ids = [str(x) for x in table.column("id").to_pylist()]
            tokens = table.column("num_tokens").to_numpy().astype(np.int64).tolist()
            kinds = (table.column("id_kind").to_numpy().astype(np.int64) if "id_kind" in table.column_names
                     else np.zeros(len(ids), np.int64))
            plan = PackPlan.from_npz(plan_path)
        except Exception as e:  # noqa: BLE001 - an unreadable run record is a finding, not a crash
            self.add(f"the run record in {run} is unreadable ({_one_line(e)}): completeness cannot be checked")
            return
        over = plan.overlong
        if plan.num_samples != len(ids) or (len(over) and (over.min() < 0 or over.max() >= len(ids))) or (
                len(kinds) and (kinds.min() < 0 or kinds.max() >= len(ID_KINDS))):
            self.add(f"the run record in {run} is inconsistent ({plan.num_samples} samples planned, {len(ids)} in "
                     "the manifest, or id_kind outside 0..2): completeness cannot be checked")
            return
        keep = np.ones(len(ids), bool)
        keep[over] = False
        self.expected = {(ID_KINDS[k], i): t for i, t, k, ok in zip(ids, tokens, kinds.tolist(), keep.tolist()) if ok}

    # ---------------------------------------------------------------------------- shard lists
    def shard_names(self) -> list[str]:
        """The shards listed by .info.json and/or report.json that exist; problems for the rest."""
        info, rep = set(self.counts or ()), set(self.report["shard_sha256"]) if self.report else set()
        if self.counts is not None and self.report is not None:
            for a, b, names in (("report.json", ".info.json", rep - info), (".info.json", "report.json", info - rep)):
                if names:
                    self.add(f"{len(names)} shards listed in {a} but not in {b}: {_eg(sorted(names))}")
        listed, good = sorted(info | rep), []
        for name in listed:
            if Path(name).is_absolute() or ".." in Path(name).parts:
                self.add(f"shard name {name!r} points outside {self.out}")
            elif not (self.out / name).is_file():
                self.add(f"shard {name} is listed but missing from {self.out}")
            else:
                good.append(name)
        prefixes = {n.rsplit("-", 1)[0] for n in listed if "-" in n} | {"shard"}
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            prefixes.add(str(_read_json(self.out / RUN_DIR / "config.json")["options"]["shard_prefix"]))
        known = set(listed) | {n + ".idx" for n in listed}
        foreign = sorted({p.name for pre in prefixes for p in self.out.glob(f"{pre}-*") if p.name not in known})
        if foreign:
            self.add(f"{len(foreign)} foreign or leftover files listed by neither .info.json nor report.json: "
                     f"{_eg(foreign)}")
        return good

    # ---------------------------------------------------------------------------- one shard
    def check_shard(self, name: str) -> None:
        path, idx_path = self.out / name, self.out / (name + ".idx")
        h, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
        self.totals["bytes"] += size
        try:  # the run dir's marker of the shard: {"sha256", "nbytes", ...}
            marker = _read_json(self.out / RUN_DIR / "shards" / (name + ".json"))
        except (OSError, ValueError):
            marker = {}
        marker = marker if isinstance(marker, dict) else {}
        want = (self.report or {}).get("shard_sha256", {}).get(name) or marker.get("sha256")
        if want is not None and h.hexdigest() != want:
            self.add(f"{name}: sha256 {h.hexdigest()[:16]}... differs from the recorded {str(want)[:16]}... "
                     "(the shard was modified after packing)")
        if _is_int(marker.get("nbytes")) and marker["nbytes"] != size:
            self.add(f"{name}: {size} bytes, the run record says {marker['nbytes']}")
        starts, end, whole = self.read_tar(name, path, size)
        count = (self.counts or {}).get(name)
        if whole and count is not None and count != len(starts):
            self.add(f".info.json counts {count} packs in {name}, the tar holds {len(starts)}")
        if not idx_path.is_file():
            self.add(f"{name}.idx is missing: Energon cannot index {name}")
            return
        raw = idx_path.read_bytes()
        if len(raw) % 8:
            self.add(f"{name}.idx is {len(raw)} bytes, not a multiple of 8 (corrupt)")
            return
        offs, want_offs = np.frombuffer(raw, "<u8").astype(np.int64), np.asarray(starts + [end], np.int64)
        if count is not None and len(offs) - 1 != count:
            self.add(f"{name}.idx holds {len(offs) - 1} packs (+ end entry), .info.json counts {count}")
        elif whole and len(offs) != len(want_offs):
            self.add(f"{name}.idx holds {len(offs)} offsets, the tar needs {len(want_offs)} (N packs + end)")
        elif whole and not np.array_equal(offs, want_offs):
            i = int(np.flatnonzero(offs != want_offs)[0])
            self.add(f"{name}.idx entry {i} is {offs[i]}, the tar has {want_offs[i]}")

    def read_tar(self, name: str, path: Path, size: int) -> tuple[list[int], int, bool]:
        """Walk the tar's packs (:class:`vlmpack.packfmt.ShardPacks`, the JSON parts read) and check
        every pack; returns the packs' header offsets, the end-of-archive offset and whether the
        tar was whole (else problems were added)."""
        starts: list[int] = []

        def bad(kind: str, m) -> None:
            if kind == "truncated":
                self.add(f"{name}: truncated (member {m.name} ends at byte {m.offset_data + m.size}, "
                         f"the file has {size})")
            else:
                self.add(f"{name}: bad member {m.name!r} (not a regular file named <key>.<part>)")

        packs = ShardPacks(path, read=lambda part: part == "json", size=size, on_bad=bad)
        try:
            for pack in packs:
                if pack.key in self.keys:
                    self.add(f"{name}: key {pack.key} appears twice in the dataset (keys must be unique, "
                             "contiguous)")
                self.keys[pack.key] = name
                starts.append(pack.offset)
                self.check_pack(name, pack.key, pack.parts.get("json"), set(pack.parts))
        except (tarfile.TarError, OSError, EOFError) as e:
            self.add(f"{name}: not a readable tar ({_one_line(e)})")
            return starts, 0, False
        if not packs.whole:  # stopped at a truncated member
            return starts, 0, False
        end = packs.end
        with open(path, "rb") as f:
            f.seek(end)
            tail = f.read(1 << 16)
        if len(tail) < 1024 or tail.strip(b"\0"):
            self.add(f"{name}: no end-of-archive blocks after byte {end} (truncated, or data appended)")
            return starts, end, False
        return starts, end, True

    def check_pack(self, shard: str, key: str, body: bytes | None, parts: set[str]) -> None:
        where = f"{shard}/{key}"
        try:
            obj = json.loads(body) if body is not None else None
        except ValueError as e:
            obj = _one_line(e)
        if not isinstance(obj, dict) or obj.get("format") != FORMAT or not isinstance(obj.get("samples"), list):
            why = obj if isinstance(obj, str) else f"not a {FORMAT} pack"
            self.add(f"{where}: bad or missing member {key}.json ({why})")
            return
        ids, total, media = [], 0, set()
        for i, s in enumerate(obj["samples"]):
            if (not isinstance(s, dict) or not isinstance(s.get("id"), (str, int)) or not _is_int(s.get("num_tokens"))
                    or not isinstance(s.get("media", []), list) or s.get("id_kind", "str") not in ID_KINDS):
                self.add(f"{where}: sample {i} lacks a valid id / id_kind / num_tokens / media")
                continue
            pair = (s.get("id_kind", "str"), str(s["id"]))
            ids.append(pair)
            total += s["num_tokens"]
            media.update(str(m.get("part")) for m in s["media"] if isinstance(m, dict))
            want = None if self.expected is None else self.expected.get(pair)
            if want is not None and want != s["num_tokens"]:
                self.token_diffs.append(f"{where} id {pair[1]!r}: {s['num_tokens']} vs {want}")
        seq_len, n, rep_len = obj.get("seq_len"), obj.get("num_tokens"), (self.report or {}).get("seq_len")
        if not _is_int(seq_len) or not _is_int(n):
            self.add(f"{where}: seq_len / num_tokens missing or not integers")
        elif total != n:
            self.add(f"{where}: samples' num_tokens sum to {total}, the pack records {n}")
        elif n > seq_len:
            self.add(f"{where}: {n} tokens > seq_len {seq_len}")
        if _is_int(rep_len) and seq_len != rep_len:
            self.add(f"{where}: seq_len {seq_len}, report.json says {rep_len}")
        if media - parts:
            self.add(f"{where}: referenced media parts missing from the tar: {_eg(sorted(media - parts))}")
        if parts - media - EXTRA_PARTS:
            self.add(f"{where}: bad member(s) referenced by no sample: {_eg(sorted(parts - media - EXTRA_PARTS))}")
        self.packs[key] = (shard, ids)
        self.totals.update(packs=1, samples=len(ids), tokens=total)

    # ---------------------------------------------------------------------------- totals, completeness
    def check_totals(self) -> None:
        if self.token_diffs:
            self.add(f"{len(self.token_diffs)} samples record num_tokens other than the manifest's (pack vs "
                     f"manifest): {_eg(self.token_diffs)}")
        rep = self.report or {}
        diff = [f"{k} {rep[k]} vs {self.totals[t]}" for k, t in (("packs", "packs"), ("samples_packed", "samples"),
                ("tokens", "tokens"), ("shard_bytes", "bytes")) if _is_int(rep.get(k)) and rep[k] != self.totals[t]]
        if diff:
            self.add(f"report.json totals differ from the shards (recorded vs found): {', '.join(diff)}")
        where: dict[tuple[str, str], list[str]] = {}
        for key, (shard, ids) in self.packs.items():
            for pair in ids:
                where.setdefault(pair, []).append(f"{shard}/{key}")
        dups = [f"{p[1]!r} in {' and '.join(w[:2])}" for p, w in where.items() if len(w) > 1]
        if dups:
            self.add(f"{len(dups)} sample ids are packed more than once: {_eg(dups)}")
        if self.expected is None:
            return
        missing = [repr(p[1]) for p in self.expected if p not in where]
        if missing:
            self.add(f"{len(missing)} samples of the run record's manifest are in no pack (lost): {_eg(missing)}")
        extra = [f"{p[1]!r} ({p[0]}) in {w[0]}" for p, w in where.items() if p not in self.expected]
        if extra:
            self.add(f"{len(extra)} packed sample ids are not in the manifest (injected, or dropped as overlong): "
                     f"{_eg(extra)}")


def check_output(out_dir: str | Path, *, num_workers: int = 2, run_dir: bool = True) -> dict:
    """Check ``out_dir`` as described in the module docstring; never raises for a bad output.

    ``num_workers``: Energon loader worker processes (0 = in this process). ``run_dir=False``:
    check without ``OUT/.vlmpack`` (no completeness, no per-sample token counts).
    Returns ``{"packs", "samples", "unique_ids", "tokens", "max_pack_tokens", "duplicates",
    "problems", "ids"}``: counts as Energon yielded them (``ids``: Counter id -> times yielded,
    ``duplicates``: ``(kind, id)`` pairs yielded more than once) and ``problems``, a list of
    one-line strings, empty when everything holds.
    """
    out = Path(out_dir)
    c = _Checker(out)
    res = {"packs": 0, "samples": 0, "unique_ids": 0, "tokens": 0, "max_pack_tokens": 0, "duplicates": 0,
           "problems": c.problems, "ids": Counter()}
    try:
        if not out.is_dir():
            c.add(f"{out} does not exist" if not out.exists() else f"{out} is not a directory")
            return res
        if not any(out.iterdir()):
            c.add(f"{out} is empty: not a vlmpack output (run vlmpack pack first)")
            return res
        if not c.load_records():
            return res
        if run_dir:
            c.load_run_dir()
        for name in c.shard_names():
            try:
                c.check_shard(name)
            except OSError as e:
                c.add(f"{name}: cannot be read ({_one_line(e)})")
        c.check_totals()
    except OSError as e:  # e.g. an unreadable directory
        c.add(f"{out}: cannot be read ({_one_line(e)})")
        return res
    if c.meta_ok:
        res.update(c.check_energon(num_workers))
    return res
