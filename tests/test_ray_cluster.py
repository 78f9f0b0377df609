"""``--executor ray`` on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head and a
second node, one CPU each, separate raylets and worker processes on this machine).

1. The same input packed by the local process pool and by Ray tasks spread over both nodes gives
   byte-identical shards, ``.tar.idx`` files, Energon metadata and rejects (the tasks are pure
   functions of their input byte range; the driver merges results in task order), with shards
   closed by both bounds (20 packs, 6 MB).
2. A Ray worker SIGKILLed while it runs a counting task (what a lost node or an OOM kill does):
   Ray re-runs the task (``max_retries``) and the output bytes are the same again.

The input is the first 1,500 demo records plus the demo's broken records, split into tasks of
256 KiB (instead of the default size, so that the run has enough tasks for two nodes and a kill).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from vlmpack.config import load_config  # noqa: E402
from vlmpack.pack import stages  # noqa: E402
from vlmpack.pack.pipeline import run_pack  # noqa: E402

TASK_BYTES = 256 << 10
SEQ_LEN = 4096


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def inputs(real_data, tmp_path_factory) -> list[str]:
    src = tmp_path_factory.mktemp("rayin") / "part.jsonl"
    with open(real_data / "real_sft.jsonl", "rb") as f:
        src.write_bytes(b"".join(line for _, line in zip(range(1500), f)))
    return [str(src), str(real_data / "broken.jsonl")]


def _cfg(inputs, real_data, model_dir, out: Path, **kw):
    kw.setdefault("cache_dir", "off")  # the counting tasks must run (on Ray), never come from the session's cache
    return load_config(input=inputs, media_root=str(real_data), model=str(model_dir), output=str(out),
                       seq_len=SEQ_LEN, progress=False, max_packs_per_shard=20, max_shard_bytes=6_000_000, **kw)


def _output_bytes(out: Path) -> dict[str, str]:
    """sha256 of every file of the output that does not hold timings or the executor's name."""
    files = [p for p in out.rglob("*") if p.is_file() and ".vlmpack" not in p.parts
             and p.name not in ("report.json", "report.html")]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files)}


@pytest.fixture(scope="module")
def local(inputs, real_data, model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "out"
    mp = pytest.MonkeyPatch()
    mp.setattr(stages, "TASK_BYTES", TASK_BYTES)
    try:
        report = run_pack(_cfg(inputs, real_data, model_dir, out, workers=2))
    finally:
        mp.undo()
    return out, report


def _task_processes(prefix: str) -> dict[int, int]:
    """``{pid: parent pid}`` of the processes whose title is ``ray::<prefix>`` (Ray workers running
    that task; a worker's parent is the raylet of its node)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{prefix}".encode()):
                found[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def _watch(prefix: str, seen: dict, stop: threading.Event, kill: bool = False) -> None:
    """Record ``{pid: parent pid}`` of the Ray workers seen running a ``prefix`` task until ``stop``;
    ``kill``: SIGKILL the first one seen, then stop watching."""
    while not stop.is_set():
        for pid, ppid in _task_processes(prefix).items():
            seen[pid] = ppid
            if kill:
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.02)


def _ray_pack(cluster, inputs, real_data, model_dir, out: Path, *, kill: bool = False) -> tuple[dict, dict]:
    """``run_pack`` with ``--executor ray`` on ``cluster`` while :func:`_watch` watches the counting
    tasks; returns (report, the workers seen: pid -> parent pid)."""
    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=("run_task", seen, stop, kill), daemon=True)
    watcher.start()
    try:
        report = run_pack(_cfg(inputs, real_data, model_dir, out, workers=2, executor="ray",
                               ray_address=cluster.address))
    finally:
        stop.set()
        watcher.join()
    return report, seen


def _is_raylet(pid: int) -> bool:
    try:
        return b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def test_ray_cluster_gives_the_local_bytes(cluster, local, inputs, real_data, model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "TASK_BYTES", TASK_BYTES)
    out = tmp_path / "ray"
    report, seen = _ray_pack(cluster, inputs, real_data, model_dir, out)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    local_out, local_report = local
    assert _output_bytes(out) == _output_bytes(local_out) and any(k.endswith(".tar") for k in _output_bytes(out))
    for key in ("samples_packed", "num_packs", "rejected", "tokens"):
        assert report.get(key) == local_report.get(key), key
    counts = list(json.loads((out / ".nv-meta" / ".info.json").read_text())["shard_counts"].values())
    assert 20 in counts and any(n < 20 for n in counts[:-1]), counts  # shards closed by each bound
    # the counting tasks ran in worker processes of both nodes (their parents: two raylets)
    raylets = {ppid for ppid in seen.values() if _is_raylet(ppid)}
    assert len(raylets) == 2, f"counting tasks ran under {len(raylets)} raylet(s): {seen}"


def test_a_killed_ray_worker_is_retried_to_the_same_bytes(cluster, local, inputs, real_data, model_dir, tmp_path,
                                                          monkeypatch):
    monkeypatch.setattr(stages, "TASK_BYTES", TASK_BYTES)
    out = tmp_path / "ray-killed"
    report, killed = _ray_pack(cluster, inputs, real_data, model_dir, out, kill=True)
    assert killed, "no Ray worker was seen running a counting task"
    assert _output_bytes(out) == _output_bytes(local[0])
    assert report["samples_packed"] == local[1]["samples_packed"]
