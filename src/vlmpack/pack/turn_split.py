"""``--overlong split``: a conversation longer than ``L`` becomes pieces cut at turn boundaries.

A conversation is its leading system turn(s) (and tool schemas), then *rounds*: a user turn and every
turn up to the next user turn (the assistant's answer, tool calls and results). A round without an
assistant turn joins the next round (it is context, no answer to train on). Rounds are taken in
order into a piece while the piece, rendered and counted exactly as any sample (``measure``: the
count stage's :func:`vlmpack.pack.count_task.count_samples`), fits ``L``; the next round starts a new
piece. Each piece is a valid conversation: the system turns repeated, only the media of its own
turns (renumbered), ending on an assistant turn; its id is ``<id>#<k>`` (k = 1, 2, ...). A round
that alone (with the system turns) exceeds ``L`` is dropped: a rejection ``overlong`` with id
``<id>#turns<a>-<b>`` and its count; so is a trailing round without an assistant turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vlmpack.records import Rejection, Sample

Measure = Callable[[list[Sample]], tuple[list[Sample], list[Rejection]]]


#: The figures of :class:`SplitStats`, in samples and tokens.
FIGURES = ("records", "pieces", "turns_dropped", "tokens_kept", "tokens_dropped", "entries_added")


class SplitStats:
    """What splitting did (``figures``, keys :data:`FIGURES`): ``records`` split, ``pieces`` made
    (kept), ``turns_dropped`` (rounds rejected), ``tokens_kept`` (of the pieces) and
    ``tokens_dropped`` (of the dropped rounds as counted alone, the system turns included), and
    ``entries_added``: pieces plus dropped rounds minus records, what the identity ``records read +
    entries_added = packed + rejected + dropped overlong`` adds."""

    def __init__(self) -> None:
        self.figures = dict.fromkeys(FIGURES, 0)

    def add(self, **counts: int) -> None:
        """Add ``counts`` (figure name -> amount)."""
        for k, v in counts.items():
            self.figures[k] += v

    def as_dict(self) -> dict:
        """A copy of the figures ({} when nothing was split)."""
        return dict(self.figures) if self.figures["records"] else {}


def rounds(messages: list[dict]) -> tuple[list[dict], list[list[dict]], list[int]]:
    """(leading system turns, rounds, index of each round's first turn in ``messages``); a round
    without an assistant turn is merged into the next one."""
    head = 0
    while head < len(messages) and messages[head]["role"] == "system":
        head += 1
    out: list[list[dict]] = []
    starts: list[int] = []
    for i in range(head, len(messages)):
        if messages[i]["role"] == "user" or not out:
            if out and not any(m["role"] == "assistant" for m in out[-1]):
                out[-1].append(messages[i])  # the previous round has no answer yet: context of this one
                continue
            out.append([messages[i]])
            starts.append(i)
        else:
            out[-1].append(messages[i])
    return messages[:head], out, starts


def _piece(s: Sample, system: list[dict], chosen: list[list[dict]], k: int) -> Sample:
    """A piece of ``s``: its system turns and the rounds ``chosen``, media renumbered in order."""
    turns = system + [m for r in chosen for m in r]
    remap: dict[int, int] = {}
    msgs = []
    for m in turns:
        content = []
        for p in m["content"]:
            if "index" in p:
                p = {**p, "index": remap.setdefault(p["index"], len(remap))}
            content.append(p)
        msgs.append({**m, "content": content})
    media = [replace(s.media[i]) for i in sorted(remap, key=remap.get)]
    kind = "str" if s.id_kind == "int" else s.id_kind
    return replace(s, id=f"{s.id}#{k}", id_kind=kind, messages=msgs, media=media, num_tokens=0, label_tokens=0)


def split_at_turns(s: Sample, limit: int, measure: Measure, stats: SplitStats) -> tuple[list[Sample], list[Rejection]]:
    """The pieces of ``s`` (counted, each ``<= limit`` tokens) and the rejections of what could not
    be kept (module docstring); ``stats`` is updated."""
    system, rs, starts = rounds(s.messages)
    pieces: list[Sample] = []
    rejected: list[Rejection] = []
    current: list[list[dict]] = []  # the rounds of the piece being filled, counted as current_piece
    current_piece: Sample | None = None

    def drop(j: int, why: str, n: int) -> None:  # n: the round's tokens counted alone (0: not countable)
        end = starts[j + 1] if j + 1 < len(starts) else len(s.messages)
        stats.add(turns_dropped=1, tokens_dropped=n)
        rejected.append(Rejection(s.locator, "overlong", f"turns {starts[j] + 1}-{end} of a conversation split by "
                                  f"--overlong split: {why}", f"{s.id}#turns{starts[j] + 1}-{end}"))

    for j, r in enumerate(rs):
        if not any(m["role"] == "assistant" for m in r):
            alone, _ = measure([_piece(s, system, [r], 0)])
            drop(j, "no assistant turn to end a piece on", alone[0].num_tokens if alone else 0)
            continue
        ok, bad = measure([_piece(s, system, current + [r], len(pieces) + 1)])
        if ok and ok[0].num_tokens <= limit:
            current, current_piece = current + [r], ok[0]
            continue
        if current:  # the piece so far is closed; the round starts the next one if it fits alone
            pieces.append(current_piece)
            current, current_piece = [], None
            ok, bad = measure([_piece(s, system, [r], len(pieces) + 1)])
            if ok and ok[0].num_tokens <= limit:
                current, current_piece = [r], ok[0]
                continue
        if ok:
            drop(j, f"{ok[0].num_tokens:,} tokens alone > --seq-len {limit:,}", ok[0].num_tokens)
        else:
            drop(j, bad[0].detail if bad else "cannot be counted alone", 0)
    if current:
        pieces.append(current_piece)
    stats.add(records=1, pieces=len(pieces), tokens_kept=sum(p.num_tokens for p in pieces),
              entries_added=len(pieces) + len(rejected) - 1)
    return pieces, rejected


def split_overlong(counted: list[Sample], rejected: list[Rejection], limit: int, measure: Measure,
                   stats: SplitStats) -> tuple[list[Sample], list[Rejection]]:
    """``counted`` (in order) with each sample over ``limit`` tokens replaced by its pieces
    (:func:`split_at_turns`), and ``rejected`` plus what could not be kept."""
    kept: list[Sample] = []
    rejected = list(rejected)
    for s in counted:
        if s.num_tokens <= limit:
            kept.append(s)
            continue
        pieces, dropped = split_at_turns(s, limit, measure, stats)
        kept += pieces
        rejected += dropped
    return kept, rejected
