"""Sweep the generic family over every stand-in processor and every image sample of a demo set.

    python tools/generic_sweep.py --real-data DIR [--only a,b] [--limit N] [--check-standins N] [--out FILE]

For every stand-in of ``tools/demo_data/standin_dirs.py`` (built once under ``--cache``, default
``$VLMPACK_TEST_CACHE/standins`` or ``~/.cache/vlmpack/test/standins``): ``vlmpack.models.load_model``
it, recording its refusal line or the generic family's offset and ``multi_image`` (a ``model_type``
with a dedicated vlmpack family is built as ``GenericFamily`` directly: "forced"). Then for every
image sample of ``DIR/real_sft.jsonl`` (parsed and header-validated as ``vlmpack pack`` does), its
images decoded ONCE as transformers' ``load_image`` decodes them (``ImageOps.exif_transpose`` +
``convert("RGB")``), each accepted family:

- counts it from the headers with the count stage's own ``vlmpack.pack.count_task.count_samples``
  (a sample it rejects is "rejected", with its reason);
- is compared with ``len(input_ids)`` of its own processor on the decoded images:
  ``processor(text=[family.render(messages, tools)], images=[images], **family.text_kwargs(text))``.

The processor calls run inside ``tests/image_memo.py::shape_only_pixels`` (resize gives zeros of
the right shape, rescale / normalize hand their input back): ``input_ids`` depend on sizes only.
``--check-standins N`` first runs the processors on N image samples (every ``--check-stride``-th)
with and without the stand-ins and compares the ``input_ids`` (whole lists). Where the family can
expand placeholders (``repeats``), ``family.expand`` of the header count is also compared with the
processor's ids, id for id. A family whose load raises anything but a one-line ``ConfigError`` is a
row too (a bug). Prints a markdown table, then every mismatch; ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests")]

from demo_data.standin_dirs import STANDINS, build_standin_dir  # noqa: E402
from image_memo import shape_only_pixels  # noqa: E402

from vlmpack.errors import ConfigError  # noqa: E402
from vlmpack.models import FAMILIES, load_model, model_type  # noqa: E402
from vlmpack.models.generic import GenericFamily  # noqa: E402
from vlmpack.pack.count_task import count_samples  # noqa: E402
from vlmpack.pack.validate import validate_sample  # noqa: E402
from vlmpack.readers import parse_record  # noqa: E402
from vlmpack.records import Locator, Rejection  # noqa: E402


def default_cache() -> Path:
    return Path(os.environ.get("VLMPACK_TEST_CACHE", Path.home() / ".cache" / "vlmpack" / "test")) / "standins"


class Row:
    """One stand-in's results."""

    def __init__(self, name: str):
        self.name, self.cls, self.status, self.offset = name, "", "", ""
        self.family = None
        self.compared = self.exact = 0
        self.mismatches: list[str] = []
        self.rejected: collections.Counter = collections.Counter()
        self.reject_example: dict[str, str] = {}
        self.load_s = self.count_s = self.ref_s = 0.0
        self.ids_checked = self.ids_equal = 0  # families with repeats: expand == the processor's ids
        self.ids_mismatch = ""


def load(name: str, cache: Path) -> Row:
    row = Row(name)
    t = time.perf_counter()
    try:
        d = build_standin_dir(name, cache / name)
    except Exception as e:  # noqa: BLE001 - a stand-in that does not build is a row, not a crash
        row.status = f"not built: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
        row.cls = STANDINS[name].processor
        return row
    row.cls = STANDINS[name].processor
    try:
        forced = model_type(d) in FAMILIES
        fam = GenericFamily(d) if forced else load_model(str(d))
        row.family, row.cls = fam, fam.processor_class
        row.status = "generic (forced: dedicated family exists)" if forced else "generic"
        row.offset = (f"{fam.offset:+d}" + ("" if fam.multi_image else ", 1 image/sample")
                      + (", repeats" if getattr(fam, "repeats", False) else ""))
    except ConfigError as e:
        msg = str(e).replace(f"{d}: ", "").replace(str(d), "<dir>")
        cut = msg.find(" cannot count it: ")
        msg = msg[cut + len(" cannot count it: "):] if cut >= 0 else msg
        short = re.fullmatch(r"\w+'s image tokens cannot be counted exactly from sizes \((.*)\); this model needs a "
                             r"dedicated family", msg)
        row.status = "refused: " + (short.group(1) if short else msg)
    except Exception as e:  # noqa: BLE001 - a load that raises anything but a ConfigError is a bug: shown, not fatal
        first = str(e).splitlines()[0][:150] if str(e) else ""
        row.status = f"LOAD RAISED {type(e).__name__} (not a one-line ConfigError): {first}"
    row.load_s = time.perf_counter() - t
    return row


def image_samples(real_data: Path, limit: int | None, skipped: collections.Counter | None = None, stride: int = 1,
                  *, decode: bool = True):
    """``(sample, [decoded PIL images])`` of each image sample of ``real_data/real_sft.jsonl`` (in
    order, ``limit`` at most; every ``stride``-th only, counted before validation; ``decode=False``:
    ``(sample, None)``, headers only); ``skipped`` counts the samples dropped before any family sees them."""
    from PIL import Image, ImageOps

    path = real_data / "real_sft.jsonl"
    skipped = collections.Counter() if skipped is None else skipped
    n = seen = 0
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip(b"\n")
            if not line:
                continue
            s = parse_record(line, Locator(str(path), lineno, 0), schema="auto", media_root=str(real_data),
                             allow_absolute_media=False)
            if isinstance(s, Rejection):
                skipped[f"parse: {s.reason}"] += 1
                continue
            if not s.media:
                continue
            if any(m.kind != "image" for m in s.media):
                skipped["not image-only"] += 1
                continue
            seen += 1
            if (seen - 1) % stride:
                continue
            v = validate_sample(s, check="header")
            if isinstance(v, Rejection):
                skipped[f"validate: {v.reason}"] += 1
                continue
            if not decode:
                yield s, None
                n += 1
                if limit and n >= limit:
                    break
                continue
            images = []
            for m in s.media:
                with Image.open(m.path) as im:
                    images.append(ImageOps.exif_transpose(im).convert("RGB"))
                if images[-1].size != (m.width, m.height):
                    skipped["decoded size differs from header"] += 1  # reported, sample still compared
            yield s, images
            n += 1
            if limit and n >= limit:
                break


def header_count(fam, s) -> tuple[int | None, str, str, object]:
    """``(count, "", "", expanded)`` or ``(None, reason, detail, None)``: the count stage's own
    :func:`vlmpack.pack.count_task.count_samples` on the sample; ``expanded``: ``fam.encode`` of the
    counted media tokens where the family can expand (``repeats``), else None."""
    counted, rejected = count_samples(fam, [s])
    if rejected:
        return None, rejected[0].reason, rejected[0].detail, None
    tokens = [m.num_tokens for m in s.media]
    expanded = fam.encode(s.messages, tokens, None, s.tools) if getattr(fam, "repeats", False) else None
    return counted[0].num_tokens, "", "", expanded


def reference_ids(fam, s, images, *, standins: bool = True) -> list[int]:
    text = fam.render(s.messages, s.tools)
    if standins:
        with shape_only_pixels():
            out = fam.processor(text=[text], images=[list(images)], **fam.text_kwargs(text))
    else:
        out = fam.processor(text=[text], images=[list(images)], **fam.text_kwargs(text))
    return list(out["input_ids"][0])


def sizes(s) -> str:
    return " ".join(f"{m.width}x{m.height}" for m in s.media)


def check_standins(rows: list[Row], real_data: Path, n: int, stride: int) -> list[str]:
    """Lines saying, per accepted family, on how many of ``n`` image samples (every ``stride``-th) the
    processor's ``input_ids`` were equal with and without :func:`shape_only_pixels`."""
    fams = [r for r in rows if r.family is not None]
    equal = collections.Counter()
    differ: dict[str, list[str]] = collections.defaultdict(list)
    errors = collections.Counter()
    t = time.perf_counter()
    samples = 0
    for s, images in image_samples(real_data, n, stride=stride):
        samples += 1
        for r in fams:
            try:
                a = reference_ids(r.family, s, images, standins=False)
            except Exception:  # noqa: BLE001 - the processor refuses it with real pixels too
                a = None
            try:
                b = reference_ids(r.family, s, images, standins=True)
            except Exception as e:  # noqa: BLE001
                b = f"{type(e).__name__}: {e}"[:120]
            if a is None and not isinstance(b, list):
                errors[r.name] += 1
            elif a == b:
                equal[r.name] += 1
            else:
                differ[r.name].append(f"{s.id} ({sizes(s)}): real {len(a) if a else a} stand-ins "
                                      f"{len(b) if isinstance(b, list) else b}")
    lines = [f"Shape-only stand-ins check: {samples} image samples (every {stride}), {len(fams)} processors, "
             f"{time.perf_counter() - t:.0f} s"]
    for r in fams:
        lines.append(f"- {r.name} ({r.cls}): input_ids equal on {equal[r.name]}/{samples}"
                     + (f", processor raised both ways on {errors[r.name]}" if errors[r.name] else "")
                     + (f"; DIFFER on {len(differ[r.name])}: {differ[r.name][0]}" if differ[r.name] else ""))
    return lines


def sweep(rows: list[Row], real_data: Path, limit: int | None, skipped: collections.Counter) -> int:
    fams = [r for r in rows if r.family is not None]
    t0 = time.perf_counter()
    n = 0
    for s, images in image_samples(real_data, limit, skipped):
        n += 1
        for r in fams:
            t = time.perf_counter()
            count, reason, detail, expanded = header_count(r.family, s)
            r.count_s += time.perf_counter() - t
            if count is None:
                r.rejected[reason] += 1
                r.reject_example.setdefault(reason, f"{s.id} ({sizes(s)}): {detail}")
                continue
            t = time.perf_counter()
            try:
                ref = reference_ids(r.family, s, images)
                got = len(ref)
            except Exception as e:  # noqa: BLE001 - the family accepted what the processor refuses
                first = str(e).splitlines()[0][:120] if str(e) else ""
                ref, got = None, f"processor raised {type(e).__name__}: {first}"
            r.ref_s += time.perf_counter() - t
            r.compared += 1
            if expanded is not None and ref is not None:
                r.ids_checked += 1
                if [int(x) for x in expanded] == [int(x) for x in ref]:
                    r.ids_equal += 1
                elif not r.ids_mismatch:
                    at = next((i for i, (a, b) in enumerate(zip(expanded, ref)) if a != b),
                              min(len(ref), len(expanded)))
                    r.ids_mismatch = f"{s.id}: expand differs from the processor's ids at position {at}"
            if got == count:
                r.exact += 1
            else:
                diff = f" ({count - got:+d})" if isinstance(got, int) else ""
                r.mismatches.append(f"{s.id} [{sizes(s)}]: header {count}, processor {got}{diff}")
        if n % 100 == 0:
            print(f"... {n} samples, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return n


def table(rows: list[Row]) -> list[str]:
    out = ["| stand-in | processor class | status | offset | compared | exact | mismatches (first) | rejected "
           "(reason: first example) | expand == processor ids | seconds (load / count / processor) |",
           "|---|---|---|---|---:|---:|---|---|---|---|"]
    for r in rows:
        mis = f"{len(r.mismatches)}" + (f": {r.mismatches[0]}" if r.mismatches else "")
        rej = "; ".join(f"{k} {v}: {r.reject_example[k][:110]}" for k, v in r.rejected.most_common()) or "0"
        secs = f"{r.load_s + r.count_s + r.ref_s:.1f} ({r.load_s:.1f} / {r.count_s:.1f} / {r.ref_s:.1f})"
        status = r.status.replace("|", "\\|")
        ids = f"{r.ids_equal}/{r.ids_checked}" + (f" ({r.ids_mismatch})" if r.ids_mismatch else "") \
            if r.ids_checked else ""
        out.append(f"| {r.name} | {r.cls} | {status} | {r.offset} | {r.compared if r.family else ''} | "
                   f"{r.exact if r.family else ''} | {mis if r.family else ''} | {rej if r.family else ''} | "
                   f"{ids} | {secs} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-data", required=True, type=Path, help="a demo set (real_sft.jsonl + images/)")
    ap.add_argument("--only", default="", help="comma-separated stand-in names (default: all)")
    ap.add_argument("--limit", type=int, default=None, help="first N image samples only")
    ap.add_argument("--cache", type=Path, default=None, help="where the stand-in dirs are built")
    ap.add_argument("--check-standins", type=int, default=0, metavar="N",
                    help="first compare the processors with and without the shape-only pixels on N samples")
    ap.add_argument("--check-stride", type=int, default=1, metavar="K",
                    help="--check-standins takes every K-th image sample (default 1: the first N)")
    ap.add_argument("--no-sweep", action="store_true", help="stop after --check-standins")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    names = [x for x in args.only.split(",") if x] or list(STANDINS)
    unknown = [x for x in names if x not in STANDINS]
    if unknown:
        ap.error(f"unknown stand-in(s) {unknown}; known: {', '.join(STANDINS)}")
    cache = args.cache or default_cache()
    t0 = time.perf_counter()
    rows = []
    for name in names:
        rows.append(load(name, cache))
        print(f"loaded {name}: {rows[-1].status} {rows[-1].offset} ({rows[-1].load_s:.1f} s)", file=sys.stderr,
              flush=True)
    lines = []
    if args.check_standins:
        lines += check_standins(rows, args.real_data, args.check_standins, args.check_stride) + [""]
        print("\n".join(lines), flush=True)
    if not args.no_sweep:
        skipped: collections.Counter = collections.Counter()
        n = sweep(rows, args.real_data, args.limit, skipped)
        head = len(lines)
        lines += [f"# Generic family sweep: {len(rows)} stand-ins x {n} image samples of "
                  f"{args.real_data / 'real_sft.jsonl'}", "",
                  f"Wall time {time.perf_counter() - t0:.0f} s. Image samples skipped before counting (all "
                  f"families): {dict(skipped) or 'none'}.", ""] + table(rows)
        mismatched = [r for r in rows if r.mismatches]
        if mismatched:
            lines += ["", "## Mismatches", ""]
            for r in mismatched:
                lines += [f"### {r.name} ({r.cls}): {len(r.mismatches)}"] + [f"- {m}" for m in r.mismatches[:50]]
                if len(r.mismatches) > 50:
                    lines.append(f"- ... {len(r.mismatches) - 50} more")
        print("\n".join(lines[head:]), flush=True)
    # every stand-in's load against what its spec expects (STANDINS[name].expect: generic or refused)
    surprises = [f"{r.name}: expected {STANDINS[r.name].expect!r}, got {r.status!r}" for r in rows
                 if r.status.split(" ")[0].rstrip(":") != STANDINS[r.name].expect.split(":")[0]]
    lines += ["", f"Loads as expected: {len(rows) - len(surprises)} of {len(rows)}"] + [f"- {x}" for x in surprises]
    print("\n".join(lines[-1 - len(surprises):]), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 1 if surprises or any(r.mismatches for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
