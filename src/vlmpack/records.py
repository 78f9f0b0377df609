"""Canonical in-memory types shared by every stage, and the rejection reason codes.

A record read from any source becomes either a :class:`Sample` (canonical OpenAI-style
messages + a media list + a :class:`Locator`) or a :class:`Rejection` (locator + reason code +
detail). Nothing in between: ``records read = samples packed + rejected + dropped overlong``.

Canonical ``messages`` (the form written into packs, docs/format.md)::

    [{"role": "system" | "user" | "assistant" | "tool",
      "content": [{"type": "text", "text": str} | {"type": "image", "index": int}
                  | {"type": "video", "index": int} | {"type": "audio", "index": int}],
      # only where set: an assistant's reasoning and tool calls, a tool result's call id / name
      "reasoning_content": str, "tool_calls": [{"type": "function", "function": {"name", "arguments"}}],
      "tool_call_id": str, "name": str}, ...]

``index`` points into ``Sample.media`` (0-based, in order of appearance). The writer replaces it
with ``"part": "img<i>.<ext>"`` when it names the media parts of a pack. ``Sample.tools``: the
record's tool schemas, passed to the chat template as ``apply_chat_template(..., tools=tools)``
(:mod:`vlmpack.layouts.tools`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal, get_args

#: The media kinds a record may hold: the names of :data:`vlmpack.media.kinds.KINDS`, in its order
#: (this layer sits below media, so the names are repeated here; ``tests/test_media_kinds.py``
#: checks they agree).
MediaKind = Literal["image", "video", "audio"]
#: A sample's kind (:attr:`Sample.kind`): ``"text"`` then the media kinds; a later one wins when a
#: sample holds several (video over image, audio over both). The position is the kind's code in per-sample arrays.
MEDIA_KINDS: tuple[str, ...] = get_args(MediaKind)
SAMPLE_KINDS: tuple[str, ...] = ("text", *MEDIA_KINDS)

#: The optional keys of a canonical message beside ``role`` and ``content``, in the order written
#: (module docstring): what the chat template reads of tool use and reasoning.
MESSAGE_EXTRAS: tuple[str, ...] = ("reasoning_content", "tool_calls", "tool_call_id", "name")

#: Reason codes of rejected records, with a one-line meaning (the report lists counts per code).
REASONS: dict[str, str] = {
    "invalid_json": "the line is not valid JSON",
    "not_utf8": "the line is not valid UTF-8",
    "not_an_object": "the JSON value is not an object",
    "unknown_schema": "no conversations / messages / prompts+captions key",
    "wrong_type": "a field has the wrong type or is missing",
    "empty_conversation": "the conversation has no turns",
    "unknown_role": "a turn has a role that is not system/user/assistant/tool (or human/gpt/observation/function_call)",
    "bad_turn_order": "the first non-system turn is not a user turn",
    "no_assistant_turn": "the conversation has no assistant turn",
    "empty_turn": "a turn has neither text nor media",
    "placeholder_mismatch": "the number of <image>/<video>/<audio> placeholders differs from the media given",
    "media_outside_root": "a media path resolves outside --media-root",
    "media_missing": "a media file does not exist or is not a regular file",
    "media_undecodable": "a media file's header does not decode (unknown format, truncated, corrupt)",
    "media_unsupported": "a media kind or size the model's processor cannot take (e.g. aspect ratio > 200)",
    "media_changed": "a media file's bytes changed between counting and writing (another sha256); counted again "
                     "at the next run",
    "duplicate_id": "the id was already seen earlier in the input",
    "duplicate_content": "--dedup exact: a sample with the same conversation and media bytes came earlier in the "
                         "input (under another id); that one is packed",
    "overlong": "the sample has more tokens than the sequence length",
    "template_error": "the chat template or tokenizer failed on this sample",
    "template_unsupported": "the model's chat template does not render a field the sample holds (tools, tool_calls, "
                            "reasoning_content, tool turns): packed, it would be lost",
    "layout_unsupported": "the output layout (--layout) cannot hold the sample as it was counted (a system prompt, "
                          "tool fields, video or turn order its trainer does not read)",
    "special_token_in_text": "the text contains a model special token (e.g. <|image_pad|>) that would break counting",
    "duplicate_member": "a WebDataset sample holds two members of the same name (e.g. a.json twice); none is guessed",
    "member_too_large": "a WebDataset sample's json member is larger than --max-member-bytes (not read)",
    "media_too_large": "a media item is larger than --max-media-bytes (not read)",
    "member_not_file": "a WebDataset sample's member is a hard link to no regular member of the shard",
    "two_conversations": "the record holds two conversation keys (e.g. messages and conversations); none is guessed",
}

#: Default of ``--max-member-bytes``: the largest member of a container read as a record's text
#: (a WebDataset ``json`` part); a larger one is a ``member_too_large`` rejection, never read.
MAX_MEMBER_BYTES = 1 << 30
#: Default and ceiling of ``--max-media-bytes``: the largest media item (file, tar member, table
#: cell, LMDB value) probed and packed; a larger one is a ``media_too_large`` rejection, never read.
#: It is also the most ``vlmpack check`` reads of one media member of an output
#: (:data:`vlmpack.packfmt.MAX_MEDIA_BYTES`), so whatever is packed can be checked.
MAX_MEDIA_BYTES = 2 << 30


@dataclass(frozen=True, slots=True)
class Locator:
    """Where a record came from: ``file`` (as given), the 1-based record number ``line`` counted
    in ``unit`` (``"line"``: a JSONL line; ``"sample"``: the sample's position in a tar shard;
    ``"row"``: the row of a Parquet/Arrow table), ``offset`` (JSONL: bytes to the line's first
    byte in the *decompressed* stream; tar: bytes to the sample's first member header; a row: its
    row group / record batch index) and ``key`` (the sample key of a tar shard's members, None
    otherwise). Media inside a container (an LMDB value, a tar member, a cell) are named by their
    :mod:`vlmpack.media.ref` reference."""

    file: str
    line: int
    offset: int
    key: str | None = None
    unit: str = "line"

    def __str__(self) -> str:
        where = f"{display_path(self.file)}:{self.line}"
        return where if self.key is None else f"{where} ({self.key})"

    def to_dict(self) -> dict:
        """``{"file", "line", "offset"}`` for a JSONL line, ``{"file", "sample", "offset", "key"}``
        for a tar shard's sample, ``{"file", "row", "row_group"}`` for a table row; a file name
        that is not valid UTF-8 is shown with ``\\xNN`` escapes (:func:`display_path`), so the dict
        always encodes as UTF-8 JSON."""
        d = {"file": display_path(self.file), self.unit: self.line,
             "row_group" if self.unit == "row" else "offset": self.offset}
        if self.key is not None:
            d["key"] = self.key
        return d


def display_path(path: str) -> str:
    """``path`` as printable UTF-8 text: bytes a file name holds that are not UTF-8 (surrogate
    escapes in a Python ``str``) become ``\\xNN``; other strings are returned unchanged."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        try:
            return os.fsencode(path).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate that no file name bytes give
            return path.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(slots=True)
class Media:
    """One media item of a sample.

    ``ref`` is the path as written in the record, ``path`` the resolved absolute path. The
    header fields are filled by validation: ``width``/``height`` in pixels *after* EXIF
    orientation (the size the model processor sees), ``format`` as PIL names it (``PNG``...),
    ``nbytes`` the file size. ``num_tokens`` is filled by measuring.
    """

    kind: MediaKind
    ref: str
    path: str = ""
    width: int = 0
    height: int = 0
    format: str = ""
    nbytes: int = 0
    num_tokens: int = 0
    duration_s: float | None = None
    fps: float | None = None
    frames: int | None = None


#: Kinds of sample ids: the record's own string id, its own integer id, or the implicit
#: ``<file>:<line>`` id of a record without one. Ids are compared as ``(kind, id)``, so the integer
#: id 7 and the string id ``"7"``, or an implicit ``a.jsonl:3`` and an explicit ``"a.jsonl:3"``,
#: never collide by accident (``id_kind`` column of the manifest, key of each packed sample).
ID_KINDS = ("str", "int", "line")


@dataclass(slots=True)
class Sample:
    """A valid record in canonical form. ``id`` is the record's own id (as ``str``) or a stable
    ``<file>:<line>`` when it has none; ``id_kind`` one of :data:`ID_KINDS`; ``num_tokens`` and
    ``label_tokens`` (how many of them carry a label) are filled by measuring; ``tools``: the tool
    schemas the chat template renders (module docstring), None without."""

    id: str
    messages: list[dict]
    media: list[Media]
    locator: Locator
    has_own_id: bool = True
    num_tokens: int = 0
    id_kind: str = "str"
    label_tokens: int = 0  # tokens trained on (the family's label mask), filled by measuring
    tools: list[dict] | None = None  # the record's tool schemas (apply_chat_template's tools=), or None

    def __post_init__(self) -> None:
        if not self.has_own_id:
            self.id_kind = "line"

    @property
    def kind(self) -> str:
        """``"text"``, ``"image"``, ``"video"`` or ``"audio"`` (a later kind wins when several occur:
        video over image, audio over both): the last of :data:`SAMPLE_KINDS` among the sample's
        media, ``"text"`` without any."""
        kinds = {m.kind for m in self.media}
        return next((k for k in reversed(SAMPLE_KINDS) if k in kinds), "text")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that cannot be packed: its locator, its id if one could be read, a reason code of
    :data:`REASONS` and a one-line human detail."""

    locator: Locator
    reason: str
    detail: str
    id: str | None = None

    def to_dict(self) -> dict:
        return {**self.locator.to_dict(), "id": self.id, "reason": self.reason, "detail": self.detail}


@dataclass(slots=True)
class ReadStats:
    """Per-input counters that the report sums: ``lines`` physical lines, ``blank`` empty lines
    (not records), ``records`` = lines - blank; tar shards: ``members_without_key`` (files whose
    name has no ``<key>.<part>`` form, e.g. ``README``) and ``members_not_files`` (symbolic links,
    devices, FIFOs), skipped, so part of no record (directories are not counted)."""

    lines: int = 0
    blank: int = 0
    records: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    members_without_key: int = 0
    members_not_files: int = 0
