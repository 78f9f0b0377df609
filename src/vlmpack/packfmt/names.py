"""Names and limits of the ``vlmpack.pack/1`` format: the format string, pack keys, member names
and headers, media part names, the most bytes read of a member."""

from __future__ import annotations

import tarfile

from vlmpack.media.kinds import KINDS
from vlmpack.records import MAX_MEDIA_BYTES

#: The format string in every pack object.
FORMAT = "vlmpack.pack/1"
#: Member extension of an image by the format PIL decodes it as (never re-encoded).
EXT_BY_FORMAT = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff",
                 "MPO": "jpg"}
#: Member tag of a media part by kind (``img0.png``, ``vid1.mp4``): the registry's
#: (:data:`vlmpack.media.kinds.KINDS`).
TAG_BY_KIND = {name: kind.tag for name, kind in KINDS.items()}
#: Parts of a pack that no sample references.
EXTRA_PARTS = frozenset({"json", "input_ids.npy"})
#: The most bytes read of one member, by part (a pack's JSON holds at most ``seq_len`` tokens of text;
#: ``input_ids.npy`` 4 bytes a token); media: :data:`MAX_MEDIA_BYTES`. A larger member is not read.
MAX_PART_BYTES = {"json": 64 << 20, "input_ids.npy": 64 << 20}
# The most bytes read of one media member (an image or a video; the training side reads it whole
# too) is MAX_MEDIA_BYTES (imported from vlmpack.records): the ceiling of `vlmpack pack --max-media-bytes`.
#: The most bytes of a tar's extended header (PAX, GNU long name); vlmpack writes < 1 KiB.
MAX_HEADER_BYTES = 1 << 20
#: The deepest nesting of arrays and objects :func:`loads_json` accepts (a pack object nests 6 deep).
MAX_JSON_DEPTH = 64
#: The roles of a pack's messages (docs/format.md).
ROLES = ("system", "user", "assistant", "tool")


def pack_key(global_pack: int) -> str:
    """The tar key of a pack: ``pack`` + 9 digits (no dots, unique in the dataset)."""
    return f"pack{global_pack:09d}"


def split_member(name: str) -> tuple[str, str]:
    """``(key, part)`` of a pack member name ``<key>.<part>`` (the key has no dot; the part may)."""
    key, _, part = name.partition(".")
    return key, part


def tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """The header of one member (``size`` bytes): regular file, mtime 0, uid/gid 0, empty
    user/group names, mode 0644, so that shards are byte-reproducible."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def media_part(kind: str, fmt: str, i: int) -> str:
    """The part name of media item ``i`` of a ``kind`` decoded as PIL/PyAV format ``fmt``:
    ``<tag><i>.<ext>`` (:data:`TAG_BY_KIND`, :data:`EXT_BY_FORMAT`; an unknown format keeps its
    own name in lower case, ``bin`` without one)."""
    return f"{TAG_BY_KIND.get(kind, 'vid')}{i}.{EXT_BY_FORMAT.get(fmt, fmt.lower() or 'bin')}"

def part_limit(part: str) -> int:
    """The most bytes vlmpack reads of a member whose part (name after ``<key>.``) is ``part``:
    :data:`MAX_PART_BYTES`, :data:`MAX_MEDIA_BYTES` for media and any other part."""
    return MAX_PART_BYTES.get(part, MAX_MEDIA_BYTES)
