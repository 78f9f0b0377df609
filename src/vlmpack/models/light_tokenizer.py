"""A model directory's tokenizer for counting without transformers: the pipeline transformers built,
read back with the ``tokenizers`` library alone.

Loading the tokenizer through transformers costs about 1.1 s of a process even with the class
recorded (:mod:`vlmpack.models.load_recipe`): 0.6 s to import transformers, 0.3 s for its model
table and the tokenizer class, 0.2-0.3 s to parse ``tokenizer.json`` in Python and rebuild the
pipeline from its vocabulary and merges. What counting asks of the tokenizer is small: its
``tokenizers`` pipeline (ids, through :mod:`vlmpack.models.tiktoken_bpe` or the pipeline itself),
token ids of a few strings, the added tokens, the special tokens and the chat template. So when
transformers has built a directory's tokenizer once, :func:`record` keeps, beside its load recipe
(``<cache root>/load/<key>.pipeline``), the pipeline transformers built (``backend_tokenizer.to_str()``:
the ``tokenizers`` library's own serialization, not ``tokenizer.json``, which transformers 5 rebuilds
with other offsets and decoder settings) and those answers as data; :func:`load` gives a
:class:`LightTokenizer` from them (``tokenizers.Tokenizer.from_str``, about 0.3 s for Qwen2's 151k
vocabulary; no transformers import).

Exact by construction and by check: :func:`record` keeps a directory only when the light tokenizer,
built from what it is about to write, answers every question it answers itself exactly as
transformers' tokenizer does, on the whole surface it serves (module :data:`PROBE_TEXTS`, every added
token, the chat templates with and without tools, the special tokens' strings and ids), and only
when its render of the chat template passed :class:`vlmpack.models.template_render.TemplateRender`'s
check against ``apply_chat_template`` (``render_checked``, recorded with the sha256 of the code that
decided it: another vlmpack checks again). Anything else asked of a :class:`LightTokenizer` (another
keyword, ``pad``, processors) is answered by transformers' tokenizer, loaded on first use.
Nothing read is executed: the pipeline is JSON parsed by the ``tokenizers`` library, the answers are
JSON data in the sealed recipe, and the pipeline file must have the sha256 the recipe names.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from vlmpack.fsio import atomic_write
from vlmpack.models import load_recipe  # noqa: F401 - a submodule: imported before the package's families

__all__ = ["PART", "PROBE_TEXTS", "LightTokenizer", "load", "record", "recorded"]

log = logging.getLogger(__name__)

#: The recipe part of the light tokenizer.
PART = "light"
#: Attributes answered from the recipe (token strings, ids, flags), as transformers' tokenizer has them.
ATTRS = ("bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id", "unk_token_id",
         "pad_token_id", "split_special_tokens")
#: Texts the light tokenizer must encode, call and decode as transformers' does (with every added token's
#: content, and the tokens the families look up) before a directory is recorded.
PROBE_TEXTS = ("\n", "assistant", "Assistant:", "image", "user", "system", " ", "", "hello world",
               "  two  spaces\tand\ttabs\r\nand lines\n\n", "héllo wörld 世界 🙂 ﬁ Å", "<think>\nreason\n</think>\n\n",
               "a" * 300, "1234567890 3.14159 -2e-5", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
#: Tool schemas of the probe that picks a chat template with tools.
_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


@lru_cache(maxsize=1)
def _code_sha256() -> str:
    """sha256 (hex) of the code a recorded answer depends on: this module, the template render and its
    Jinja environment (read once per process)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in ("light_tokenizer.py", "template_render.py", "jinja_env.py"):
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return h.hexdigest()


class LightTokenizer:
    """The tokenizer of a model directory as counting asks it (see the module doc). Built by :func:`load`.

    Answered here: ``backend_tokenizer`` (a ``tokenizers.Tokenizer``), ``chat_template``,
    ``get_chat_template(None, tools)``, ``special_tokens_map``, ``added_tokens_decoder``,
    ``convert_tokens_to_ids``, the attributes of :data:`ATTRS`, ``encode(text, add_special_tokens=...)``,
    ``tok(text or texts, add_special_tokens=...)`` (a dict with ``"input_ids"`` only) and
    ``decode(ids, clean_up_tokenization_spaces=False)``, ``len()``; ``render_checked``. Anything else (other
    arguments too) goes to transformers' tokenizer of the directory, loaded on first use by ``real``
    (``None``: an ``AttributeError`` instead, as while :func:`record` checks)."""

    def __init__(self, backend, facts: dict, real: Callable[[], Any] | None) -> None:
        self._backend = backend
        self._facts = facts
        self._load_real = real
        self._real = None
        self._added = None

    # ------------------------------------------------------------------ answered here
    @property
    def backend_tokenizer(self):
        return self._backend

    @property
    def chat_template(self):
        return self._facts["chat_template"]

    @property
    def special_tokens_map(self) -> dict:
        return dict(self._facts["special_tokens_map"])

    @property
    def render_checked(self) -> bool:
        return self._facts.get("render_checked") is True

    @property
    def added_tokens_decoder(self) -> dict:
        if self._added is None:
            self._added = dict(sorted(self._backend.get_added_tokens_decoder().items()))
        return dict(self._added)

    def get_chat_template(self, chat_template=None, tools=None):
        """The template ``apply_chat_template`` uses (recorded for ``chat_template=None``)."""
        picked = self._facts["templates"].get("tools" if tools is not None else "plain")
        if chat_template is None and isinstance(picked, str):
            return picked
        return self.real.get_chat_template(chat_template, tools)

    def convert_tokens_to_ids(self, tokens):
        """The id of a token string (the unknown token's id, or None, when it is no token), or a list of them."""
        if isinstance(tokens, str):
            i = self._backend.token_to_id(tokens)
            return self._facts["attrs"]["unk_token_id"] if i is None else i
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def encode(self, text, add_special_tokens: bool = True, **kwargs):
        """Token ids of one text (``list[int]``)."""
        if kwargs or not isinstance(text, str):
            return self.real.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._backend.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def __call__(self, text, add_special_tokens: bool = True, split_special_tokens: bool = False, **kwargs):
        """``{"input_ids": ids}`` of a text (``list[int]``) or of a list of texts (``list[list[int]]``);
        ``split_special_tokens``: special tokens' text tokenized as plain text (transformers sets the
        pipeline's ``encode_special_tokens`` for the call; here it is set back after it)."""
        batch = isinstance(text, list) and all(isinstance(t, str) for t in text)
        if kwargs or not (batch or isinstance(text, str)) or type(split_special_tokens) is not bool:
            return self.real(text, add_special_tokens=add_special_tokens, split_special_tokens=split_special_tokens,
                             **kwargs)
        backend = self._backend
        backend.encode_special_tokens = split_special_tokens
        try:
            encoded = backend.encode_batch(text if batch else [text], add_special_tokens=add_special_tokens)
        finally:
            backend.encode_special_tokens = False
        out = [e.ids for e in encoded]
        return {"input_ids": out if batch else out[0]}

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs):
        """The text of a list of ids, without the clean-up of spaces (``clean_up_tokenization_spaces=False``)."""
        plain = isinstance(token_ids, list) and all(type(i) is int for i in token_ids)
        if kwargs != {"clean_up_tokenization_spaces": False} or skip_special_tokens or not plain:
            return self.real.decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
        return self._backend.decode(token_ids, skip_special_tokens=False)

    def __getattr__(self, name: str):
        if name in ATTRS:
            return self._facts["attrs"][name]
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def __len__(self) -> int:
        """The full vocabulary with the added tokens (ids ``0 .. len - 1``), as transformers 5's
        ``TokenizersBackend.__len__`` answers it: the pipeline's ``get_vocab_size(with_added_tokens=True)``
        (checked against transformers' ``len()`` before a directory is recorded)."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    # ------------------------------------------------------------------ the rest
    @property
    def real(self):
        """transformers' tokenizer of the directory (loaded on first use)."""
        if self._real is None:
            if self._load_real is None:
                raise AttributeError("the light tokenizer answers no more while it is checked")
            log.debug("light tokenizer: loading transformers' tokenizer for a question it does not answer")
            self._real = self._load_real()
        return self._real


def _facts(tok) -> dict:
    def template(tools):
        try:
            return tok.get_chat_template(None, tools)
        except Exception:  # noqa: BLE001 - no such template: asked of transformers then
            return None

    return {"chat_template": tok.chat_template, "special_tokens_map": dict(tok.special_tokens_map),
            "templates": {"plain": template(None), "tools": template(_TOOLS)},
            "attrs": {a: getattr(tok, a) for a in ATTRS}}


def _surface(tok) -> tuple:
    """Every answer :class:`LightTokenizer` gives itself, from ``tok``."""
    added = tok.added_tokens_decoder
    texts = [*PROBE_TEXTS, *(t.content for t in added.values()), "".join(t.content for t in added.values())]
    tokens = [*(t.content for t in added.values()), "assistant", "\n", "Ċ", "user", "<no such token>"]
    encoded = [tok.encode(t, add_special_tokens=s) for t in texts for s in (False, True)]
    split = tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    tok.backend_tokenizer.encode_special_tokens = False  # transformers leaves the call's setting on its pipeline
    return (split, len(tok), tok.backend_tokenizer.to_str(), tok.chat_template,
            repr(sorted(tok.special_tokens_map.items())), repr(added), [getattr(tok, a) for a in ATTRS],
            tok.get_chat_template(None, None) if tok.chat_template else None,
            [tok.convert_tokens_to_ids(t) for t in tokens],
            tok.convert_tokens_to_ids(tokens), encoded,
            [tok(t, add_special_tokens=s)["input_ids"] for t in texts for s in (False, True)],
            tok(texts, add_special_tokens=False)["input_ids"],
            [tok.decode(ids, clean_up_tokenization_spaces=False) for ids in encoded])


def _pipeline_path(model_dir) -> Path | None:
    path = load_recipe.recipe_path(model_dir)
    return None if path is None else path.with_suffix(".pipeline")


def record(model_dir: str | Path, tok) -> bool:
    """Keep ``tok`` (transformers' tokenizer of ``model_dir``, as the families load it) for
    :func:`load` when the light tokenizer answers as it does (module doc); else record that it does
    not. Returns whether it was kept. Never raises for the tokenizer or the cache (a cache that cannot
    be written: nothing kept)."""
    from tokenizers import Tokenizer

    from vlmpack.models.template_render import TemplateRender

    path = _pipeline_path(model_dir)
    backend = getattr(tok, "backend_tokenizer", None)
    if path is None:
        return False
    ok, text = False, ""
    try:
        if backend is not None and not tok.split_special_tokens and not backend.encode_special_tokens:
            text = backend.to_str()
            facts = _facts(tok)
            json.dumps(facts)  # data only (TypeError otherwise: not kept)
            light = LightTokenizer(Tokenizer.from_str(text), facts, None)
            ok = _surface(light) == _surface(tok)
            facts["render_checked"] = ok and TemplateRender.for_tokenizer(tok) is not None
    except Exception as e:  # noqa: BLE001 - a tokenizer the light one cannot stand for: not kept
        log.debug("light tokenizer of %s not kept (%s: %s)", model_dir, type(e).__name__, e)
        ok = False
    if not ok:
        load_recipe.record(model_dir, PART, {"ok": False})
        return False
    data = text.encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError:
        return False
    load_recipe.record(model_dir, PART, {"ok": True, "pipeline_sha256": hashlib.sha256(data).hexdigest(),
                                         "code_sha256": _code_sha256(), "facts": facts})
    return True


def recorded(model_dir: str | Path) -> dict | None:
    """The recipe part of ``model_dir``'s light tokenizer (``{"ok": ...}``), or None (none yet, or
    recorded by other code: asked again)."""
    part = load_recipe.read(model_dir, PART)
    if part is None or part.get("ok") is False:
        return part
    return part if part.get("code_sha256") == _code_sha256() else None


def load(model_dir: str | Path, real: Callable[[], Any]) -> LightTokenizer | None:
    """The :class:`LightTokenizer` of ``model_dir`` when :func:`record` kept one (its pipeline file
    matches the recipe's sha256 and the facts have their shape), else None. ``real`` loads
    transformers' tokenizer of the directory (for the questions it does not answer). Never raises."""
    part = recorded(model_dir)
    path = _pipeline_path(model_dir)
    if part is None or not part.get("ok") or path is None:
        return None
    facts = part.get("facts")
    shape = (isinstance(facts, dict) and isinstance(facts.get("special_tokens_map"), dict)
             and isinstance(facts.get("templates"), dict) and isinstance(facts.get("attrs"), dict)
             and set(facts["attrs"]) == set(ATTRS) and isinstance(facts.get("chat_template"), (str, dict)))
    if not shape:
        return None
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != part.get("pipeline_sha256"):
            return None
        from tokenizers import Tokenizer

        return LightTokenizer(Tokenizer.from_str(data.decode()), facts, real)
    except Exception:  # noqa: BLE001 - an unreadable or damaged file: transformers' load instead
        return None
