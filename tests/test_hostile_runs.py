"""Hostile runs: signals, kills, faults, concurrent runs, broken run directories and bad arguments.

Every case runs the real ``vlmpack`` command in a process of its own (``tests/cli_runner.py``:
forked from a server that imported the libraries once; a fresh interpreter where a test sets a
resource limit) on real demo data and checks
the exit code (0 / 2 error / 3 failed run / 130 SIGINT / 143 SIGTERM), that a failure is exactly
one stderr line without a traceback, that no worker process outlives the command, and that the
same command run again afterwards ends with shards byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import CliProcess, start_cli
from hostile_corpus import image_records_in, one_error_line, run_cli

from vlmpack.packfmt import read_packs

pytestmark = pytest.mark.slow


def _hashes(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar*"))}


def _pack_args(inp: Path, real_data: Path, model_dir: Path, out: Path, *extra) -> list:
    return ["pack", "--input", inp, "--media-root", real_data, "--model", model_dir, "--seq-len", 8192,
            "--output", out, "--no-progress", *extra]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory, real_data) -> Path:
    path = tmp_path_factory.mktemp("small") / "small.jsonl"
    path.write_text("\n".join((real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines()[:200]) + "\n",
                    encoding="utf-8")
    return path


# Big enough to be killed mid-count and mid-write: the first 2,000 samples of the real set (images,
# texts and rejections; several count tasks), one shard per 5 packs, pretokenized (writing tokenizes
# every pack, so it lasts seconds). A run killed during counting counts itself (no shared count cache);
# the reference and a run killed while writing take their counts from the session's count cache, as a
# user's second run does (the count stage is not what they test).
KILL_OPTS = ["--max-packs-per-shard", 5, "--pretokenize", "--workers", 2]
KILL_EXTRA = [*KILL_OPTS, "--cache-dir", "off"]  # counted here
KILL_LINES = 2000


@pytest.fixture(scope="module")
def kill_input(tmp_path_factory, real_data) -> Path:
    path = tmp_path_factory.mktemp("kill") / "kill.jsonl"
    with open(real_data / "real_sft.jsonl", "rb") as f:
        path.write_bytes(b"".join(itertools.islice(f, KILL_LINES)))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, kill_input, real_data, model_dir) -> Path:
    out = tmp_path_factory.mktemp("reference") / "out"
    proc = run_cli(_pack_args(kill_input, real_data, model_dir, out, *KILL_OPTS))
    assert proc.returncode == 0, proc.stderr
    return out


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_for(cond, proc: CliProcess, what: str, limit: float = 300) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return
        assert proc.poll() is None, f"the run ended before {what}: {proc.stderr.read()}"
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


POINTS = {  # "count": both workers forked (each is then checked not to outlive the command), no task done
    "count": lambda out, proc: len(_children(proc.pid)) >= 2
    and not list((out / ".vlmpack" / "records").glob("*.result.json")),
    "write": lambda out, proc: bool(list((out / ".vlmpack" / "shards").glob("*.json"))),
}


@pytest.mark.parametrize("sig,point", [(signal.SIGINT, "count"), (signal.SIGINT, "write"), (signal.SIGTERM, "write"),
                                       (signal.SIGKILL, "count"), (signal.SIGKILL, "write")])
def test_signal_stops_at_once_and_the_rerun_gives_the_same_bytes(sig, point, tmp_path, reference, kill_input,
                                                                 real_data, model_dir):
    out = tmp_path / "out"
    args = _pack_args(kill_input, real_data, model_dir, out, *(KILL_EXTRA if point == "count" else KILL_OPTS))
    proc = start_cli(args)
    _wait_for(lambda: (out / ".vlmpack").is_dir() and POINTS[point](out, proc), proc, f"the {point} stage")
    workers = _children(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    stopped_after = time.monotonic() - t0
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + sig
        assert "run the same command again to resume" in one_error_line(err)
        # a liveness bound, not a speed target: the old code waited 13-25 s for running tasks
        assert stopped_after < 10, f"took {stopped_after:.1f} s to stop"
    end = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)], "worker processes outlived the command"
    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert _hashes(out) == _hashes(reference)


def test_second_run_on_the_same_output_is_refused_with_the_holder_pid(tmp_path, kill_input, real_data, model_dir):
    out = tmp_path / "out"
    args = _pack_args(kill_input, real_data, model_dir, out, *KILL_EXTRA)
    first = start_cli(args)
    _wait_for(lambda: (out / ".vlmpack" / "lock").is_file() and (out / ".vlmpack" / "lock").read_text().strip(),
              first, "the lock")
    second = run_cli(args)
    assert second.returncode == 2
    assert f"pid {first.pid}" in one_error_line(second.stderr)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err


def test_overwrite_never_deletes_files_vlmpack_did_not_write(tmp_path, small_input, real_data, model_dir):
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("shard-000000.tar", "report.json", "notes.txt"):
        (out / name).write_text("user data")
    proc = run_cli(_pack_args(small_input, real_data, model_dir, out, "--overwrite"))
    assert proc.returncode == 2 and "no vlmpack run record" in one_error_line(proc.stderr)
    assert all((out / n).read_text() == "user data" for n in ("shard-000000.tar", "report.json", "notes.txt"))


def test_bricked_run_directory_is_recovered(tmp_path, small_input, real_data, model_dir):
    out = tmp_path / "out"
    args = _pack_args(small_input, real_data, model_dir, out, "--max-packs-per-shard", 3)
    assert run_cli(args).returncode == 0
    want = _hashes(out)
    run = out / ".vlmpack"
    # disk full at the wrong moment: empty stage files count as missing and are made again
    for p in [next((run / "shards").glob("*.json")), next((run / "records").glob("*.result.json")),
              run / "plan.npz", run / "stages.json", out / "report.json"]:
        p.write_bytes(b"")
    (out / "shard-000001.tar").write_bytes(b"")  # a shard cut to nothing, with its marker still there
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    assert _hashes(out) == want
    (run / "config.json").write_bytes(b"")  # the run record itself
    proc = run_cli(args)
    assert proc.returncode == 2 and "--overwrite" in one_error_line(proc.stderr)
    proc = run_cli([*args, "--overwrite"])
    assert proc.returncode == 0, proc.stderr
    assert _hashes(out) == want


def test_media_edited_before_a_resume_are_counted_again(tmp_path, real_data, model_dir):
    from vlmpack.train import PackCollator

    root = tmp_path / "root"
    recs = image_records_in(root, real_data, 120)
    (root / "in.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    args = _pack_args(root / "in.jsonl", root, model_dir, root / "out")
    assert run_cli(args).returncode == 0
    target = root / recs[0]["images"][0]
    big = max((real_data / "images").rglob("*.png"), key=lambda p: p.stat().st_size if "broken" not in str(p) else 0)
    shutil.copyfile(big, target)  # another real image, another size: another token count
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    assert run_cli(["check", root / "out"]).returncode == 0
    collator = PackCollator(model_dir, mrope=False)
    for raw in read_packs(root / "out"):
        collator.encode(raw)  # PackMismatchError if a count were stale


def test_file_size_limit_is_one_line_and_the_rerun_completes(tmp_path, small_input, real_data, model_dir):
    out = tmp_path / "out"
    args = _pack_args(small_input, real_data, model_dir, out, "--max-packs-per-shard", 3)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

    proc = run_cli(args, preexec_fn=limit)
    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert "File too large" in line and str(out) in line
    assert run_cli(args).returncode == 0
    ref = tmp_path / "ref"
    assert run_cli(_pack_args(small_input, real_data, model_dir, ref, "--max-packs-per-shard", 3)).returncode == 0
    assert _hashes(out) == _hashes(ref)


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    ok = os.geteuid() == 0 and shutil.which("mount") and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True).returncode == 0
    return bool(ok)


@pytest.mark.parametrize("fault,words", [("full", "No space left"), ("readonly", "Read-only file system")])
def test_disk_full_and_read_only_output_are_one_line(fault, words, tmp_path, small_input, real_data, model_dir):
    mnt = tmp_path / "mnt"
    if not _mount_tmpfs(mnt, "1m" if fault == "full" else "16m"):
        pytest.skip("needs root and mount to make a tmpfs")
    try:
        if fault == "readonly":
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            out = mnt
        else:
            out = mnt / "out"
        proc = run_cli(_pack_args(small_input, real_data, model_dir, out))
        assert proc.returncode == 2
        assert words in one_error_line(proc.stderr)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_bad_arguments_are_one_line(tmp_path, small_input, real_data, model_dir):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    tgz = tmp_path / "shard.tar.gz"
    tgz.write_bytes(gzip.compress(next((real_data / "wds").glob("*.tar")).read_bytes()[:50_000]))
    cases = {
        "directory without inputs": (_pack_args(tmp_path, real_data, model_dir, tmp_path / "o1"), "directory"),
        "glob matching nothing": (_pack_args(tmp_path / "*.jsonl", real_data, model_dir, tmp_path / "o2"), "glob"),
        "file as output": (_pack_args(small_input, real_data, model_dir, a_file), "file"),
        "missing input": (_pack_args(tmp_path / "nope.jsonl", real_data, model_dir, tmp_path / "o3"), "not found"),
        "model dir without config": (_pack_args(small_input, real_data, tmp_path, tmp_path / "o4"), "config.json"),
        "tar.gz as input": (_pack_args(tgz, real_data, model_dir, tmp_path / "o5"), "tar"),
        "binary as input": (_pack_args(Path(shutil.which("ls") or "/bin/ls"), real_data, model_dir, tmp_path / "o6"),
                            "binary"),
    }
    for name, (args, words) in cases.items():
        proc = run_cli(args)
        assert proc.returncode == 2, (name, proc.stderr)
        assert words in one_error_line(proc.stderr).lower(), (name, proc.stderr)
    for usage in (["pack", "--bogus"], [], ["pack", "--seq-len", "many"]):  # typer/click usage errors: exit 2
        proc = run_cli(usage)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, usage
    # the demo builder never wipes a folder it did not write
    mine = tmp_path / "mine"
    (mine / "real_data").mkdir(parents=True)  # `tools/build_demo.py --out mine` builds mine/real_data
    (mine / "real_data" / "thesis.tex").write_text("precious")
    builder = Path(__file__).resolve().parents[1] / "tools" / "build_demo.py"
    proc = subprocess.run([sys.executable, str(builder), "--out", str(mine)], capture_output=True, text=True)
    assert proc.returncode == 2 and "never deletes" in one_error_line(proc.stderr)
    assert (mine / "real_data" / "thesis.tex").read_text() == "precious"


def test_runs_that_did_nothing_do_not_succeed(tmp_path, small_input, real_data, model_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = run_cli(_pack_args(empty, real_data, model_dir, tmp_path / "o1"))
    assert proc.returncode == 3 and "no sample was packed" in one_error_line(proc.stderr)
    broken = real_data / "broken.jsonl"  # 28 broken records of which 2 are acceptable: 93 % rejected
    proc = run_cli(_pack_args(broken, real_data, model_dir, tmp_path / "o2"))
    line = one_error_line(proc.stderr)
    assert proc.returncode == 3 and "--max-reject-fraction" in line and "26 of 28 records rejected" in line
    assert (tmp_path / "o2" / "rejects.jsonl").is_file() and not list((tmp_path / "o2").glob("*.tar"))
    report = json.loads((tmp_path / "o2" / "report.json").read_text())
    assert report["status"] == "failed" and report["stage"] == "count"
    proc = run_cli(_pack_args(broken, real_data, model_dir, tmp_path / "o2", "--max-reject-fraction", 1))
    assert proc.returncode == 0, proc.stderr  # the same run dir resumes with the counts already made
    assert json.loads((tmp_path / "o2" / "report.json").read_text())["samples_packed"] == 2


def test_non_utf8_input_file_name(tmp_path, small_input, real_data, model_dir):
    name = os.fsdecode(b"in-\xff\xfe.jsonl")
    bad = tmp_path / name
    lines = small_input.read_text(encoding="utf-8").splitlines()[:30]
    lines.append('{"conversations": [{"from": "human", "value": "no id"}, {"from": "gpt", "value": "ok"}]}')
    lines.append('{"id": "x", "conversations": []}')
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run_cli(_pack_args(bad, real_data, model_dir, tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    rejects = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["reason"] for r in rejects] == ["empty_conversation"] and "\\xff" in rejects[0]["file"]
    assert run_cli(["check", tmp_path / "out"]).returncode == 0


def test_a_signal_while_the_pool_starts_still_kills_and_joins_its_workers(monkeypatch, model_dir):
    """SIGINT right after the worker pool is made, before the guard has it back (as a user's Ctrl-C
    can land while the workers are forked): every worker is still killed and joined before the
    interrupt leaves the guard, none is left to die later with its parent while holding the
    output's lock. The handlers are the command's own (:func:`vlmpack.signals.install`), and the body
    polls :func:`vlmpack.signals.check` as the stages do: Python may swallow the exception a handler
    raises (inside a finalizer or an at-fork hook), never the signal the handler recorded."""
    from vlmpack import signals
    from vlmpack.errors import Interrupted
    from vlmpack.pack import executors

    made = []
    real = executors.make_executor

    def make_then_interrupt(*args, **kw):
        pool = real(*args, **kw)  # its workers are forked by now
        made.extend(pool._processes.values())
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # Interrupted raised here, inside make_executor's call
        return pool

    monkeypatch.setattr(executors, "make_executor", make_then_interrupt)
    monkeypatch.setattr(signals, "_pending", [])  # this test's signal is not left pending for the next ones
    handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    signals.install()
    try:
        with pytest.raises(Interrupted):
            with executors.guarded_executor("local", 2, str(model_dir), preload=False):
                for _ in range(25):  # never past the first poll
                    signals.check()
                    time.sleep(0.2)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert len(made) == 2 and not [p for p in made if p.is_alive()]


def _gc_state() -> tuple:
    import gc

    return gc.get_threshold(), gc.get_freeze_count()


def test_pool_workers_freeze_what_they_forked_with_and_collect_young_objects_less_often(model_dir):
    """A local pool's workers (fork) start with the parent's objects frozen out of the collector's
    passes and the young generation collected every ``WORKER_GC_THRESHOLD[0]`` allocations; the
    parent's own collector settings are left as they were."""
    import gc

    from vlmpack.pack import executors

    suite = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's default (the suite's conftest sets its own)
    try:
        with executors.guarded_executor("local", 2, str(model_dir), preload=False) as pool:
            states = [pool.submit(_gc_state).result() for _ in range(4)]
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*suite)
    assert all(t == executors.WORKER_GC_THRESHOLD and frozen > 1000 for t, frozen in states), states


def _text_bound_new_misses(model_dir: str) -> int:
    from vlmpack.pack.validate import text_bound_of

    before = text_bound_of.cache_info().misses
    text_bound_of(model_dir)
    return text_bound_of.cache_info().misses - before


def test_pool_workers_fork_with_the_model_and_its_text_bound_ready(model_dir):
    """A count task asks for the model's text bound (a pass over the vocabulary) before it
    tokenizes: a preloading pool computes it once before forking, so no worker computes it again."""
    from vlmpack.pack import executors
    from vlmpack.pack.validate import text_bound_of

    text_bound_of.cache_clear()
    with executors.guarded_executor("local", 2, str(model_dir)) as pool:
        assert text_bound_of.cache_info().misses == 1
        new = [pool.submit(_text_bound_new_misses, str(model_dir)).result() for _ in range(4)]
    assert new == [0, 0, 0, 0]
