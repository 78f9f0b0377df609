"""The main job's stages and their orchestration (``vlmpack pack``).

read (:mod:`vlmpack.sources`) -> :mod:`~vlmpack.pack.validate` -> :mod:`~vlmpack.pack.count_task` ->
plan (:mod:`vlmpack.packing`, pure functions) -> :mod:`~vlmpack.pack.write` (shards + Energon
metadata) -> :mod:`~vlmpack.pack.report`. :mod:`~vlmpack.pack.pipeline` runs them over a run
directory (:mod:`~vlmpack.pack.rundir`) with per-stage keys, on local processes
(:mod:`~vlmpack.pack.executors`) or Ray; :mod:`~vlmpack.pack.preflight` is ``vlmpack plan``.
"""
