"""Measuring a command and its process tree, for the bench scripts (``from measure import ...``;
``python bench/<script>.py`` puts this folder on ``sys.path``).

:func:`run_tree_measured`: wall seconds, CPU seconds of the tree (what ``os.wait4`` reports: the
command and the descendants it waited for), ``ru_maxrss`` (the largest single process) and the peak of
the tree's summed PSS over time (a shared page is split between the processes that map it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time


def tree(root: int) -> list[int]:
    """``root`` and every live descendant (from ``/proc/*/stat`` parent ids)."""
    parent: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parent.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parent.get(pid, [])
    return out


def pss_kb(pid: int) -> tuple[int, int]:
    """``(Pss, Pss_Anon)`` of ``pid`` in kB (0, 0 when it is gone)."""
    got = {"Pss:": 0, "Pss_Anon:": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(" ")
                if key in got:
                    got[key] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return got["Pss:"], got["Pss_Anon:"]


def run_tree_measured(cmd: list[str], every: float = 0.5, *, cwd: str | None = None, env: dict | None = None,
                      log: str | None = None) -> dict:
    """Run ``cmd`` (in ``cwd`` with ``env``; its stdout and stderr into the file ``log``, else stdout
    dropped and stderr kept for the error message); wall seconds, CPU seconds (user + system, workers
    included), its ``ru_maxrss`` (MB: the largest single process of the tree) and the peak over time
    of the process tree's summed PSS / anonymous PSS (MB, polled every ``every`` s). Raises
    ``RuntimeError`` (with the end of its output) when it fails."""
    peak = [0, 0]
    with tempfile.TemporaryFile() if log is None else open(log, "w+b") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL if log is None else err, stderr=err)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                pss = [pss_kb(p) for p in tree(proc.pid)]
                peak[0] = max(peak[0], sum(x[0] for x in pss))
                peak[1] = max(peak[1], sum(x[1] for x in pss))
                stop.wait(every)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the zombie stays readable until reaped here
        sec = time.perf_counter() - t
        stop.set()
        poller.join()
        if status != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed: {err.read().decode(errors='replace')[-3000:]}")
    return {"seconds": sec, "cpu_seconds": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024,
            "tree_pss_mb": peak[0] / 1024, "tree_anon_mb": peak[1] / 1024}


def record_load_recipe(model_dir, root, env: dict | None = None) -> None:
    """Record ``model_dir``'s model load recipe (``vlmpack.models.load_recipe``) under the cache root
    ``root`` in a process of its own, before timing: what a machine's first load of it does (with
    the tiktoken check, ``vlmpack.models.tiktoken_bpe``, a count stage's driver does before forking)."""
    subprocess.run([sys.executable, "-c", "import sys; from vlmpack.models import load_model; "
                    "getattr(load_model(sys.argv[1]), 'fast_bpe', None)",
                    str(model_dir)], env={**(os.environ if env is None else env), "VLMPACK_CACHE": str(root)},
                   check=True, capture_output=True)
