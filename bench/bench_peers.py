"""vlmpack against the seed pipeline it replaces: LLaVA-OneVision-2's ``offline_packing`` (s1-s4).

    python bench/bench_peers.py [--peer-repo DIR_OR_URL] [--reps 3] [--workers 2] [--seq-len 4096] [--no-recipe]

Both tools pack the same data (``--input``, default ``~/.cache/vlmpack/test/real_data/real_sft.jsonl``:
5,783 LLaVA records, 2,937 with images; ``--media-root`` default its folder; ``--model`` a Qwen2.5-VL
directory, no weights) at L = ``--seq-len`` tokens, interleaved ``--reps`` times (peer, vlmpack, peer, ...),
each run into a fresh output folder. The peer's code is fetched at run time, never copied into this
repository: ``--peer-repo`` (a local clone or mirror, bare or not, or a URL for ``git clone --depth 1``;
default the GitHub URL: pass a local mirror where there is no network), ``git archive HEAD
offline_packing`` into a temporary directory. Its stages run with ``auto_pipe.sh``'s arguments (its status
files and ``tee`` left out): s1 JSONL -> one JSON file per sample + image copies; s2 token lengths (a
process pool of thread pools; ``AutoProcessor`` built per chunk of 500 and run on the rendered text and
the images from ``qwen_vl_utils.fetch_image``); s3 BFD (<= 200 samples a bin); s4 bins -> WebDataset
(``PackedCaptioningSample``, images copied in). Before timing, outside it, the records are converted to
the peer's layout (``messages`` of ``{"role", "content"}``: its s2 template reads only those keys).

Parallelism (``--workers W``, default 2 = this machine's cores): vlmpack ``--workers W`` processes,
defaults otherwise (``--media-check verify``, BFD, layout ``vlmpack``), each run with a fresh cache root
holding only the model's load recipe (``vlmpack.models.load_recipe``: recorded once before timing, as
a first load on a machine records it; no counts are reused), or ``--cache-dir off`` with
``--no-recipe`` (the first load of a model directory: ``AutoTokenizer`` and the image processor); peer s1
``--num-processes W`` x 4 threads (``-m 4``), s2 ``--num-processes W`` x ``max(4, 2 * cores // W)``
threads (its own auto rule), s4 ``--workers W`` threads.

Shim (the smallest that lets the unmodified scripts run here): a ``sitecustomize.py`` on the peer's
PYTHONPATH only (source: ``SHIM`` below), which hooks three imports:

1. ``qwen_vl_utils.vision_process`` imports torchvision at module level for its video readers, and
   torchvision is not installed here (not importable beside this torch): a stand-in ``torchvision``
   (``io``, ``transforms.InterpolationMode``, ``transforms.functional``; every function raises) is
   in ``sys.modules`` only while that module executes. ``fetch_image`` (PIL only) is untouched.
2. ``AutoProcessor.from_pretrained`` fails for Qwen2.5-VL without torchvision (its video processor
   needs it): ``AutoVideoProcessor.from_pretrained`` returns None on ImportError and
   ``ProcessorMixin.check_argument_for_proper_class`` accepts a None video processor. The processor is
   otherwise built by transformers' own code with the script's arguments (``use_fast=False``, i.e. the
   PIL image processor, the min/max pixels it passes).

The timed work is the peer's own: the shim only skips building a video processor object (a config
read, once per chunk) and adds one ``sys.meta_path`` lookup per import. Not shimmed, so not done: s4's
Energon preparation (index files) is skipped by the peer itself here (it imports ``MAIN_FOLDER_NAME``
from a module path that megatron-energon 7.4 lacks, and falls back to writing ``split.yaml``); vlmpack
indexes its shards. That skipped step is timed afterwards on the peer's last shards and printed.

Columns (per run; each stage measured by ``bench/measure.py``'s ``run_tree_measured``, as
``bench_pack.py`` measures its runs): ``wall s`` the stages' wall-clock seconds summed; ``CPU s`` user
+ sys of each stage's process tree (``os.wait4``: the stage and the descendants it waited for; one its
parent never waits for would be missed), summed; ``max-RSS MB`` the largest peak resident set of any
single process (``ru_maxrss``, a max, not a sum; MiB); ``tree PSS MB`` the largest sum of the tree's
PSS, sampled every 0.5 s (a shared page split between the processes mapping it; MiB); ``packs``;
``samples`` packed; ``util %`` = packed tokens / (packs * L); ``out MB`` shard bytes (MiB). Ratios peer/vlmpack are per
interleaved pair, min/median/max over the pairs; ``median`` rows per tool.

Token counts (the last run's outputs): per sample, the peer's s2 ``token_info.txt`` (only the samples
<= L; names mapped back to ids through s1's JSON files) against vlmpack's ``.vlmpack/manifest.parquet``
(every sample, overlong ones too). Where they can differ: (a) the peer renders its own fixed Jinja
template (Qwen2 style, default system turn), not the model's chat template; (b) it resizes images with ``fetch_image``
(multiple of 28 within s2's ``--min/--max-pixels``, default 3136 / 12845056) before the processor
resizes again, vlmpack applies the model directory's min/max pixels once; (c) special-token strings
in text: tokenized as special tokens by the peer, rejected by vlmpack; (d) samples the peer cannot
load are logged and left out by s2, vlmpack lists them in rejects; (e) s1 names each copied image
``<stem>_<N>`` per repeated basename, which can collide with another file really named so: one
image overwrites the other and two samples' JSON files get one name, so one sample is lost (demo
set: ``wrapped_chocolate_easter_egg.png`` x5 vs ``wrapped_chocolate_easter_egg_2.png``; s1 shuffles,
so it strikes in most runs, not all: ``samples lost`` lines). On the demo set with this Qwen2.5-VL
directory (a)-(d) give no difference and (e) none in counts (both eggs are 34 x 45/46 px, 6 tokens):
every sample both count is equal (docs/benchmarks.md).
Speed targets live here, never in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from measure import record_load_recipe, run_tree_measured

TEST = Path.home() / ".cache" / "vlmpack" / "test"
PEER_URL = "https://github.com/EvolvingLMMs-Lab/LLaVA-OneVision-2"
METRICS = ("wall", "cpu", "maxrss_mb", "tree_pss_mb")  # seconds, seconds, MiB, MiB
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}

SHIM = r'''"""vlmpack bench shim for LLaVA-OneVision-2 offline_packing (bench/bench_peers.py docstring)."""
import importlib.abc
import sys
import types

_TV = ("torchvision", "torchvision.transforms", "torchvision.io")


def _video_only(*_a, **_k):
    raise RuntimeError("bench shim: torchvision stand-in, video is not supported")


def _before_vision_process():
    tv, tr = types.ModuleType("torchvision"), types.ModuleType("torchvision.transforms")
    tv.__version__ = "0.0+standin"
    tv.io = types.SimpleNamespace(read_video=_video_only)
    tr.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic", BILINEAR="bilinear")
    tr.functional = types.SimpleNamespace(resize=_video_only)
    tv.transforms = tr
    sys.modules.update(zip(_TV, (tv, tr, tv.io)))


def _after_vision_process(_mod):
    for name in _TV:
        sys.modules.pop(name, None)


def _after_video_auto(mod):
    orig = mod.AutoVideoProcessor.from_pretrained.__func__

    def from_pretrained(cls, *a, **k):
        try:
            return orig(cls, *a, **k)
        except ImportError:
            return None
    mod.AutoVideoProcessor.from_pretrained = classmethod(from_pretrained)


def _after_processing_utils(mod):
    orig = mod.ProcessorMixin.check_argument_for_proper_class

    def check(self, argument_name, argument):
        if argument is None and "video_processor" in argument_name:
            return None
        return orig(self, argument_name, argument)
    mod.ProcessorMixin.check_argument_for_proper_class = check


_HOOKS = {"qwen_vl_utils.vision_process": (_before_vision_process, _after_vision_process),
          "transformers.models.auto.video_processing_auto": (None, _after_video_auto),
          "transformers.processing_utils": (None, _after_processing_utils)}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, before, after):
        self.inner, self.before, self.after = inner, before, after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        if self.before:
            self.before()
        try:
            self.inner.exec_module(module)
        finally:
            if self.after:
                self.after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                spec.loader = _Loader(spec.loader, *_HOOKS[name])
                return spec
        return None


sys.meta_path.insert(0, _Finder())
'''

def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], check=True, capture_output=True).stdout


def fetch_peer(repo: str, tmp: Path) -> tuple[Path, str]:
    """Extract ``offline_packing/`` of ``repo`` (git dir or URL) into ``tmp/peer``; (folder, commit)."""
    if not Path(repo).exists():
        clone = tmp / "peer-clone"
        try:
            subprocess.run(["git", "clone", "--quiet", "--depth", "1", repo, str(clone)], check=True, timeout=300)
        except (subprocess.SubprocessError, OSError) as e:
            raise SystemExit(f"could not clone {repo} ({e}); without network pass --peer-repo DIR, a local "
                             "clone or mirror of LLaVA-OneVision-2") from None
        repo = str(clone)
    commit = _git("-C", repo, "rev-parse", "HEAD").decode().strip()
    with tarfile.open(fileobj=io.BytesIO(_git("-C", repo, "archive", "--format=tar", commit, "offline_packing"))) as t:
        t.extractall(tmp / "peer", filter="data")
    return tmp / "peer" / "offline_packing", commit


def to_peer_layout(src: Path, dst: Path) -> None:
    """LLaVA ``conversations`` [{from, value}] -> the peer's ``messages`` [{role, content}]; other keys kept."""
    with src.open(encoding="utf-8") as f, dst.open("w", encoding="utf-8") as out:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if "conversations" in r and "messages" not in r:
                    r["messages"] = [{"role": ROLES.get(t["from"], t["from"]), "content": t["value"]}
                                     for t in r.pop("conversations")]
                out.write(json.dumps(r, ensure_ascii=False) + "\n")


def measure(steps: list, env: dict) -> dict:
    """Run ``steps`` [(name, argv, cwd, log)] one after the other (:func:`measure.run_tree_measured`
    each): per-stage walls, CPU s summed, max-RSS and tree PSS MB the largest of the stages."""
    walls, res = {}, {"cpu": 0.0, "maxrss_mb": 0.0, "tree_pss_mb": 0.0}
    for name, argv, cwd, log in steps:
        try:
            m = run_tree_measured(argv, cwd=cwd, env=env, log=log)
        except RuntimeError as e:
            raise SystemExit(f"{name} failed: {e}") from None
        walls[name] = m["seconds"]
        res["cpu"] += m["cpu_seconds"]
        res["maxrss_mb"] = max(res["maxrss_mb"], m["max_rss_mb"])
        res["tree_pss_mb"] = max(res["tree_pss_mb"], m["tree_pss_mb"])
    return {**res, "walls": walls, "wall": sum(walls.values())}


#: Run by the peer's interpreter on its s3 output: [samples, tokens] of each bin, as JSON.
BINS_SUMMARY = ("import json, pickle, sys; bins = pickle.load(open(sys.argv[1], 'rb')); "
                "print(json.dumps([[len(b), int(b['l'].sum())] for b in bins]))")


def run_peer(a, peer: Path, peer_input: Path, out: Path, env: dict) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    py, w, s1 = sys.executable, str(a.workers), str(out / "s1_split_json2samples")
    threads = str(min(32, max(4, 2 * (os.cpu_count() or 1) // a.workers)))
    steps = [
        ("s1", [py, str(peer / "s1_split_json_to_samples.py"), "-i", str(peer_input), "--image-root",
                str(a.media_root), "-o", s1, "--chunk-size", "500", "-m", "4", "--num-processes", w, "--overwrite"]),
        ("s2", [py, str(peer / "s2_compute_token_lengths.py"), "--data-dir", s1,
                "--output", str(out / "token_info.txt"),
                "--model-path", str(a.model), "--max-len", str(a.seq_len), "--task-type", "sft", "--chunk-size", "500",
                "--min-workers", "4", "--max-workers", threads, "--num-processes", w, "--timeout", "180"]),
        ("s3", [py, str(peer / "s3_bin_packing.py"), "--input", str(out / "token_info.txt"), "--output",
                str(out / "bins.pkl"), "--capacity", str(a.seq_len), "--max-samples", "200", "--algorithm", "bfd"]),
        ("s4", [py, str(peer / "s4_bins_to_webdataset.py"), "--bins-file", str(out / "bins.pkl"), "--source-dir", s1,
                "--output-dir", str(out / "webdataset"), "--workers", w, "--max-samples-per-shard", "10000",
                "--max-shard-size", "3000000000", "--shard-prefix", "pretrain",
                "--sample-class-name", "PackedCaptioningSample"]),
    ]
    res = measure([(n, argv, str(out), str(out / f"{n}.log")) for n, argv in steps], env)
    # bins.pkl is the peer's own pickle: it is read back by the peer's side (a subprocess in its
    # environment, as its s4 reads it), never unpickled here; only [samples, tokens] per bin come back
    summary = subprocess.run([py, "-c", BINS_SUMMARY, str(out / "bins.pkl")], env=env, capture_output=True,
                             text=True, check=True)
    bins = json.loads(summary.stdout)
    written = [ln for ln in (out / "s4.log").read_text().splitlines() if ln.startswith("processed_bins=")]
    if not written or int(written[-1].split("=")[1]) != len(bins):
        print(f"warning: peer s4 wrote {written} of {len(bins)} bins", file=sys.stderr)
    s2_log = (out / "s2.log").read_text(encoding="utf-8", errors="replace").splitlines()
    n_in, n_s1 = sum(1 for _ in peer_input.open(encoding="utf-8")), sum(1 for _ in Path(s1).glob("*.json"))
    res["lost"] = [f"s1 wrote {n_s1:,} sample files of {n_in:,} records"] if n_s1 != n_in else []
    res["lost"] += [ln for ln in s2_log if any(k in ln for k in ("Processing failed [", "Timeout [", "MemoryError ["))]
    res.update(packs=len(bins), samples=sum(n for n, _ in bins), tokens=sum(t for _, t in bins),
               out_mb=sum(p.stat().st_size for p in (out / "webdataset").glob("*.tar")) / 2**20)
    return res


def run_vlmpack(a, out: Path, env: dict, recipes: Path | None) -> dict:
    """One ``vlmpack pack``: ``--cache-dir off``, or with ``recipes`` (a cache root holding only the
    load recipe) a fresh copy of it: the counts are redone, the model load follows the recipe."""
    shutil.rmtree(out, ignore_errors=True)
    cache = "off"
    if recipes is not None:
        cache = str(out.parent / "vlmpack_cache")
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(recipes / "load", Path(cache) / "load")
    argv = [sys.executable, "-m", "vlmpack", "pack", "--input", str(a.input), "--media-root", str(a.media_root),
            "--model", str(a.model), "--seq-len", str(a.seq_len), "--output", str(out), "--overwrite",
            "--cache-dir", cache, "--no-progress", "--workers", str(a.workers)]
    res = measure([("pack", argv, str(out.parent), str(out.parent / "vlmpack.log"))], env)
    rep = json.loads((out / "report.json").read_text())
    res.update(packs=rep["packs"], samples=rep["samples_packed"], tokens=rep["tokens"],
               out_mb=sum(p.stat().st_size for p in out.glob("*.tar")) / 2**20)
    return res


def energon_index_seconds(wds: Path, workers: int) -> str:
    """Seconds of the Energon preparation the peer's s4 calls but skips here (module docstring), run afterwards."""
    try:
        from megatron.energon.flavors import BaseWebdatasetFactory

        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # energon prints its progress
            BaseWebdatasetFactory.prepare_dataset(wds, sorted(p.name for p in wds.glob("*.tar")), workers=workers,
                                                  split_parts_ratio=[("train", 1.0), ("val", 0), ("test", 0)])
        return f"{time.perf_counter() - t:.1f} s"
    except Exception as e:  # noqa: BLE001 - an extra figure only
        return f"not measured ({type(e).__name__}: {e})"


def compare_tokens(peer_out: Path, v_out: Path, seq_len: int) -> list[str]:
    """Lines comparing per-sample token counts (module docstring)."""
    import pyarrow.parquet as pq

    peer: dict[str, int] = {}
    for line in (peer_out / "token_info.txt").read_text(encoding="utf-8").splitlines():
        name, n = line.rsplit(":", 1)
        rec = json.loads((peer_out / "s1_split_json2samples" / f"{name}.json").read_text(encoding="utf-8"))
        peer[str(rec.get("id", name))] = int(n)
    rows = pq.read_table(v_out / ".vlmpack" / "manifest.parquet", columns=["id", "num_tokens", "num_media"]).to_pylist()
    ours = {r["id"]: r for r in rows}
    both = [i for i in ours if i in peer]
    diff = [(i, peer[i] - ours[i]["num_tokens"], ours[i]["num_media"])
            for i in both if peer[i] != ours[i]["num_tokens"]]
    only_v = [i for i in ours if i not in peer]
    over = sum(ours[i]["num_tokens"] > seq_len for i in only_v)
    lines = [f"vlmpack counted {len(ours):,} samples, the peer {len(peer):,} (its token_info.txt keeps those <= L)",
             f"both count {len(both):,}: equal {len(both) - len(diff):,}, differ {len(diff):,} "
             f"(text-only {sum(1 for d in diff if not d[2]):,}, with media {sum(1 for d in diff if d[2]):,})",
             f"counted by vlmpack only: {len(only_v):,} ({over:,} of them > L = {seq_len} tokens, which the peer "
             f"drops in s2); by the peer only: {sum(1 for i in peer if i not in ours):,}"]
    lines += [f"  differs: {i}: peer - vlmpack = {d:+d} tokens, {m} media" for i, d, m in diff[:10]]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-repo", default=PEER_URL, help="LLaVA-OneVision-2 git dir (bare or not) or URL")
    ap.add_argument("--input", type=Path, default=TEST / "real_data" / "real_sft.jsonl", help="LLaVA JSONL")
    ap.add_argument("--media-root", type=Path, default=None, help="image paths are relative to it (default: input's)")
    ap.add_argument("--model", type=Path, default=TEST / "qwen2_5_vl", help="Qwen2.5-VL model directory")
    ap.add_argument("--seq-len", type=int, default=4096, help="L, tokens")
    ap.add_argument("--workers", type=int, default=2, help="processes (vlmpack) / processes and threads (peer)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved runs of each tool")
    ap.add_argument("--no-recipe", action="store_true", help="vlmpack with --cache-dir off: no model load recipe")
    a = ap.parse_args()
    a.input, a.model = a.input.resolve(), a.model.resolve()
    a.media_root = (a.media_root or a.input.parent).resolve()
    with tempfile.TemporaryDirectory(prefix="vlmpack-bench-peers-") as tmp_s:
        tmp = Path(tmp_s)
        peer, commit = fetch_peer(a.peer_repo, tmp)
        peer_input, shim = tmp / "peer_input.jsonl", tmp / "shim"
        to_peer_layout(a.input, peer_input)  # before timing
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(SHIM)
        env = dict(os.environ)
        peer_env = {**env, "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))}
        print(f"peer: LLaVA-OneVision-2 {commit[:12]} offline_packing s1-s4; input {a.input} "
              f"({sum(1 for _ in a.input.open(encoding='utf-8')):,} records); L = {a.seq_len}; workers {a.workers}; "
              f"cores {os.cpu_count()}\n", flush=True)
        recipes = None if a.no_recipe else tmp / "recipes"
        if recipes is not None:
            record_load_recipe(a.model, recipes, env)
        runs: dict[str, list[dict]] = {"peer": [], "vlmpack": []}
        for i in range(a.reps):
            runs["peer"].append(run_peer(a, peer, peer_input, tmp / "peer_out", peer_env))
            runs["vlmpack"].append(run_vlmpack(a, tmp / "vlmpack_out", env, recipes))
            print(f"run {i + 1}/{a.reps}: peer {runs['peer'][-1]['wall']:.1f} s, "
                  f"vlmpack {runs['vlmpack'][-1]['wall']:.1f} s", file=sys.stderr, flush=True)
        print("| tool | run | wall s | CPU s | max-RSS MB (largest process) | tree PSS MB (sampled sum) | packs | "
              "samples | util % | out MB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for i in range(a.reps):
            for tool in runs:
                r = runs[tool][i]
                print(f"| {tool} | {i + 1} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['maxrss_mb']:,.0f} | "
                      f"{r['tree_pss_mb']:,.0f} | {r['packs']:,} | {r['samples']:,} | "
                      f"{100 * r['tokens'] / (r['packs'] * a.seq_len):.2f} | {r['out_mb']:,.0f} |")
        for tool, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in METRICS}
            print(f"| {tool} | median | {med['wall']:.1f} | {med['cpu']:.1f} | {med['maxrss_mb']:,.0f} | "
                  f"{med['tree_pss_mb']:,.0f} | | | | |")
        print(f"\n| ratio peer / vlmpack (min / median / max of {a.reps}) | wall | CPU | max-RSS | tree PSS | packs |")
        print("|---|---:|---:|---:|---:|---:|")
        ratios = [[p[c] / v[c] for p, v in zip(runs["peer"], runs["vlmpack"])] for c in (*METRICS, "packs")]
        print("| " + " | ".join(["peer / vlmpack"] + [f"{min(x):.2f} / {statistics.median(x):.2f} / {max(x):.2f}"
                                                       for x in ratios]) + " |")
        stages = runs["peer"][0]["walls"]
        print(f"\npeer stages, median wall s of {a.reps}: " + ", ".join(
            f"{s} {statistics.median(r['walls'][s] for r in runs['peer']):.1f}" for s in stages))
        for i, r in enumerate(runs["peer"]):
            if r["lost"]:
                print(f"peer run {i + 1}: samples lost: " + "; ".join(r["lost"][:3]))
        print(f"Energon preparation that the peer's s4 skipped here, run afterwards on its last shards: "
              f"{energon_index_seconds(tmp / 'peer_out' / 'webdataset', a.workers)}")
        print("\n" + "\n".join(compare_tokens(tmp / "peer_out", tmp / "vlmpack_out", a.seq_len)))


if __name__ == "__main__":
    main()
