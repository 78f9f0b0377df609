"""The one owner of the on-disk pack format ``vlmpack.pack/1`` (docs/format.md): naming, building, reading.

A shard holds one tar sample per pack: members ``<key>.<part>`` that share the pack's key
(``pack`` + 9 digits, :func:`pack_key`), the pack object in ``<key>.json``, media
``<key>.img<i>.<ext>`` / ``<key>.vid<i>.<ext>`` (original bytes) and, pretokenized,
``<key>.input_ids.npy``.

- Writing, each sample serialized once: the count stage stores a sample's entry of the pack
  object as bytes (:func:`sample_entry`, media named within the sample); the writer reads them back
  as :class:`PackEntry` and :func:`join_pack` joins them into ``<key>.json``, shifting only the
  media part numbers; :func:`tarinfo` is the reproducible member header. :func:`entry_digest` /
  :func:`sample_digest` are a sample's content sha256, from those bytes / from a shard.
- Reading: :class:`ShardPacks` iterates the packs of one shard (members grouped by key, in
  order); :func:`read_packs` gives every pack of an output as a raw WebDataset dict. ``check``,
  ``verify``, ``inspect``, the training-side tests and loaders use these and nothing else groups
  tar members into packs. :func:`group_by_key` is the grouping itself (consecutive members with
  the same key), shared with the WebDataset input source (:mod:`vlmpack.sources.wds`), whose
  samples follow webdataset's own member rules.
- Reading what may be crafted (``check``, ``verify``, ``inspect`` read outputs they did not
  write): :func:`loads_json` (no file deeper than :data:`MAX_JSON_DEPTH`, never a
  ``RecursionError``), :func:`parse_pack` / :func:`pack_object` (a pack object whose every field has its type, or
  ``ValueError``), :func:`parse_input_ids` (the ids of ``input_ids.npy``, header checked before
  any allocation), and :class:`ShardPacks` reads no member over :func:`part_limit` (nor a tar
  header over :data:`MAX_HEADER_BYTES`), so memory stays bounded whatever a shard claims.
"""

from __future__ import annotations

from vlmpack.packfmt.entries import (
    PackEntry,
    compact_json,
    content_key,
    entry_digest,
    join_pack,
    sample_digest,
    sample_entry,
    shift_part,
)
from vlmpack.packfmt.names import (
    EXT_BY_FORMAT,
    EXTRA_PARTS,
    FORMAT,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    MAX_PART_BYTES,
    ROLES,
    TAG_BY_KIND,
    media_part,
    pack_key,
    part_limit,
    split_member,
    tarinfo,
)
from vlmpack.packfmt.shards import (
    MemberTooLarge,
    RawPack,
    ShardPacks,
    group_by_key,
    loads_json,
    pack_object,
    parse_input_ids,
    parse_pack,
    read_packs,
    shard_paths,
)

__all__ = [
    "EXTRA_PARTS", "EXT_BY_FORMAT", "FORMAT", "MAX_HEADER_BYTES", "MAX_JSON_DEPTH", "MAX_PART_BYTES", "ROLES",
    "TAG_BY_KIND", "MemberTooLarge", "PackEntry", "RawPack", "ShardPacks", "compact_json", "entry_digest",
    "group_by_key", "join_pack", "loads_json", "media_part", "pack_key", "pack_object", "parse_input_ids",
    "parse_pack", "part_limit", "read_packs",
    "content_key", "sample_digest", "sample_entry", "shard_paths", "shift_part", "split_member", "tarinfo",
]
