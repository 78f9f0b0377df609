"""The fewest tokens a text can become, without tokenizing it: the ``overlong`` check before counting.

A byte-level BPE token stands for at most ``M`` bytes of the (normalized) text, ``M`` the longest
token of the vocabulary in bytes (:func:`text_bound`). The rendered sample holds every text item of
its canonical messages (each supported chat template writes each text once, between template
pieces that end in ``\\n`` or a special token), and the tokens of the rendered text cover its
normalized bytes without overlap, so::

    num_tokens >= ceil(B / M),   B = UTF-8 bytes of normalize(concatenation of the sample's texts)

(:func:`min_text_tokens`; ``normalize`` is the tokenizer's own Unicode normal form, NFC for Qwen:
composing can shrink a text, Hangul jamo by up to 3x, so the bound is taken after it; normalizing
the concatenation can only compose more than the tokenizer, which normalizes each piece between
special tokens on its own, so ``B`` is never too large). Media tokens only add to the count. A
sample whose bound exceeds the pack capacity cannot fit under any tokenization and is rejected
``overlong`` before the tokenizer sees it: the tokenizer's memory grows with its input (a 100 MB
text took 13.5 GB and aborted, issue 19 item 12), this check reads the text once.

Sources of the rules: byte-level BPE writes each byte of a token as one character of GPT-2's
``bytes_to_unicode`` alphabet (openai/gpt-2 ``src/encoder.py``; the HF tokenizers ``ByteLevel``
decoder maps each character back to one byte), so a vocabulary entry of ``k`` characters is a
token of ``k`` bytes; added tokens are matched on their content, ``len(content.encode())`` bytes.
Qwen2/2.5/3-VL, Qwen3.5, InternVL3 and LLaVA-OneVision all ship the Qwen2 tokenizer (151,643 BPE
entries, the longest 128 bytes, 128 spaces; ``tests/test_overlong_text.py`` checks the bound on
random text against each real tokenizer).
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

#: Normalizers of tokenizers.json whose effect :func:`min_text_tokens` reproduces with Python's
#: ``unicodedata`` (the Unicode normal forms); any other normalizer (``Replace``, ``Strip``, ...) can
#: shrink text arbitrarily, and the bound is then not used.
_FORMS = {"NFC": "NFC", "NFKC": "NFKC", "NFD": "NFD", "NFKD": "NFKD"}


@dataclass(frozen=True, slots=True)
class TextBound:
    """``max_token_bytes``: the most bytes of normalized text one token stands for; ``forms``: the
    Unicode normal forms the tokenizer applies, in order (``()``: none)."""

    max_token_bytes: int
    forms: tuple[str, ...] = ()


def text_bound(tokenizer) -> TextBound | None:
    """The :class:`TextBound` of a transformers fast ``tokenizer``, or ``None`` when no sound bound
    is known: a model that is not BPE with a ``ByteLevel`` decoder, or a normalizer other than the
    Unicode normal forms (then nothing is rejected before tokenizing). Read from the ``tokenizers``
    objects: the model's vocabulary (``get_vocab(with_added_tokens=False)``, the ``model.vocab`` of
    ``tokenizer.json``), the added tokens and the JSON of the decoder and normalizer alone (about
    0.2 s for the Qwen2 vocabulary; serializing the whole tokenizer took 1-1.5 s). Never raises for
    a tokenizer's content."""
    try:
        from tokenizers.models import BPE

        backend = tokenizer.backend_tokenizer
        if not isinstance(backend.model, BPE):
            return None
        decoder, norm = backend.decoder, backend.normalizer
        if decoder is None or not _byte_level(json.loads(decoder.__getstate__())):
            return None
        forms = _forms(None if norm is None else json.loads(norm.__getstate__()))
        if forms is None:
            return None
        longest = max(map(len, backend.get_vocab(with_added_tokens=False)), default=1)
        added = max((len(str(a.content).encode("utf-8")) for a in backend.get_added_tokens_decoder().values()),
                    default=1)
        return TextBound(max(longest, added, 1), forms)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _byte_level(decoder: dict) -> bool:
    if decoder.get("type") == "ByteLevel":
        return True
    return decoder.get("type") == "Sequence" and any(d.get("type") == "ByteLevel" for d in decoder["decoders"])


def _forms(norm) -> tuple[str, ...] | None:
    if norm is None:
        return ()
    if norm.get("type") in _FORMS:
        return (_FORMS[norm["type"]],)
    if norm.get("type") == "Sequence":
        out: list[str] = []
        for n in norm["normalizers"]:
            f = _forms(n)
            if f is None:
                return None
            out += f
        return tuple(out)
    return None


def sample_texts(messages: Sequence[dict]) -> list[str]:
    """The text items of canonical ``messages`` (:mod:`vlmpack.records`), in order."""
    out = []
    for m in messages:
        for c in m.get("content", ()):
            if isinstance(c, dict):
                text = c.get("text")
                if isinstance(text, str) and c.get("type") == "text":
                    out.append(text)
    return out


def min_text_tokens(texts: Sequence[str], bound: TextBound) -> tuple[int, int]:
    """``(B, lower bound)``: ``B`` the UTF-8 bytes (int) of the normalized concatenation of ``texts``
    and ``ceil(B / bound.max_token_bytes)``, the fewest tokens they can become (module docstring).
    A character UTF-8 cannot encode (a lone surrogate) counts as one byte (the tokenizer refuses
    it; the bound stays low). Memory: one copy of the text (two when it is not normalized); never
    raises."""
    text = "".join(texts)
    for form in bound.forms:
        if not unicodedata.is_normalized(form, text):
            text = unicodedata.normalize(form, text)
    nbytes = len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
    return nbytes, math.ceil(nbytes / bound.max_token_bytes)
