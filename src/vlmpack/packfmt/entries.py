"""Writing packs, each sample serialized once: a counted sample's entry of the pack object as bytes
(:func:`sample_entry`), read back by the writer as :class:`PackEntry`, joined into ``<key>.json`` by
:func:`join_pack`; a sample's content sha256 (:func:`entry_digest`, :func:`sample_digest`)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import orjson

from vlmpack.packfmt.names import FORMAT, media_part
from vlmpack.records import MESSAGE_EXTRAS, Sample


def sample_entry(sample: Sample, special_tokens: str = "reject") -> tuple[bytes, list[str]]:
    """A counted sample serialized once, as its entry in a pack object: compact UTF-8 JSON (keys
    ``id``, ``id_kind``, ``num_tokens`` (tokens), ``source`` (its locator), ``messages`` (a media
    content part ``{"type", "index"}`` becomes ``{"type", "part"}``; a turn's tool calls, reasoning
    and tool-call id / name after its content), ``tools`` (only when the sample has tool schemas),
    ``media`` (``part``, ``kind``,
    ``width``/``height`` in pixels, ``num_tokens``), then ``"special_tokens": "split"`` when the
    collator must tokenize its text that way), with its media named within the sample (item i is
    :func:`media_part` ``i``); and those part names. :func:`join_pack` puts these bytes into a pack
    as they are, only the part numbers shifted, so the shard holds what the count stage wrote.

    The bytes are :func:`compact_json`'s; the content parts of canonical messages (:mod:`vlmpack.records`:
    ``{"type", "text"}`` of strings, media parts of a kind and an index) are taken as holding no
    float, every other value is looked at (:func:`float_free`)."""
    names = [media_part(m.kind, m.format, i) for i, m in enumerate(sample.media)]
    messages, free = [], []
    for msg in sample.messages:
        out = {"role": msg["role"], "content": [{"type": p["type"], "part": names[p["index"]]} if "index" in p else p
                                                 for p in msg["content"]]}
        if len(msg) > 2:
            for k in MESSAGE_EXTRAS:
                if k in msg:
                    out[k] = msg[k]
                    free.append(msg[k])
        free.append(msg["role"])
        messages.append(out)
    obj = {"id": sample.id, "id_kind": sample.id_kind, "num_tokens": sample.num_tokens,
           "source": sample.locator.to_dict(), "messages": messages,
           **({"tools": sample.tools} if sample.tools else {}),
           "media": [{"part": n, "kind": m.kind, "width": m.width, "height": m.height, "num_tokens": m.num_tokens}
                     for n, m in zip(names, sample.media)]}
    if special_tokens == "split":
        obj["special_tokens"] = "split"
    free += [v for k, v in obj.items() if k != "messages"]
    return compact_json(obj, free=free), names


def compact_json(obj, *, free: list | None = None) -> bytes:
    """Compact UTF-8 JSON, the form of every ``<key>.json``: the bytes of
    ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` encoded with ``surrogatepass`` (a
    lone surrogate a crafted object may hold is kept as its bytes, never an error).

    Written by ``orjson.dumps`` (~4x faster on the demo set's sample entries) where that gives the
    same bytes: for JSON of exact types without a float (:func:`float_free`; orjson writes
    ``1.5e-7`` where ``json`` writes ``1.5e-07``), and not where orjson refuses the object (an
    integer beyond 64 bits, a lone surrogate, nesting over 254 levels, a key that is not a
    string): there, and for any other object, ``json.dumps`` writes it (and raises what it raises).
    ``free``: the values of ``obj`` that may hold anything (the rest the caller built of strings,
    ints, lists and dicts: :func:`sample_entry`); None: all of ``obj`` is looked at."""
    if float_free(obj if free is None else free):
        try:
            return orjson.dumps(obj)
        except TypeError:  # orjson.JSONEncodeError: beyond what it writes
            pass
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def float_free(value) -> bool:
    """True when ``value`` is JSON data of exact types ``str``, ``int``, ``bool``, None, ``list`` and
    ``dict`` with string keys, without a float: what ``orjson.dumps`` writes byte for byte as
    ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` does (every code point of a string
    escaped alike: checked over all of Unicode in ``tests/test_packfmt.py``). Iterative."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            continue
        if t is dict:
            for k in v:
                if type(k) is not str:
                    return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
        else:
            return False
    return True


@dataclass(frozen=True, slots=True)
class PackEntry:
    """One counted sample as the writer reads it back (:func:`vlmpack.pack.count_task.read_entry`):
    ``entry`` its :func:`sample_entry` bytes, ``num_tokens`` (tokens, as planned), ``media`` one
    ``(sha256 hex of the bytes counted, part name within the sample, reference)`` per item,
    ``fields`` the output layout's own per-sample fields as the count stage serialized them
    (``b""`` for a layout without any: :meth:`vlmpack.sinks.base.Sink.entry_fields`)."""

    entry: bytes
    num_tokens: int
    media: tuple[tuple[str, str, str], ...]
    fields: bytes = b""

    def sample(self) -> dict:
        """The entry as an object (media named within the sample), for what needs its fields: an
        output layout of another form, ``--pretokenize``, a rejection at write time."""
        return json.loads(self.entry)


#: A media part name where the serialized JSON has it as a key's value: ``{"part":"img3`` or
#: ``,"part":"img3``. Inside a JSON string every ``"`` follows a backslash, so a text can never
#: hold this pattern: only the ``part`` of a content item or a media item matches.
_PART_VALUE = re.compile(rb'([{,]"part":"[A-Za-z_]+)([0-9]+)')


def shift_part(name: str, base: int) -> str:
    """Part ``name`` (``img1.png``) numbered ``base`` further (``img4.png`` for base 3)."""
    return _NUMBERED.sub(lambda g: f"{g.group(1)}{int(g.group(2)) + base}", name, count=1)


def join_pack(entries: list[bytes], media_counts: list[int], num_tokens: int, seq_len: int) -> bytes:
    """The ``<key>.json`` of a pack from its samples' :func:`sample_entry` bytes in pack order
    (``media_counts[i]`` media items each): the pack object ``{"format", "seq_len", "num_tokens",
    "samples"}`` (``num_tokens``, ``seq_len`` in tokens), media numbered over the pack in sample
    order (a sample's ``img0`` becomes ``img<media before it>``), as byte-equal to
    ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` of that object; nothing is parsed
    or serialized again."""
    head = compact_json({"format": FORMAT, "seq_len": seq_len, "num_tokens": num_tokens})[:-1] + b',"samples":['
    out, base = [], 0
    for entry, n in zip(entries, media_counts, strict=True):
        out.append(_PART_VALUE.sub(lambda g, base=base: g.group(1) + str(int(g.group(2)) + base).encode(), entry)
                   if base else entry)
        base += n
    return head + b",".join(out) + b"]}"


#: The domain tag that starts what :func:`entry_digest` hashes (a new rule gets a new tag).
SAMPLE_DIGEST = b"vlmpack.sample-sha256/2"
_NUMBERED = re.compile(r"^([A-Za-z_]+)([0-9]+)")


def entry_digest(entry: bytes, media_sha256: list[str]) -> str:
    """The content sha256 (hex) of one sample: :data:`SAMPLE_DIGEST`, its :func:`sample_entry`
    bytes (media named within the sample), then ``media_sha256``, the sha256 (hex) of each media
    item's bytes in the sample's media order. A changed character of any text or field, or another
    media byte, gives another digest; the same sample gives the same digest whichever pack holds it.
    The writer records it per sample in the run directory (from the bytes the count stage wrote);
    ``check`` computes it again from the shard with :func:`sample_digest` (docs/format.md, "Run record")."""
    h = hashlib.sha256(SAMPLE_DIGEST + b"\0")
    h.update(entry)
    h.update(b"\0" + "".join(f"{x}\n" for x in media_sha256).encode("ascii", "replace"))
    return h.hexdigest()


def sample_digest(sample: dict, media_sha256: list[str]) -> str:
    """:func:`entry_digest` of a sample of a pack object as read (:func:`parse_pack`): each media
    ``part`` name renumbered within the sample (its i-th item ``img<i>.<ext>``: the numbering over
    the pack is the pack's), serialized as :func:`sample_entry` serializes (compact UTF-8 JSON, keys
    in the order read), so a sample read back from its shard gives the digest the writer recorded
    for it, and any edit (a character, a field, the order of keys) another one."""
    return entry_digest(compact_json(_renumbered(sample)), media_sha256)


def _renumbered(sample: dict) -> dict:
    """``sample`` (a pack object's entry) with each media ``part`` numbered within the sample."""
    names = {}
    for i, m in enumerate(sample["media"]):
        names[m["part"]] = _NUMBERED.sub(lambda g, i=i: f"{g.group(1)}{i}", m["part"], count=1)
    return {**sample,
            "media": [{**m, "part": names[m["part"]]} for m in sample["media"]],
            "messages": [{**msg, "content": [{**c, "part": names.get(c["part"], c["part"])} if "part" in c else c
                                             for c in msg["content"]]} for msg in sample["messages"]]}


#: The keys of a sample's entry that name it rather than hold its content (:func:`content_key`).
NOT_CONTENT = ("id", "id_kind", "source")


def content_key(sample: dict, media_sha256: list[str]) -> bytes:
    """16 bytes, ``--dedup exact``'s key of a sample's content: BLAKE2b of its entry (a pack object's,
    or the count stage's: the same once its media parts are numbered within the sample) without
    :data:`NOT_CONTENT`, as canonical JSON (sorted keys), and the sha256 (hex) of each media item's
    bytes in order; two samples with the same key hold the same conversation and media bytes."""
    body = {k: v for k, v in _renumbered(sample).items() if k not in NOT_CONTENT}
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8",
                                                                                                 "surrogatepass"))
    h.update(b"\0" + "\n".join(media_sha256).encode())
    return h.digest()
