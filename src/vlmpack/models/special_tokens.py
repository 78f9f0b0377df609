"""User text that holds a tokenizer's special tokens: find it, or tokenize it as plain text.

A chat template marks turns with special tokens (``<|im_start|>``, ``<|im_end|>``, ...). If a
user's *text* contains one, the tokenizer turns it into the control token, so the text can fake
a turn (an assistant turn the collator then trains on) or end one early (an answer holding
``<|im_end|>`` loses the rest of its labels). vlmpack offers two policies
(``vlmpack pack --special-tokens``):

- ``reject`` (default): a sample whose text holds any *special* token of the tokenizer (an added
  token with ``special=True``: ``<|endoftext|>``, ``<|im_start|>``, ``<|vision_end|>``, ...) is
  rejected (:func:`find_special_token`). Non-special added tokens (Qwen's ``<tool_call>``,
  ``<think>``, ...) are content tokens that templates themselves put inside assistant text; they
  stay as the tokenizer parses them.
- ``split``: the user text is tokenized with transformers' ``split_special_tokens=True`` rule
  (special tokens in it become ordinary byte-level pieces), while the special tokens the chat
  template itself writes stay control tokens (:func:`render_pieces` + :func:`tokenize_pieces`).

How ``split`` stays exact: the Rust tokenizer first cuts the text at added tokens and then
pre-tokenizes and BPE-encodes each piece on its own. :func:`render_pieces` renders the template
with each text part replaced by a private-use sentinel, so every special token left in that
rendering is the template's own; it cuts there and puts the texts back. Tokenizing each piece
with ``split_special_tokens=True`` and putting the template's token ids between them is then what
the tokenizer would do if only the template's specials were special; for texts without special
tokens it equals the ordinary ``tokenizer(rendered)`` ids token for token (tested on the demo set).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from vlmpack.errors import TemplateSplitError

_OPEN, _CLOSE = "\ue000", "\ue001"  # Unicode private-use characters: the text sentinels
_SENTINEL = re.compile(_OPEN + r"(\d+)" + _CLOSE)


def special_token_strings(tokenizer) -> tuple[str, ...]:
    """The contents of the tokenizer's special added tokens (``special=True``), longest first.

    Source: ``tokenizer.added_tokens_decoder`` (transformers' fast tokenizers)."""
    found = {t.content for t in tokenizer.added_tokens_decoder.values() if getattr(t, "special", False) and t.content}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def special_token_pattern(tokens: Sequence[str]) -> re.Pattern | None:
    """A regex that matches any of ``tokens`` (longest first); None when there are none."""
    return re.compile("|".join(re.escape(t) for t in tokens)) if tokens else None


def find_special_token(messages: Sequence[dict], pattern: re.Pattern | None) -> tuple[int, str] | None:
    """``(turn index, token)`` of the first special token found in a text part of canonical
    ``messages`` (see :mod:`vlmpack.records`), or None."""
    if pattern is None:
        return None
    for i, m in enumerate(messages):
        for p in m["content"]:
            text = p.get("text")
            if isinstance(text, str):
                hit = pattern.search(text)
                if hit:
                    return i, hit.group()
    return None


def render_pieces(render: Callable[[list[dict]], str], messages: Sequence[dict], pattern: re.Pattern | None,
                  token_to_id: Callable[[str], int]) -> list[str | int]:
    """The rendered conversation cut into text pieces (``str``) and the template's own special
    tokens (``int`` ids), in order; adjacent texts are merged, so a piece never starts or ends
    inside what the tokenizer would see as one run of ordinary text.

    ``render``: canonical messages -> rendered text (the chat template). Raises
    :class:`TemplateSplitError` when the template alters a text (the pieces would not join back
    into ``render(messages)``) or a text holds the sentinel characters U+E000/U+E001.
    """
    texts: list[str] = []
    masked = []
    for m in messages:
        content = []
        for p in m["content"]:
            if p.get("type") == "text":
                if _OPEN in p["text"] or _CLOSE in p["text"]:
                    raise TemplateSplitError("text holds the private-use characters U+E000/U+E001")
                content.append({**p, "text": f"{_OPEN}{len(texts)}{_CLOSE}"})
                texts.append(p["text"])
            else:
                content.append(p)
        masked.append({**m, "content": content})
    template = render(masked)
    pieces: list[str | int] = []
    joined: list[str] = []

    def add_text(s: str) -> None:
        if s:
            if pieces and isinstance(pieces[-1], str):
                pieces[-1] += s
            else:
                pieces.append(s)
            joined.append(s)

    pos = 0
    for hit in _SENTINEL.finditer(template):
        _cut_specials(template[pos:hit.start()], pattern, token_to_id, add_text, pieces, joined)
        add_text(texts[int(hit.group(1))])
        pos = hit.end()
    _cut_specials(template[pos:], pattern, token_to_id, add_text, pieces, joined)
    if "".join(joined) != render(list(messages)):
        raise TemplateSplitError("the chat template changes the text it is given")
    return pieces


def _cut_specials(s: str, pattern, token_to_id, add_text, pieces: list, joined: list) -> None:
    pos = 0
    if pattern is not None:
        for hit in pattern.finditer(s):
            add_text(s[pos:hit.start()])
            pieces.append(int(token_to_id(hit.group())))
            joined.append(hit.group())
            pos = hit.end()
    add_text(s[pos:])


def tokenize_pieces(tokenizer, samples: Sequence[Sequence[str | int]]) -> list[list[int]]:
    """Token ids of each sample's :func:`render_pieces` output: text pieces tokenized in one batch
    with ``split_special_tokens=True, add_special_tokens=False``, template ids kept as they are.
    Returns one ``list[int]`` per sample."""
    texts = [p for pieces in samples for p in pieces if isinstance(p, str)]
    encoded = iter(tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]) if texts \
        else iter(())
    out = []
    for pieces in samples:
        ids: list[int] = []
        for p in pieces:
            if isinstance(p, str):
                ids.extend(next(encoded))
            else:
                ids.append(p)
        out.append(ids)
    return out
