"""Imported by the CLI fork server (:data:`cli_runner.PRELOAD`) after the libraries: the model family
of the suite's Qwen2.5-VL directory (the ``model_dir`` fixture), loaded once per server as every
``vlmpack`` command of the tests that name it would load it first (its tokenizer: ~0.5 s of each
command, most of it transformers parsing ``tokenizer.json`` in Python), with its text bound.

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
        load_model(str(_DIR))
        text_bound_of(str(_DIR))
    except Exception:  # noqa: BLE001 - the server must start whatever happens; commands then load it themselves
        pass
