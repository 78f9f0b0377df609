"""Session fixtures shared by the whole suite: the real model directory and the real demo data.

Both are built on first use into ``$VLMPACK_TEST_CACHE`` (default ``~/.cache/vlmpack/test``) and
reused afterwards, so a fresh machine needs only the packages named in ``pyproject.toml[test]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# glibc malloc: blocks up to 256 MB (decoded images, pixel arrays, Arrow buffers) are kept in each
# process's heap instead of being mapped and unmapped at every allocation, so their pages are not faulted
# in and zeroed again and again (the LLaVA-OneVision every-image sweep: 19.4 of 100 CPU-s in the kernel,
# 4.8 M page faults by default; 10.6 CPU-s, 0.9 M faults, the same peak RSS with these settings; with a
# 1 GB threshold 5.3 CPU-s, but the workers kept ~1.4 GB more). Set before the xdist workers, the CLI
# fork server and the packing pools start: they inherit the environment.
for _name, _value in (("MALLOC_MMAP_THRESHOLD_", "268435456"), ("MALLOC_TRIM_THRESHOLD_", "536870912"),
                      ("MALLOC_TOP_PAD_", "67108864")):
    os.environ.setdefault(_name, _value)

# One compute thread per process for torch (OpenMP) and numpy (OpenBLAS): the suite runs at least one xdist
# worker per core, so a second thread in each worker only contends with the other workers (and OpenMP's idle
# threads spin between parallel regions). Model-forward files with -n 2 on 2 cores (train equivalence,
# train video, Qwen3.5, video families, Kimi-VL): 161 -> 134 and 146 -> 118 CPU-s, 87 -> 77 and 80 -> 66 s.
# Read when torch and numpy load (nothing has imported them yet here); inherited like the settings above.
# The numerics of a comparison do not change with it: both sides of every check run in one process.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# Python's garbage collector: a test worker holds millions of long-lived objects (torch, transformers,
# the module fixtures' tokenizers and models), and every full collection walks all of them. With the
# default thresholds (700, 10, 10) the young generation is collected every 700 allocations, so the
# objects of a load in progress (a tokenizer.json's 151k merge pairs, a parsed shard) survive into the
# old generations and trigger full collections: 173 CPU-s of the two workers' ~1,300 in a whole run.
# Collecting the young generation every 10,000 allocations lets most of them die first (the tiktoken,
# load-recipe and processor-options files alone: 47.5 -> 13.9 CPU-s of collection, 165 -> 31 full
# passes, 169 -> 126 s wall, peak RSS 2.81 -> 2.95 GB; a whole run: 173 -> 73 CPU-s of collection,
# the workers' CPU 1,304 -> 1,239 CPU-s). Test processes only: what the tests check does not depend on when
# cyclic garbage is freed (the CLI processes the tests start keep Python's defaults).
gc.set_threshold(10_000, 10, 10)

# Run time varies on a shared machine: no hypothesis deadline anywhere (speed lives in bench/).
settings.register_profile("vlmpack", deadline=None)
settings.load_profile("vlmpack")

# the demo-data and model-directory builders live outside the wheel, in tools/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from cache_dir import CACHE  # noqa: E402 - one rule for the suite and the CLI fork server (cli_preload)

# The shared count cache of `vlmpack pack` / `vlmpack plan` (vlmpack.pack.stages.count_cache_dir; on by
# default for users) is one fresh folder per test session, made by the xdist controller (or the one
# process without xdist) and inherited by its workers and by the CLI processes the tests start: runs of
# the same inputs and count options reuse each other's counts, as users' runs do, and no count outlives
# the session (a stale one could hide a change of the counting code). Tests that need the count stage
# to run (a kill during it, tasks seen on Ray workers) pass cache_dir / --cache-dir off themselves.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["VLMPACK_CACHE"] = tempfile.mkdtemp(prefix="vlmpack-test-counts-")

#: the background compile of the numba kernels (tests/numba_warm.py), started by the controller
_NUMBA_WARM: list = []


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one xdist worker more than the cores this process may use (``--maxprocesses`` in
    ``addopts`` caps it). A worker is often idle: waiting for a ``vlmpack`` command of the CLI fork server,
    a pack pool, a Ray cluster starting, ``energon prepare``, a signal test's timer, a file's fsync (a whole
    run with two workers on 2 cores: ~270 of ~1,780 core-seconds idle); the third worker fills those gaps.
    Measured on 2026-11-28 (2 cores, 24 GB): pytest 752 s with ``-n 3`` against 891 s with ``-n 2`` an hour
    before, then 717 s (``-n 2``) and 610 s (``-n 3``) back to back on the same tree; ~8 GB in use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1


def pytest_configure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # once, while the workers import and collect
        _NUMBA_WARM.append(subprocess.Popen([sys.executable, str(Path(__file__).parent / "numba_warm.py")],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def pytest_unconfigure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the process that made the folder removes it
        shutil.rmtree(os.environ["VLMPACK_CACHE"], ignore_errors=True)
    for proc in _NUMBA_WARM:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def cache_lock():
    """Serialise cache builds across pytest-xdist workers (and concurrent test runs): a builder
    renames a finished folder into place, so the second worker then finds it built."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """A real Qwen2.5-VL model directory (tokenizer + processor + config, no weights)."""
    from demo_data import build_qwen2_5_vl_model_dir

    with cache_lock():
        return build_qwen2_5_vl_model_dir(CACHE / "qwen2_5_vl")


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real demo SFT set (``real_sft.jsonl``, ``broken.jsonl``, ``images/``), built once."""
    from demo_data import build_demo_data

    with cache_lock():
        return build_demo_data(CACHE / "real_data")


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory, real_data) -> list[str]:
    """The first 600 records of the demo set (a file of their own) + its broken records: two count
    tasks, real images, some rejections."""
    d = tmp_path_factory.mktemp("small")
    lines = (real_data / "real_sft.jsonl").read_bytes().splitlines(keepends=True)[:600]
    (d / "in.jsonl").write_bytes(b"".join(lines))
    return [str(d / "in.jsonl"), str(real_data / "broken.jsonl")]


@pytest.fixture(scope="session")
def qwen3_vl_dir() -> Path:
    """The offline Qwen3-VL model directory (tools/demo_data/model_files/qwen3_vl)."""
    from demo_data.model_dirs import build_qwen3_vl_model_dir

    with cache_lock():
        return build_qwen3_vl_model_dir(CACHE / "qwen3_vl")


@pytest.fixture(scope="session")
def qwen3_vl_thinking_dir() -> Path:
    """Qwen3-VL with a chat template that renders reasoning (stand-in: tools/demo_data/model_dirs.py)."""
    from demo_data.model_dirs import build_qwen3_vl_thinking_model_dir

    with cache_lock():
        return build_qwen3_vl_thinking_model_dir(CACHE / "qwen3_vl_thinking")


@pytest.fixture(scope="session")
def video_corpus(real_data) -> list[Path]:
    """The real video corpus (tools/demo_data/video_corpus.py: the demo set's videos + clips encoded
    from demo images), built once under the test cache; sorted paths."""
    from demo_data.video_corpus import build_video_corpus

    with cache_lock():  # built once, whatever the xdist workers
        return build_video_corpus(CACHE / "video_corpus", real_data)


def with_video_config(src: Path, dest: Path, cfg: dict) -> Path:
    """``dest`` = a copy of model directory ``src`` whose ``video_preprocessor_config.json`` is ``cfg``."""
    for f in Path(src).iterdir():
        shutil.copy(f, dest / f.name)
    (dest / "video_preprocessor_config.json").write_text(json.dumps(cfg))
    return dest


@pytest.fixture(scope="session")
def qwen3_5_dir() -> Path:
    """The offline Qwen3.5 model directory (stand-ins: tools/demo_data/model_files/qwen3_5/SOURCES.md)."""
    from demo_data.model_dirs import build_qwen3_5_model_dir

    with cache_lock():
        return build_qwen3_5_model_dir(CACHE / "qwen3_5")


@pytest.fixture(scope="session")
def internvl_dir() -> Path:
    """The offline InternVL3 (HF format) model directory (tools/demo_data/internvl_dir.py)."""
    from demo_data.internvl_dir import build_internvl_model_dir

    with cache_lock():
        return build_internvl_model_dir(CACHE / "internvl")


@pytest.fixture(scope="session")
def llava_ov_dir() -> Path:
    """The offline LLaVA-OneVision model directory (tools/demo_data/llava_onevision_dir.py)."""
    from demo_data.llava_onevision_dir import build_llava_onevision_model_dir

    with cache_lock():
        return build_llava_onevision_model_dir(CACHE / "llava_onevision")


# The longest files first: pytest-xdist (--dist loadfile, with --no-loadscope-reorder in addopts: else it
# orders files by their number of tests) hands files to workers in collection order, so the files that take
# a minute start first, side by side, and the short ones fill the gaps after; in any other order one of them
# could start last and alone. Seconds on 2 cores, measured per test in a whole run (2026-11-28: 26-89 s each;
# a scheduling hint only: a file not named here keeps its place after these).
LONGEST_FIRST = ("test_models_qwen3_vl.py", "test_models_smolvlm.py", "test_models_llava_onevision.py",
                 "test_tiktoken_bpe.py", "test_models_internvl.py", "test_processor_options.py", "test_load_recipe.py",
                 "test_models_generic.py", "test_models_gemma3.py", "test_hostile_outputs.py", "test_omni_video.py",
                 "test_light_tokenizer.py", "test_train_omni_video.py", "test_ray_cluster.py",
                 "test_special_token_joins.py", "test_train_video_families.py", "test_models_kimi_k25.py",
                 "test_template_render.py", "test_energon_task_encoder.py", "test_hostile_runs.py",
                 "test_models_glm4v.py", "test_train_video.py", "test_video_families.py", "test_models_kimi_vl.py",
                 "test_pipeline.py", "test_readme.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept otherwise


def last_hidden(model, **kw):
    """Last hidden states ``[T, H]`` (float) of ``model.model``: the forward of a
    ``*ForConditionalGeneration`` before its ``lm_head``, for :func:`logit_diff`. ``labels`` is dropped
    (no loss: its log-softmax over the whole vocabulary would cost as much as the model), no KV cache."""
    import torch

    kw.pop("labels", None)
    kw["use_cache"] = False
    with torch.no_grad():
        return model.model(**kw).last_hidden_state[0]


def logit_diff(model, h, ref, chunk: int = 256, *, atol: float | None = None) -> float:
    """Max |logits(h) - logits(ref)| of the model's own bias-free ``lm_head`` (``x @ W.T``), computed
    by its linearity as max |(h - ref) @ W.T|: one product instead of two, and no rounding of the
    difference of two large logits; ``chunk`` tokens at a time into one reused buffer (a full
    float32 ``[T, 152000]`` logits tensor is 2-4 GB). ``h``, ``ref``: float ``[T, H]`` tensors.

    ``atol``: for a check ``logit_diff(...) < atol``. Where the Cauchy-Schwarz bound
    max_t ||h_t - ref_t|| * max_v ||W_v|| (which no logit difference exceeds) is already below it, that
    bound is returned instead of the exact maximum (the check holds either way, at the cost of two
    norms instead of a ``[T, V]`` product); otherwise the exact maximum. Negative controls (``> x``)
    pass no ``atol``: they get the exact value."""
    import torch

    w = model.lm_head.weight
    assert model.lm_head.bias is None
    with torch.no_grad():
        d = h - ref
        if atol is not None and len(d):
            bound = float(d.norm(dim=-1).max() * w.norm(dim=-1).max())
            if bound < atol:
                return bound
        buf = torch.empty(chunk, w.shape[0])
        worst = 0.0
        for i in range(0, len(d), chunk):
            n = min(chunk, len(d) - i)
            worst = max(worst, torch.mm(d[i:i + n], w.T, out=buf[:n]).abs_().max().item())
    return worst


@pytest.fixture
def frozen_objects():
    """The test runs with this process's objects from before it frozen out of garbage collection
    (:func:`vlmpack.energon.load.frozen_gc`): Energon's loaders run full collections (at each loader,
    pass and forked worker), and a test process holds millions of objects (0.5-1 s a collection).
    For the tests that load through Energon's own ``get_loader`` / ``get_savable_loader``."""
    from vlmpack.energon.load import frozen_gc

    with frozen_gc():
        yield
