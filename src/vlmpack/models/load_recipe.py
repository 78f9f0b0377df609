"""What transformers resolved for a model directory, recorded once and reused: a faster model load.

Loading a family the first time asks transformers' own resolution: ``AutoTokenizer`` picks the
tokenizer class (``transformers.models.auto.tokenization_auto``: the class named in
``tokenizer_config.json``, corrected by the model type's mapping and v5's overrides), and a family
builds its image processor class ``from_pretrained`` to read the settings its counting rule needs
(Qwen-VL: ``size.shortest_edge`` / ``longest_edge``, ``patch_size``, ``merge_size``). Both pull in
PyTorch and most of transformers (``AutoTokenizer`` imports ``configuration_utils``, which imports
torch; the image processors import the whole image and modeling stack): about 6.5 CPU-s per
process for Qwen2.5-VL, of which the answers are a class name and four integers.

So the answers are recorded, as data, in ``<cache root>/load/<key>.json`` (the cache root of
:func:`vlmpack.fsio.cache_root`, the count cache's; none when it is off), and the next load of
the same directory takes them from there: the tokenizer class is imported from the transformers
package by its name and built with its own ``from_pretrained`` (no ``AutoTokenizer``, no torch),
and the family counts with the recorded settings (its processor object is built only when pixels
are needed: training, ``vlmpack verify``'s media pass). For the demo's Qwen2.5-VL directory a
fresh process's ``load_model`` then takes 2.7 CPU-s instead of 9.0, interpreter start and imports
included (``bench/bench_load.py``, docs/benchmarks.md). The Qwen-VL families go one step further:
the pipeline transformers built is kept beside the recipe and read back without transformers
(:mod:`vlmpack.models.light_tokenizer`, part ``light``); the key's library versions are read from
their distributions' metadata, so computing it imports neither.

Exact by construction, and checked where it is recorded:

- ``key``: sha256 of every configuration and vocabulary file of the directory (name and bytes of
  each ``*.json``, ``*.jinja``, ``*.model``, ``*.txt``, ``*.tiktoken`` file; weights are not read)
  and of the transformers and tokenizers versions: any change of either is another key.
- the tokenizer class is recorded only when the class built directly gives the same tokenizer as
  ``AutoTokenizer`` (same class, same serialized ``tokenizers`` pipeline, chat template, special
  tokens, added tokens and init arguments); else the recipe says so and ``AutoTokenizer`` is used.
- what a family records is read off the processor object transformers built (never restated).

Nothing in a recipe is executed: it is a sealed JSON object (:func:`vlmpack.fsio.sealed_json_bytes`;
a file whose checksum does not match counts as missing); the tokenizer class is taken only when its
name is an identifier, ``getattr(transformers, name)`` is a class of the installed transformers
package (its ``__module__`` under ``transformers.``) and a subclass of ``PreTrainedTokenizerBase``:
the same code ``AutoTokenizer`` would import. A recipe that fails any check counts as missing.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

from vlmpack.fsio import atomic_write, cache_root, read_sealed_json, sealed_json_bytes

__all__ = ["read", "recipe_path", "record", "same_tokenizer", "tokenizer_class", "use_cache_root"]

#: The recipe format (part of the key).
FORMAT = 1
#: Suffixes of the files a key hashes: configurations, chat templates and vocabularies, not weights.
KEY_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken")

_UNSET = object()
_root: list = [_UNSET]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def use_cache_root(root: str | Path | None) -> None:
    """Keep recipes under ``root`` (the run's cache root, :func:`vlmpack.fsio.cache_root` of its
    ``--cache-dir``; ``None``: no recipes) in this process and the workers it forks. Without a
    call, :func:`vlmpack.fsio.cache_root` of the environment decides."""
    _root[0] = None if root is None else Path(root)


def _recipes_dir() -> Path | None:
    root = cache_root() if _root[0] is _UNSET else _root[0]
    return None if root is None else root / "load"


def recipe_key(model_dir: str | Path) -> str:
    """sha256 (hex) of the directory's configuration and vocabulary files (:data:`KEY_SUFFIXES`,
    names and bytes, sorted by name; links followed, as transformers follows them) with the
    transformers and tokenizers versions and :data:`FORMAT`. Hashed once per process while every
    such file keeps its name, size and mtime (a load asks for the key of its directory several
    times: the tokenizer's part, the image settings', their records). Raises ``OSError``."""
    files = sorted((p for p in Path(model_dir).iterdir() if p.suffix in KEY_SUFFIXES and p.is_file()),
                   key=lambda x: x.name)
    stamp = tuple((p.name, (st := p.stat()).st_size, st.st_mtime_ns) for p in files)
    return _content_key(str(model_dir), stamp)


@lru_cache(maxsize=1)
def library_versions() -> tuple[str, str]:
    """The installed transformers and tokenizers versions, from their distributions' metadata
    (what their ``__version__`` says, without importing transformers: 0.6 s)."""
    from importlib.metadata import version

    return version("transformers"), version("tokenizers")


@lru_cache(maxsize=64)
def _content_key(model_dir: str, stamp: tuple) -> str:
    transformers_version, tokenizers_version = library_versions()
    h = hashlib.sha256(f"vlmpack-load-recipe/{FORMAT}/{transformers_version}/{tokenizers_version}".encode())
    for name, _, _ in stamp:
        data = (Path(model_dir) / name).read_bytes()
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def recipe_path(model_dir: str | Path) -> Path | None:
    """Where the recipe of ``model_dir`` is kept, or ``None`` (recipes off, or the directory
    cannot be read)."""
    d = _recipes_dir()
    if d is None:
        return None
    try:
        return d / f"{recipe_key(model_dir)}.json"
    except OSError:
        return None


def read(model_dir: str | Path, part: str) -> dict | None:
    """The recorded ``part`` of ``model_dir``'s recipe (a dict), or ``None`` (none recorded, recipes
    off, or a file that is not a sealed recipe). Never raises."""
    path = recipe_path(model_dir)
    if path is None:
        return None
    obj = read_sealed_json(path)
    value = obj.get(part) if isinstance(obj, dict) and obj.get("format") == FORMAT else None
    return value if isinstance(value, dict) else None


def record(model_dir: str | Path, part: str, value: dict) -> None:
    """Add ``part`` = ``value`` (JSON data) to ``model_dir``'s recipe. A recipe that cannot be written
    (read-only cache, full disk) is skipped: the next load resolves again. Never raises ``OSError``."""
    path = recipe_path(model_dir)
    if path is None:
        return
    obj = read_sealed_json(path)
    obj = obj if isinstance(obj, dict) and obj.get("format") == FORMAT else {"format": FORMAT}
    obj[part] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, sealed_json_bytes(obj))
    except OSError:
        pass


def tokenizer_class(name) -> type | None:
    """The tokenizer class ``name`` of the installed transformers package, or ``None`` when
    ``name`` is not an identifier, or ``getattr(transformers, name)`` is not a class defined in
    transformers that derives from ``PreTrainedTokenizerBase``."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        return None
    import transformers
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    try:
        cls = getattr(transformers, name)
    except Exception:  # noqa: BLE001 - the lazy module raises what the named module's import raises
        return None
    ok = (isinstance(cls, type) and issubclass(cls, PreTrainedTokenizerBase)
          and str(getattr(cls, "__module__", "")).startswith("transformers."))
    return cls if ok else None


def same_tokenizer(a, b) -> bool:
    """Whether two loaded tokenizers are the same: class, serialized ``tokenizers`` pipeline (fast
    ones), chat template, special tokens, added tokens, vocabulary size and init arguments."""
    def state(t):
        backend = getattr(t, "backend_tokenizer", None)
        return (type(t), backend.to_str() if backend is not None else None, t.chat_template,
                repr(t.special_tokens_map), repr(t.added_tokens_decoder), len(t),
                repr(sorted((k, repr(v)) for k, v in t.init_kwargs.items())))

    return state(a) == state(b)
