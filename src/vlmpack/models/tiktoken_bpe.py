"""Byte-level BPE through tiktoken: the ids of a transformers fast tokenizer's default call, 5-8x faster.

Counting tokenizes every sample's rendered text once; with the Hugging Face ``tokenizers`` library
that was most of a count worker's time (Qwen2's tokenizer: ~4.9 us a token on this machine, three
quarters of it in the pre-tokenizer's Oniguruma regex). tiktoken runs the same byte-level BPE with
a faster regex engine and merge loop: 0.12x the CPU on the demo's 5,783 rendered texts (1.45 M
tokens, equal ids), a whole ``vlmpack pack`` 0.69x (``bench/bench_tokenize.py``, docs/benchmarks.md).
:class:`TiktokenBPE` gives a tokenizer's ids through it, for the tokenizers where that is the same
computation, and :func:`problem` / :func:`full_problem` say which those are.

The rule restated, step by step, from ``tokenizers`` (``TokenizerImpl::encode_single_sequence``
with ``add_special_tokens=True``, as transformers' ``TokenizersBackend._encode_plus`` calls it):

1. the text is split on the added tokens (``AddedVocabulary::extract_and_normalize``: every added
   token's content, leftmost-longest; here a regex alternation, longest first), each match one id;
2. each piece between them is normalized (the backend's own normalizer is called: NFC for Qwen);
3. pre-tokenized (``Split`` on the pattern, ``Isolated``, then ``ByteLevel``) and BPE-merged:
   tiktoken's ``encode_ordinary`` with the same pattern and ``mergeable_ranks`` = the vocabulary's
   byte strings -> ids (the pattern matches every character, so no text falls between matches);
4. the post-processor adds nothing (``ByteLevel``, a ``TemplateProcessing`` of the sequence alone, or none).

tiktoken merges the adjacent pair whose concatenation has the lowest rank, ``tokenizers`` the pair
with the lowest merge index: the same choice when the i-th merge produces a token whose id grows
with i, each token has one merge, and a vocabulary token is its own BPE (tiktoken takes a whole
vocabulary piece as one id). :func:`full_problem` checks all three on the vocabulary (about 1.5 s,
done once per model directory and recorded: :func:`fast_encoder`); :func:`problem` checks the
pipeline's shape (type and settings of normalizer, pre-tokenizer, model, post-processor, added
tokens). Tests compare the ids with the tokenizer's own on every demo text, every Unicode code point
in several contexts and random text (``tests/test_tiktoken_bpe.py``) for each tokenizer of the suite
that passes. ``--special-tokens split`` and tokenizers that fail keep the tokenizer's own call.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ENV_OFF", "OFF", "TiktokenBPE", "fast_encoder", "full_problem", "problem"]

#: ``VLMPACK_TIKTOKEN=off`` (or one of :data:`OFF`): count with the tokenizer's own call
ENV_OFF = "VLMPACK_TIKTOKEN"
OFF = ("off", "0", "no", "false", "none")


def byte_level_alphabet() -> dict[str, int]:
    """The character -> byte map of byte-level BPE vocabularies (GPT-2's ``bytes_to_unicode``,
    restated from ``transformers.models.gpt2.tokenization_gpt2.bytes_to_unicode``: printable
    Latin-1 bytes map to themselves, the other 68 to U+0100 onward in byte order)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return {c: b for b, c in chars.items()}


def byte_level_table() -> dict[int, int]:
    """``str.translate`` table of the byte-level alphabet: each of its characters -> the code point
    of its byte (so ``.encode("latin-1")`` gives the bytes), every other Latin-1 character ->
    U+FFFF (so that encoding fails, as for any character above U+00FF left as it is)."""
    table = {i: 0xFFFF for i in range(256)}
    table.update({ord(c): b for c, b in byte_level_alphabet().items()})
    return table


def _byte_ranks(backend) -> dict[bytes, int] | None:
    """The vocabulary (added tokens left out) as byte strings -> ids, or None when a token holds a
    character outside the byte-level alphabet or two tokens are the same bytes. (One ``translate``
    and ``encode`` per token, C loops, instead of a generator over its characters: 0.27 -> 0.18 s
    for Qwen's 151,643 tokens.)"""
    table = byte_level_table()
    vocab = backend.get_vocab(with_added_tokens=False)
    try:
        ranks = {tok.translate(table).encode("latin-1"): i for tok, i in vocab.items()}
    except UnicodeEncodeError:
        return None
    return ranks if len(ranks) == len(vocab) else None


def _state(component) -> dict | None:
    return None if component is None else json.loads(component.__getstate__())


def _pattern(pre: dict | None) -> str | None:
    """The Split pattern of ``Sequence[Split(Regex, Isolated), ByteLevel(use_regex=False)]``, else None."""
    if not pre or pre.get("type") != "Sequence" or len(pre.get("pretokenizers", [])) != 2:
        return None
    split, byte_level = pre["pretokenizers"]
    ok = (split.get("type") == "Split" and split.get("behavior") == "Isolated" and not split.get("invert")
          and isinstance(split.get("pattern"), dict) and "Regex" in split["pattern"]
          and byte_level.get("type") == "ByteLevel" and not byte_level.get("add_prefix_space")
          and not byte_level.get("use_regex"))
    return split["pattern"]["Regex"] if ok else None


def problem(tokenizer) -> str | None:
    """Why :class:`TiktokenBPE` cannot give ``tokenizer``'s ids (a transformers tokenizer), from
    the shape of its pipeline only, or None. Cheap (no vocabulary pass); see :func:`full_problem`."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "not a fast (tokenizers) tokenizer"
    if getattr(tokenizer, "split_special_tokens", False) or backend.encode_special_tokens:
        return "special tokens are split"
    norm = _state(backend.normalizer)
    if norm is not None and norm != {"type": "NFC"}:
        return f"normalizer {norm.get('type')}"
    if _pattern(_state(backend.pre_tokenizer)) is None:
        return "pre-tokenizer is not Split(regex) + ByteLevel"
    post = _state(backend.post_processor)
    plain = post is None or post.get("type") == "ByteLevel" or (
        post.get("type") == "TemplateProcessing" and post.get("single") == [{"Sequence": {"id": "A", "type_id": 0}}])
    if not plain:
        return f"post-processor {post.get('type')} adds tokens"
    model = backend.model
    if type(model).__name__ != "BPE" or model.dropout or model.byte_fallback or model.continuing_subword_prefix \
            or model.end_of_word_suffix:
        return "model is not a plain BPE"
    for t in backend.get_added_tokens_decoder().values():
        if t.lstrip or t.rstrip or t.single_word or t.normalized or not t.content:
            return f"added token {t.content!r} has matching options"
    return None


def full_problem(tokenizer) -> str | None:
    """:func:`problem`, then the vocabulary: every token a byte string of the byte-level alphabet,
    all 256 bytes tokens, the i-th merge producing a token whose id grows with i and each longer
    token produced by exactly one merge, and (``ignore_merges`` off) each token its own BPE. About
    1.5 s for a 151k vocabulary; None when tiktoken gives the tokenizer's ids."""
    why = problem(tokenizer)
    if why is not None:
        return why
    backend = tokenizer.backend_tokenizer
    ranks = _byte_ranks(backend)
    if ranks is None or sum(len(b) == 1 for b in ranks) != 256:
        return ("not a byte-level vocabulary (a character outside the alphabet, two tokens of the same bytes "
                "or a byte missing)")
    vocab = backend.get_vocab(with_added_tokens=False)
    merges = json.loads(backend.model.__getstate__())["merges"]
    produced: list[int] = []
    for m in merges:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a + b not in vocab:
            return f"merge {a!r} + {b!r} makes no token"
        produced.append(vocab[a + b])
    if any(x >= y for x, y in zip(produced, produced[1:])):
        return "merge order is not id order"
    if len(produced) != len(vocab) - 256:
        return "a token is made by no merge or by several"
    if not backend.model.ignore_merges:
        for tok, i in vocab.items():
            got = backend.model.tokenize(tok)
            if len(got) != 1 or got[0].id != i:
                return f"token {tok!r} is not its own BPE"
    return None


class TiktokenBPE:
    """The ids ``tokenizer(texts)["input_ids"]`` gives, through tiktoken (see the module doc).

    Build only for a tokenizer :func:`full_problem` passes (:func:`fast_encoder` does). Construction
    reads the vocabulary (~0.2 s for 151k tokens) and builds tiktoken's encoder."""

    #: pieces of at most this many characters are remembered, up to ``MEMO_PIECES`` (then forgotten at once)
    MEMO_CHARS = 64
    MEMO_PIECES = 65536

    def __init__(self, tokenizer):
        import tiktoken

        backend = tokenizer.backend_tokenizer
        pattern = _pattern(_state(backend.pre_tokenizer))
        self._enc = tiktoken.Encoding("vlmpack-bpe", pat_str=pattern, mergeable_ranks=_byte_ranks(backend),
                                      special_tokens={})
        added = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
        self._added = added
        self._split = re.compile("(" + "|".join(re.escape(c) for c in sorted(added, key=len, reverse=True)) + ")") \
            if added else None
        self._normalize = backend.normalizer.normalize_str if backend.normalizer is not None else None
        self._memo: dict[str, list[int]] = {}

    def _piece(self, piece: str) -> list[int]:
        """Ids of the text between two added tokens: normalized (not needed for ASCII, which NFC
        keeps as it is), then tiktoken's ``encode_ordinary``. A lone surrogate raises (``TypeError``
        from the normalizer, else ``UnicodeEncodeError``) as the tokenizer's call does. Short pieces
        (role headers, ``"\\n"``, system prompts) are remembered, at most :attr:`MEMO_PIECES`."""
        ids = self._memo.get(piece)
        if ids is None:
            if piece.isascii():
                text = piece
            elif self._normalize is not None:
                text = self._normalize(piece)  # raises on a lone surrogate, as the tokenizer's call does
            else:
                text = piece
                piece.encode()  # UnicodeEncodeError on a lone surrogate (encode_ordinary would replace it)
            ids = self._enc.encode_ordinary(text)
            if len(piece) <= self.MEMO_CHARS:
                if len(self._memo) >= self.MEMO_PIECES:
                    self._memo.clear()
                self._memo[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids (``list[int]``) of one text, added tokens matched, special tokens not added."""
        pieces = self._split.split(text) if self._split is not None else [text]
        out: list[int] = []
        added = self._added
        for k, piece in enumerate(pieces):
            if k % 2:
                out.append(added[piece])
            elif piece:
                out.extend(self._piece(piece))
        return out

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]``."""
        return [self.encode(t) for t in texts]


def fast_encoder(model_dir: str | Path, tokenizer) -> TiktokenBPE | None:
    """:class:`TiktokenBPE` of ``tokenizer`` (loaded from ``model_dir``) when tiktoken gives its
    ids, else None. The vocabulary check (:func:`full_problem`) runs once per directory and its
    answer is recorded in the load recipe (part ``"bpe"``, :mod:`vlmpack.models.load_recipe`);
    with recipes off it is not run and the tokenizer's own call is used (None), as with
    ``VLMPACK_TIKTOKEN=off`` (:data:`ENV_OFF`: the tokenizer's own call always). One encoder per
    recipe key and process (the key names the directory's files and the library versions)."""
    from vlmpack.models import load_recipe

    path = load_recipe.recipe_path(model_dir)
    if path is None or os.environ.get(ENV_OFF, "on").strip().lower() in OFF or problem(tokenizer) is not None:
        return None
    if path.stem in _ENCODERS:
        return _ENCODERS[path.stem]
    recipe = load_recipe.read(model_dir, "bpe")
    if recipe is None or not isinstance(recipe.get("tiktoken"), bool):
        why = full_problem(tokenizer)
        recipe = {"tiktoken": why is None, "why": why}
        load_recipe.record(model_dir, "bpe", recipe)
    if len(_ENCODERS) >= 8:
        _ENCODERS.clear()
    _ENCODERS[path.stem] = TiktokenBPE(tokenizer) if recipe["tiktoken"] else None
    return _ENCODERS[path.stem]


#: encoders built in this process, by recipe key (the directory's files and the library versions)
_ENCODERS: dict[str, TiktokenBPE | None] = {}
