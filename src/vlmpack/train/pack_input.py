"""Pack inputs for encoding (:mod:`vlmpack.train.encode`): every accepted form of a pack, or of
unpacked samples, normalised into a :class:`PackInput` of :class:`PackItem` (the accepted forms:
:func:`read_pack` and the module docstring of :mod:`vlmpack.train.encode`, which re-exports these
names). Images are opened here (:func:`vlmpack.media.kinds.image.open_image`); videos and items of
a later kind stay raw bytes, paths or file objects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from vlmpack.errors import ConfigError, PackMismatchError, TokenIdError
from vlmpack.media.kinds import KINDS, PART_RE
from vlmpack.media.kinds.image import open_image
from vlmpack.packfmt import parse_input_ids

__all__ = ["PackInput", "PackItem", "read_pack"]


@dataclass(slots=True)
class PackItem:
    """One sample to encode: ``id``, canonical ``messages``, its images in order of appearance
    (PIL, RGB, EXIF-oriented) and the token count recorded at pack time (None when unknown)."""

    id: str
    messages: list[dict]
    images: list[Image.Image]
    recorded_tokens: int | None = None
    recorded_media: list[tuple[str, int]] | None = None  # (part, num_tokens) per image, in order
    special_tokens: str | None = None  # "split": special tokens in the text are plain text (pack JSON key)
    videos: list = field(default_factory=list)  # (raw video, label for errors) in order of appearance
    kinds: list[str] | None = None  # "image"/"video" per media item in order of appearance (None: images only)
    recorded_videos: list[tuple[str, int]] | None = None  # (part, num_tokens) per video, in order
    tools: list[dict] | None = None  # tool schemas the chat template renders (apply_chat_template's tools=)
    other: list = field(default_factory=list)  # (kind, raw, label) per item of a later kind (audio), in order
    recorded_other: list[tuple[str, str, int | None]] | None = None  # (kind, part, num_tokens) per later-kind item


@dataclass(slots=True)
class PackInput:
    """A pack normalised for encoding: ``key`` (for errors), its items, the recorded ``num_tokens``
    and ``seq_len`` (None when not a vlmpack pack)."""

    key: str
    items: list[PackItem]
    num_tokens: int | None = None
    seq_len: int | None = None
    input_ids: np.ndarray | None = None  # pretokenized pack (``vlmpack pack --pretokenize``), int ``[T]``



def _media_parts_in_order(messages: Sequence[dict]) -> list[dict]:
    return [p for m in messages for p in m["content"] if p.get("type") in KINDS]


# ---------------------------------------------------------------------------------- inputs
def read_pack(obj: Any) -> PackInput:
    """Normalise any accepted input (module docstring) into a :class:`PackInput`."""
    if isinstance(obj, PackInput):
        return obj
    if isinstance(obj, (list, tuple)):
        return PackInput(key="<unpacked>", items=[_item_from_unpacked(s) for s in obj])
    if isinstance(obj, dict):
        d = dict(obj)
        if "samples" not in d and "json" in d:
            meta = d["json"]
            meta = json.loads(meta) if isinstance(meta, (bytes, bytearray, str)) else meta
            # media parts: img<N>.<ext> / vid<N>.<ext>, N counting over both (packfmt.join_pack)
            parts = sorted((k for k in d if PART_RE.match(k)), key=lambda k: int(PART_RE.match(k).group(2)))
            d = {**meta, "__key__": d.get("__key__", "?"), "media": [d[p] for p in parts], "media_parts": parts,
                 "input_ids": d.get("input_ids.npy")}
        key, samples = str(d.get("__key__", d.get("key", "?"))), d["samples"]
        media, parts = d.get("media", []), d.get("media_parts", [])
        pack = _from_pack_fields(key, samples, media, parts, d.get("num_tokens"), d.get("seq_len"))
        pack.input_ids = _as_ids(d.get("input_ids"), key)
        return pack
    if hasattr(obj, "samples") and hasattr(obj, "media_parts"):
        pack = _from_pack_fields(str(getattr(obj, "__key__", "?")), obj.samples, obj.media, obj.media_parts,
                                 obj.num_tokens, obj.seq_len)
        pack.input_ids = _as_ids(getattr(obj, "input_ids", None), pack.key)
        return pack
    raise ConfigError(f"cannot collate an object of type {type(obj).__name__}; give a VlmpackPack, a pack dict "
                      "or a list of samples")


def _as_ids(value: Any, key: str) -> np.ndarray | None:
    """A pretokenized ``input_ids`` part (decoded array, or raw ``.npy`` bytes read by
    :func:`vlmpack.packfmt.parse_input_ids`) as an array; :class:`TokenIdError` naming pack
    ``key`` for bytes that are no 1-D integer ``.npy`` array."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            value = parse_input_ids(bytes(value))
        except ValueError as e:
            raise TokenIdError(f"pack {key!r}: the input_ids part is {e}; the shard is corrupt, re-pack it") from None
    return np.asarray(value)


def _from_pack_fields(key: str, samples: list[dict], media: list, parts: list[str],
                      num_tokens: int | None, seq_len: int | None) -> PackInput:
    by_part = dict(zip(parts, media))
    items = []
    for s in samples:
        imgs, rec, vids, rec_v, other, rec_o = [], [], [], [], [], []
        media_tokens = {m.get("part"): m.get("num_tokens") for m in s.get("media", [])}
        parts_ = _media_parts_in_order(s["messages"])
        for p in parts_:
            name = p.get("part")
            if name not in by_part:
                raise PackMismatchError(f"pack {key!r} sample {s.get('id')!r}: media part {name!r} is missing "
                                        f"(pack has {list(by_part)[:6]}); the shard is incomplete, re-pack it")
            where = f"pack {key!r} sample {s.get('id')!r} part {name}"
            if p["type"] == "video":
                rec_v.append((name, media_tokens.get(name)))
                vids.append((by_part[name], where))
                continue
            if p["type"] != "image":  # a later kind (audio): decoded by kind_media
                rec_o.append((p["type"], name, media_tokens.get(name)))
                other.append((p["type"], by_part[name], where))
                continue
            rec.append((name, media_tokens.get(name)))
            imgs.append(open_image(by_part[name], where=where))
        items.append(PackItem(str(s["id"]), s["messages"], imgs, s.get("num_tokens"), rec, s.get("special_tokens"),
                              vids, [p["type"] for p in parts_], rec_v, s.get("tools"), other, rec_o))
    return PackInput(key, items, None if num_tokens is None else int(num_tokens),
                     None if seq_len is None else int(seq_len))


def _item_from_unpacked(s: Any) -> PackItem:
    if isinstance(s, PackItem):
        return s
    if hasattr(s, "messages") and hasattr(s, "media") and hasattr(s, "locator"):  # records.Sample
        parts_ = _media_parts_in_order(s.messages)
        imgs = [open_image(s.media[p["index"]].path or s.media[p["index"]].ref,
                           where=f"sample {s.id!r} media {p['index']} ({s.media[p['index']].ref})")
                for p in parts_ if p["type"] == "image"]
        vids = [(s.media[p["index"]].path or s.media[p["index"]].ref, f"sample {s.id!r} media {p['index']}")
                for p in parts_ if p["type"] == "video"]
        other = [(p["type"], s.media[p["index"]].path or s.media[p["index"]].ref,
                  f"sample {s.id!r} media {p['index']}") for p in parts_ if p["type"] not in ("image", "video")]
        return PackItem(str(s.id), s.messages, imgs, s.num_tokens or None, videos=vids,
                        kinds=[p["type"] for p in parts_], tools=s.tools, other=other)
    if isinstance(s, dict) and "messages" in s:
        imgs, vids, other, seen = [], [], [], dict.fromkeys(KINDS, 0)
        parts_ = _media_parts_in_order(s["messages"])
        for p in parts_:
            idx = p.get("index", seen[p["type"]])
            seen[p["type"]] += 1
            if p["type"] == "video":
                vids.append((s.get("videos", [])[idx], f"sample {s.get('id')!r} video {idx}"))
            elif p["type"] != "image":  # a later kind: "audios": [...]
                other.append((p["type"], s.get(f"{p['type']}s", [])[idx],
                              f"sample {s.get('id')!r} {p['type']} {idx}"))
            else:
                imgs.append(open_image(s.get("images", [])[idx], where=f"sample {s.get('id')!r} image {idx}"))
        return PackItem(str(s.get("id", "?")), s["messages"], imgs, s.get("num_tokens"), videos=vids,
                        kinds=[p["type"] for p in parts_], tools=s.get("tools"), other=other)
    raise ConfigError(f"cannot read an unpacked sample of type {type(s).__name__}; give records.Sample or "
                      "{'id', 'messages', 'images'}")
