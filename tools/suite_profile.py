"""Where the test suite's CPU time goes: a py-spy profile of the whole run, summed per test and per library.

Record the README's test command under py-spy (every process: xdist workers, the pack workers they fork,
the CLI fork server's children, Ray workers), then read the raw file with this script::

    pip install -e '.[dev]'   # py-spy
    py-spy record --subprocesses --nonblocking -r 20 -f raw -o suite.raw -- python -m pytest -q -p no:cacheprovider
    python tools/suite_profile.py suite.raw                 # per test function, per leaf library, hot spots
    python tools/suite_profile.py suite.raw --callers load_chat_tokenizer   # who calls a function, and how much

A sample is one stack of one thread seen at one tick (``-r 20``: 1/20 s); seconds below are samples / rate,
CPU-seconds of busy threads (py-spy leaves out threads it sees idle). A stack is charged to the first frame
of a ``test_*.py`` file on it (the test function or fixture; a process forked from a test keeps the test's
frames), else to the command line of its process (children of a fork server or ``spawn``: the CLI runs of
``tests/cli_runner.py``, Ray workers, child scripts). Its leaf library is the package of its innermost
frame (native code shows as the Python frame that called it).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterator

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?):\d+\)$")
_TEST_FILE = re.compile(r"(?:^|/)(test_[^/]+\.py)$")
#: Functions whose inclusive time is shown (:func:`is_function`: a frame of one of these anywhere on the stack).
HOT_SPOTS = ("run_pack", "PackCollator.__call__", "load_model", "load_chat_tokenizer", "from_pretrained",
             "convert_to_native_format", "ImageFile.load", "exif_transpose", "write_report_html", "full_problem",
             "recount_shard", "apply_chat_template", "Module._call_impl", "_find_and_load")


def stacks(path: str) -> Iterator[tuple[list[str], int]]:
    """``(frames, samples)`` per line of a py-spy raw (collapsed) file: frames outermost first, each
    ``"function (file:line)"`` or ``"process PID:\\"command line\\""``."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if n.isdigit() and stack:
                yield stack.split(";"), int(n)


def owner(frames: list[str]) -> str:
    """The test (``file::function``) a stack belongs to, or its innermost process's command line."""
    for frame in frames:
        m = _FRAME.match(frame)
        if m and (t := _TEST_FILE.search(m["file"])):
            return f"{t[1]}::{m['func'].split('.')[0]}"
    procs = [f for f in frames if f.startswith("process ")]
    return "process " + re.sub(r"^process \d+:", "", procs[-1])[:100] if procs else "?"


def library(frames: list[str]) -> str:
    """The package of the innermost frame: ``vlmpack.<sub>.<module>``, a site-packages top-level name,
    a test file, or a standard-library module."""
    for frame in reversed(frames):
        if m := _FRAME.match(frame):
            file = m["file"]
            if file.startswith("vlmpack/"):
                return ".".join(file[:-3].split("/")[:3])
            return file.split("/")[0] if "/" in file and not file.startswith("/") else file.rsplit("/", 1)[-1]
    return "?"


def _name(frame: str) -> str:
    m = _FRAME.match(frame)
    return m["func"] if m else frame


def is_function(name: str, function: str) -> bool:
    """Whether frame function ``name`` (py-spy's qualified name, e.g. ``PreTrainedTokenizerBase.from_pretrained``)
    is ``function``, given bare (``from_pretrained``) or qualified (``PackCollator.__call__``)."""
    return name == function or name.endswith("." + function)


def summary(path: str, rate: float, top: int) -> str:
    """Per test, per leaf library and per hot spot (:data:`HOT_SPOTS`, inclusive), CPU-seconds."""
    by_owner, by_lib, by_spot, total = Counter(), Counter(), Counter(), 0
    for frames, n in stacks(path):
        total += n
        by_owner[owner(frames)] += n
        by_lib[library(frames)] += n
        names = {_name(f) for f in frames}
        for spot in HOT_SPOTS:
            if any(is_function(x, spot) for x in names):
                by_spot[spot] += n
    out = [f"{total / rate:,.1f} CPU-s in {total:,} samples"]
    for title, counts in (("per test (or process)", by_owner), ("per leaf library", by_lib),
                          ("hot spots (inclusive)", by_spot)):
        out += ["", f"-- {title}"] + [f"{n / rate:9.1f}  {k}" for k, n in counts.most_common(top)]
    return "\n".join(out)


def callers(path: str, function: str, rate: float, top: int, depth: int = 5) -> str:
    """The ``depth`` frames above the outermost call of ``function`` (:func:`is_function`) on each stack,
    with their CPU-seconds."""
    counts = Counter()
    for frames, n in stacks(path):
        names = [_name(f) for f in frames if not f.startswith("process ")]
        hits = [i for i, x in enumerate(names) if is_function(x, function)]
        if hits:
            i = hits[0]
            counts[" < ".join(names[max(0, i - depth):i + 1][::-1])] += n
    return "\n".join(f"{n / rate:9.1f}  {k}" for k, n in counts.most_common(top))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", help="py-spy raw output (record -f raw)")
    p.add_argument("--rate", type=float, default=20.0, help="the -r of py-spy record (samples a second)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--callers", metavar="FUNCTION", help="who calls FUNCTION (bare, or Class.method)")
    a = p.parse_args()
    print(callers(a.raw, a.callers, a.rate, a.top) if a.callers else summary(a.raw, a.rate, a.top))


if __name__ == "__main__":
    main()
