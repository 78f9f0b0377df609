"""The tokenizer and chat template of a model directory, loaded as transformers' processors load
them (:func:`load_chat_tokenizer`; shared by every family)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from vlmpack.errors import ConfigError


def load_chat_tokenizer(model_dir: str | Path, *, light: bool = False):
    """The fast tokenizer of ``model_dir`` with its chat template (from ``chat_template.json`` /
    ``chat_template.jinja`` when ``tokenizer_config.json`` has none, as transformers' processors
    load it). The class is the one ``AutoTokenizer.from_pretrained`` picks; once recorded for this
    directory (:mod:`vlmpack.models.load_recipe`, only when the class built directly gives the same
    tokenizer) it is built directly, without ``AutoTokenizer`` (whose import pulls in torch).
    ``light`` (a family that counts through what :class:`vlmpack.models.light_tokenizer.LightTokenizer`
    answers): that tokenizer once recorded for the directory (no transformers import), recorded
    after transformers' load otherwise. Raises :class:`ConfigError` (one line) when it cannot be
    loaded, naming the files missing when the directory holds no tokenizer file
    (:func:`require_tokenizer_files`)."""
    from vlmpack.models import light_tokenizer, load_recipe

    require_tokenizer_files(model_dir)
    if light:
        tok = light_tokenizer.load(model_dir, functools.partial(load_chat_tokenizer, model_dir))  # picklable
        if tok is not None:
            return tok
        tok = load_chat_tokenizer(model_dir)
        part = light_tokenizer.recorded(model_dir)
        if part is None or part.get("ok"):  # none yet, or kept but its pipeline file gone or damaged
            light_tokenizer.record(model_dir, tok)
        return tok
    recipe = load_recipe.read(model_dir, "tokenizer")
    cls = load_recipe.tokenizer_class(recipe.get("class")) if recipe is not None else None
    try:
        if cls is not None:
            tok = cls.from_pretrained(str(model_dir))
        else:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(model_dir))
            if recipe is None:
                _record_class(model_dir, tok)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
        raise ConfigError(f"{model_dir}: cannot load the tokenizer ({type(e).__name__}: {e})") from None
    if not getattr(tok, "chat_template", None):
        tok.chat_template = _template_from_files(Path(model_dir))
    return tok


def _record_class(model_dir: str | Path, tok) -> None:
    """Record the class ``AutoTokenizer`` gave (``tok``'s) when building it directly gives the same
    tokenizer, else that the directory needs ``AutoTokenizer`` (class ``None``)."""
    from vlmpack.models import load_recipe

    if load_recipe.recipe_path(model_dir) is None:
        return
    cls = load_recipe.tokenizer_class(type(tok).__name__)
    same = cls is type(tok) and load_recipe.same_tokenizer(tok, cls.from_pretrained(str(model_dir)))
    load_recipe.record(model_dir, "tokenizer", {"class": type(tok).__name__ if same else None})


#: Files one of which a tokenizer directory holds (fast tokenizer, its config, SentencePiece or BPE vocabulary).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def require_tokenizer_files(model_dir: str | Path) -> None:
    """Raise :class:`ConfigError` (one line, the files not found) when ``model_dir`` holds none of
    :data:`TOKENIZER_FILES`: a directory with only ``config.json`` (the weights' folder, a partial
    download) fails here instead of with what transformers makes of it."""
    if not any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{model_dir}: no tokenizer files ({' / '.join(TOKENIZER_FILES[:2])} not found); --model "
                          "must be a full HF-format model directory (tokenizer, chat template, processor and config)")


def _template_from_files(model_dir: Path) -> str:
    for name in ("chat_template.jinja", "chat_template.json"):
        p = model_dir / name
        if p.is_file():
            text = p.read_text()
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    raise ConfigError(f"{model_dir}: the tokenizer has no chat template and there is no chat_template.json/.jinja")
