"""Benchmark of the packing engine against LightBinPack and binpacking (prints markdown tables).

Usage: ``python bench/bench_plan.py [--sizes 1e5,1e6,1e7] [--caps 4096,8192,16384] [--reps 3]
[--big-reps 1] [--binpacking-caps 8192]``.
Needs ``pip install lightbinpack binpacking`` (the ``bench`` extra). Timings are the median of
``--reps`` runs on one core, JIT compile excluded (reported separately, measured in a subprocess
with an empty numba cache); "RSS delta" is the peak resident-set growth during one call, sampled
every 0.5 ms from /proc/self/statm. Packs - L2 uses the Martello-Toth bound over the samples
that fit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from distributions import NAMES, make  # noqa: E402

from vlmpack.packing import ALGORITHMS, StreamingPacker, lower_bound_l1, lower_bound_l2, plan_packs  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRSS:
    """Context manager sampling the RSS in a thread; ``.delta`` in bytes after exit."""

    def __enter__(self) -> PeakRSS:
        self.base = _rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.0005)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss())
        self.delta = self.peak - self.base


def _measure(fn, reps: int) -> tuple[object, float, float]:
    times, mem, out = [], [], None
    for _ in range(reps):
        with PeakRSS() as m:
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        mem.append(m.delta)
        del m
    return out, statistics.median(times), max(mem) / 2**20


def _count_lists(packs: list, lengths: np.ndarray, cap: int) -> int:
    for p in packs[:1000]:
        assert int(lengths[list(p)].sum()) <= cap
    return len(packs)


def compile_times() -> dict[str, float]:
    """First-call seconds per algorithm with an empty numba cache (in a subprocess)."""
    code = (
        "import time,json,numpy as np\n"
        "t=time.perf_counter(); from vlmpack.packing import plan_packs, ALGORITHMS; imp=time.perf_counter()-t\n"
        "x=np.arange(1,500)%97+1; out={'import':imp}\n"
        "for a in ALGORITHMS:\n"
        "  t=time.perf_counter(); plan_packs(x,128,algorithm=a); out[a]=time.perf_counter()-t\n"
        "t=time.perf_counter(); plan_packs(x,128,max_samples_per_pack=3,media_tokens=x,max_media_tokens_per_pack=999);"
        " out['bfd (media kernel)']=time.perf_counter()-t\n"
        "print(json.dumps(out))\n"
    )
    import json

    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=d)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        cold = json.loads(res.stdout)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        warm = json.loads(res.stdout)
    return {k: (cold[k], warm[k]) for k in cold}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--caps", default="4096,8192,16384")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dists", default=",".join(NAMES))
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--binpacking-max-n", type=float, default=1e5, help="largest n for `binpacking` (slow)")
    ap.add_argument("--binpacking-caps", default="8192", help="capacities for `binpacking` (pure Python, slow)")
    ap.add_argument("--big-reps", type=int, default=1,
                    help="repetitions at n >= 1e7 for everything but bfd and lightbinpack (slow baselines)")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    caps = [int(c) for c in args.caps.split(",")]
    try:
        import lightbinpack
    except ImportError:
        lightbinpack = None
    try:
        import binpacking
    except ImportError:
        binpacking = None

    print("## JIT compile (first call, empty numba cache) vs cached first call, seconds\n")
    print("| step | cold | cached |\n|---|---|---|")
    for k, (c, w) in compile_times().items():
        print(f"| {k} | {c:.2f} | {w:.3f} |")

    # warm every kernel in this process
    for a in ALGORITHMS:
        plan_packs(np.arange(1, 300), 512, algorithm=a)

    print("\n## Offline packers\n")
    print("| dist | n | L | algorithm | packs | packs - L2 | util % | seconds | RSS delta MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dist in args.dists.split(","):
        for n in sizes:
            for cap in caps:
                lengths = make(dist, n, cap)[0]
                fit = lengths[lengths <= cap]
                l2 = lower_bound_l2(fit, cap)
                total = int(fit.sum())
                rows = []
                for a in ALGORITHMS:
                    reps = args.reps if (a == "bfd" or n < 10_000_000) else args.big_reps
                    plan, sec, mb = _measure(lambda a=a: plan_packs(lengths, cap, algorithm=a), reps)
                    rows.append((a, plan.num_packs, sec, mb))
                if lightbinpack is not None and not args.skip_peers:
                    lst = fit.tolist()
                    packs, sec, mb = _measure(lambda: lightbinpack.obfd(lst, cap), args.reps)
                    rows.append(("lightbinpack.obfd", _count_lists(packs, fit, cap), sec, mb))
                    del packs, lst
                bp_caps = [int(c) for c in args.binpacking_caps.split(",")]
                if binpacking is not None and n <= args.binpacking_max_n and cap in bp_caps and not args.skip_peers:
                    d = dict(enumerate(fit.tolist()))
                    packs, sec, mb = _measure(lambda: binpacking.to_constant_volume(d, cap), 1)
                    rows.append(("binpacking (1 run)", len(packs), sec, mb))
                for name, p, sec, mb in rows:
                    print(f"| {dist} | {n:.0e} | {cap} | {name} | {p} | {p - l2} | {100 * total / (p * cap):.3f} "
                          f"| {sec:.4f} | {mb:.1f} |", flush=True)

    print("\n## max_samples_per_pack=64 vs uncapped (bfd, n=1e6, L=16384)\n")
    print("| dist | uncapped | capped 64 | extra % | capped seconds |\n|---|---|---|---|---|")
    for dist in args.dists.split(","):
        lengths = make(dist, 1_000_000, 16384)[0]
        a = plan_packs(lengths, 16384).num_packs
        capped, sec, _ = _measure(lambda: plan_packs(lengths, 16384, max_samples_per_pack=64), args.reps)
        b = capped.num_packs
        print(f"| {dist} | {a} | {b} | {100 * (b - a) / a:.4f} | {sec:.3f} |", flush=True)

    print("\n## StreamingPacker B=10,000, L=8192, n=1e6 (stream in input order)\n")
    print("| dist | packs | L1 | packs / L1 | seconds |\n|---|---|---|---|---|")
    for dist in args.dists.split(","):
        lengths = make(dist, 1_000_000, 8192)[0]
        sp = StreamingPacker(8192, 10_000)
        t0 = time.perf_counter()
        packs = 0
        for i, x in enumerate(lengths.tolist()):
            packs += len(sp.push(i, x))
        packs += len(sp.flush())
        sec = time.perf_counter() - t0
        l1 = lower_bound_l1(lengths, 8192)
        print(f"| {dist} | {packs} | {l1} | {packs / l1:.5f} | {sec:.2f} |", flush=True)


if __name__ == "__main__":
    main()
