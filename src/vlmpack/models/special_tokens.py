"""User text that holds a tokenizer's special tokens: find it, or tokenize it as plain text.

A chat template marks turns with special tokens (``<|im_start|>``, ``<|im_end|>``, ...). If a
user's *text* contains one, the tokenizer turns it into the control token, so the text can fake
a turn (an assistant turn the collator then trains on) or end one early (an answer holding
``<|im_end|>`` loses the rest of its labels). vlmpack offers two policies
(``vlmpack pack --special-tokens``):

- ``reject`` (default): a sample whose text holds any *special* token of the tokenizer (an added
  token with ``special=True``: ``<|endoftext|>``, ``<|im_start|>``, ``<|vision_end|>``, ...) is
  rejected, whether one text part holds it (:func:`find_special_token`) or it only forms in the
  rendered text of a turn, where the chat template joins the turn's parts (``"hello<|im_"`` +
  ``"end|>"``; :func:`find_joined_special_token`, under the template's own join rule, only for
  conversations :func:`cut_turns` flags). Non-special added tokens (Qwen's ``<tool_call>``,
  ``<think>``, ...) are content tokens that templates themselves put inside assistant text; they
  stay as the tokenizer parses them.
- ``split``: the user text is tokenized with transformers' ``split_special_tokens=True`` rule
  (special tokens in it become ordinary byte-level pieces), while the special tokens the chat
  template itself writes stay control tokens (:func:`render_pieces` + :func:`tokenize_pieces`).
  Text parts the template writes next to each other land in the same text piece, so a special
  token cut across parts is plain text too.

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
from typing import NamedTuple

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
    return None if pattern is None else scan_text_parts(messages, pattern, None)[0]


class TokenCuts(NamedTuple):
    """The pieces a special token can be cut into at a part boundary (see :func:`cut_turns`):
    its proper non-empty ``prefixes``, ``suffixes`` and ``infixes`` (neither first nor last
    character), over all tokens; ``longest`` is the longest token's length, ``firsts`` /
    ``lasts`` the tokens' first / last characters (a prefix holds one of ``firsts``, a suffix one
    of ``lasts``: most texts need no set lookup)."""

    prefixes: frozenset[str]
    suffixes: frozenset[str]
    infixes: frozenset[str]
    longest: int
    firsts: frozenset[str]
    lasts: frozenset[str]


def token_cuts(tokens: Sequence[str]) -> TokenCuts:
    """:class:`TokenCuts` of ``tokens`` (the family's special tokens); built once per family."""
    return TokenCuts(frozenset(t[:i] for t in tokens for i in range(1, len(t))),
                     frozenset(t[i:] for t in tokens for i in range(1, len(t))),
                     frozenset(t[i:j] for t in tokens for i in range(1, len(t)) for j in range(i + 1, len(t))),
                     max((len(t) for t in tokens), default=0),
                     frozenset(t[0] for t in tokens if t), frozenset(t[-1] for t in tokens if t))


def cut_turns(messages: Sequence[dict], cuts: TokenCuts) -> list[int]:
    """Indices of the turns of canonical ``messages`` with a text part that could hold one piece
    of a special token cut at a part boundary: the part ends with a proper prefix of a token,
    starts with a proper suffix, or is an infix. A special token the rendered text holds that
    no single part holds must overlap some part that way (it starts before the part's end and
    ends after its start without lying inside it), so a conversation without such a part needs
    no rendering: ordinary text costs one set lookup per edge character here."""
    out = []
    for i, m in enumerate(messages):
        for p in m["content"]:
            text = p.get("text")
            if isinstance(text, str) and text and has_cut_edge(text, cuts):
                out.append(i)
                break
    return out


def has_cut_edge(text: str, cuts: TokenCuts) -> bool:
    """True when ``text`` ends with a proper prefix of a special token, starts with a proper
    suffix, or is an infix (:class:`TokenCuts`): a piece that could join neighbouring text into one.
    Most texts hold none of the tokens' first characters in their last ``longest - 1`` characters
    (nor of their last characters in their first): one substring search each."""
    n = min(len(text), cuts.longest - 1)
    tail = text[len(text) - n:]
    for c in cuts.firsts:
        if c in tail:
            if any(tail[-k:] in cuts.prefixes for k in range(1, n + 1)):
                return True
            break
    head = text[:n]
    for c in cuts.lasts:
        if c in head:
            if any(head[:k] in cuts.suffixes for k in range(1, n + 1)):
                return True
            break
    return len(text) < cuts.longest - 1 and text in cuts.infixes


def scan_text_parts(messages: Sequence[dict], pattern: re.Pattern, cuts: TokenCuts | None
                    ) -> tuple[tuple[int, str] | None, bool]:
    """:func:`find_special_token` and whether :func:`cut_turns` finds any turn, in one pass over the
    text parts of canonical ``messages``: ``(first hit or None, a part has a cut edge)`` (the second
    only looked for up to the first hit, and not at all with ``cuts`` None: False)."""
    cut, done = False, cuts is None
    for i, m in enumerate(messages):
        for p in m["content"]:
            text = p.get("text")
            if isinstance(text, str):
                hit = pattern.search(text)
                if hit:
                    return (i, hit.group()), cut
                if not done and text and has_cut_edge(text, cuts):
                    cut = done = True
    return None, cut


def find_joined_special_token(render: Callable[[list[dict]], str], messages: Sequence[dict],
                              pattern: re.Pattern | None, cuts: TokenCuts) -> tuple[int, str] | None:
    """``(turn index, token)`` of the first special token that the chat template's rendering of
    ``messages`` holds and the template did not write itself, or None: a token cut across text
    parts (``"hello<|im_"`` + ``"end|>"``) that only forms when the template joins them.

    The join rule is the template's own, not a restatement of it: the template is rendered with
    each text part replaced by a sentinel (as :func:`render_pieces` does), so its own special
    tokens and where every part lands are known; the texts are put back and every match of
    ``pattern`` (leftmost, longest first: the tokenizer's added-token rule) that is not one of the
    template's own tokens at the same place is foreign. The templates of the supported families
    join the text parts of a turn with nothing between them: Qwen2-VL / Qwen2.5-VL and InternVL
    write ``{{ content['text'] }}`` per text part, in content order, media parts between them
    writing their own special tokens; Qwen3-VL writes ``{{- content.text }}`` per part and drops
    media parts of system and assistant turns, so those turns' texts meet across them;
    LLaVA-OneVision writes all images and videos of a turn first and then every text part, so
    all its texts meet (``chat_template.json`` of each model directory,
    ``tools/demo_data/model_files/``). A template that alters the text it is given (the put-back
    rendering differs from ``render(messages)``) is checked by comparing the special tokens of
    ``render(messages)`` with the template's own, in order; the turn is then the first of
    :func:`cut_turns`. Only called for conversations :func:`cut_turns` flags; raises what the
    template raises."""
    if pattern is None:
        return None
    texts: list[tuple[str, int]] = []
    masked = []
    for i, m in enumerate(messages):
        content = []
        for p in m["content"]:
            if p.get("type") == "text":
                content.append({**p, "text": f"{_OPEN}{len(texts)}{_CLOSE}"})
                texts.append((p["text"], i))
            else:
                content.append(p)
        masked.append({**m, "content": content})
    template = render(masked)
    out: list[str] = []
    own: list[tuple[int, int, str]] = []  # the template's own tokens: (start, end, token) in the put-back text
    spans: list[tuple[int, int, int]] = []  # (start, end, turn) of each text part in the put-back text
    size = pos = 0
    for hit in [*_SENTINEL.finditer(template), None]:
        seg = template[pos:hit.start() if hit else len(template)]
        own.extend((size + h.start(), size + h.end(), h.group()) for h in pattern.finditer(seg))
        out.append(seg)
        size += len(seg)
        if hit is None:
            break
        text, turn = texts[int(hit.group(1))]
        spans.append((size, size + len(text), turn))
        out.append(text)
        size += len(text)
        pos = hit.end()
    put_back = "".join(out)
    real = render(list(messages))
    if put_back != real:
        got = [h.group() for h in pattern.finditer(real)]
        mine = [t for _, _, t in own]
        if got == mine:
            return None
        k = next((k for k, (a, b) in enumerate(zip(got, mine)) if a != b), min(len(got), len(mine)))
        turns = cut_turns(messages, cuts)
        return (turns[0] if turns else 0), (got[k] if k < len(got) else mine[k])
    allowed = {(a, b) for a, b, _ in own}
    for h in pattern.finditer(put_back):
        if (h.start(), h.end()) not in allowed:
            turn = next((t for a, b, t in spans if a < h.end() and h.start() < b), 0)
            return turn, h.group()
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
