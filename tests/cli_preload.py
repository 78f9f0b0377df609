"""Imported by the CLI fork server (:data:`cli_runner.PRELOAD`) after the libraries: the model family
of the suite's Qwen2.5-VL directory (the ``model_dir`` fixture), loaded once per server as every
``vlmpack`` command of the tests that name it would load it first (its tokenizer: ~0.5 s of each
command, most of it transformers parsing ``tokenizer.json`` in Python), with its text bound and its
tiktoken encoder (0.4 s of a command's first count: :attr:`~vlmpack.models.qwen2_vl.Qwen2VLFamily.fast_bpe`); the
packing planner's compiled functions, loaded from numba's cache as every ``vlmpack pack`` loads them
on its first plan (0.45 CPU-s of a 1.5 CPU-s pack of 120 demo records); and, last, everything the
server holds frozen out of the garbage collector's passes (``gc.freeze()``): a command's collections
walk only what the command allocates, not the ~10^6 objects of torch, transformers and the rest, and
do not write into (copy) the server's pages shared with every command (89 commands of four test files:
63 -> 57 CPU-s). Nothing of what a command computes depends on when cyclic garbage is freed.

The commands get it through :func:`vlmpack.models.load_model`'s own per-process cache, which is keyed
by the directory's path and processor options: a command naming any other directory, a copy or a
changed one, loads it itself, so every failure path of loading is still a command's own. The
directory is a fixture nobody writes into once built (built under a lock and renamed into place);
when it is not there yet when the server starts, nothing is loaded here.
"""

from __future__ import annotations

from cache_dir import CACHE

_DIR = CACHE / "qwen2_5_vl"  # conftest's model_dir fixture

if (_DIR / "tokenizer.json").is_file() and (_DIR / "config.json").is_file():
    from vlmpack.models import load_model
    from vlmpack.pack.validate import text_bound_of

    try:
        getattr(load_model(str(_DIR)), "fast_bpe", None)  # its tiktoken encoder: built on first tokenize
        text_bound_of(str(_DIR))
    except Exception:  # noqa: BLE001 - the server must start whatever happens; commands then load it themselves
        pass

try:  # the bfd planner's numba functions (the default algorithm), their cached machine code loaded
    from numba_warm import warm_default_plan

    warm_default_plan()
except Exception:  # noqa: BLE001 - as above: a command then loads them itself
    pass

import gc  # noqa: E402

gc.collect()
gc.freeze()
