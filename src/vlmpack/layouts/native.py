"""The WDS-native packer's schema, rewritten into the ``messages`` layout before detection.

Megatron-Energon ``sample_loader`` datasets of the WDS-native packer write ``texts`` turns of
``role`` / ``content``, ``media`` or ``media_type`` = ``"text"`` or a media kind of the registry
(``"image"`` / ``"video"`` / ``"audio"``) and
the media names in ``name`` or ``media_files``. :func:`normalize_native` turns such a record (or
any record whose turns sit under ``--text-key``) into a ``messages`` record; when its text holds
no placeholder, its media go before the first user turn's text (the :data:`LEADING` marker).

Not a registry entry: :func:`vlmpack.layouts.to_canonical` applies it to every record, whatever
``--schema`` says, and the WebDataset source (:mod:`vlmpack.sources.wds`) applies it before it
maps media names to the sample's parts.
"""

from __future__ import annotations

from vlmpack.errors import RecordError
from vlmpack.layouts.base import short
from vlmpack.records import SAMPLE_KINDS

NATIVE_KINDS = SAMPLE_KINDS  # "text" + the media kinds
#: set by :func:`normalize_native` (and kept through a JSON round trip): the record names its
#: media apart from the text; popped by :func:`vlmpack.layouts.to_canonical`
LEADING = "__vlmpack_leading_media__"


def normalize_native(obj: dict, text_key: str | None = None) -> dict:
    """Rewrite a record of the WDS-native packer's schema (or one whose turns sit under
    ``text_key``) into the ``messages`` schema, in place; other records are returned unchanged.

    - turns: ``obj[text_key]`` (``--text-key``), else ``obj["texts"]`` when the record has no
      ``conversations``/``messages`` key, become ``obj["messages"]``;
    - ``media`` / ``media_type`` (a string ``text`` or a media kind: ``image``/``video``/``audio``)
      with the names in ``name`` / ``media_files`` (a list or one string) become ``images``,
      ``videos`` or ``audios`` (the other kinds' lists empty); without names the source supplies
      them (a WebDataset sample's parts by extension).
    Idempotent. Raises :class:`RecordError`: ``unknown_schema`` (``text_key`` given but absent),
    ``wrong_type`` (turns under two keys, an unknown media kind, names for a ``text`` sample),
    ``media_unsupported`` (``speech`` / ``sound``: say ``audio``).
    """
    key = text_key if text_key else ("texts" if "texts" in obj and "conversations" not in obj
                                     and "messages" not in obj else None)
    if key is not None and key != "messages":
        if key not in obj:
            if "messages" not in obj or text_key is None:
                raise RecordError("unknown_schema", f"no {key!r} key holding the turns (--text-key {key})")
        elif "messages" in obj:
            raise RecordError("wrong_type", f"both {key!r} and 'messages' hold turns; keep one")
        else:
            obj["messages"] = obj.pop(key)
    kind = obj.get("media", obj.get("media_type"))
    if not isinstance(kind, str):
        return obj
    obj.pop("media", None)
    obj.pop("media_type", None)
    if kind in ("speech", "sound"):
        raise RecordError("media_unsupported", f"media {kind!r}: not a media kind; audio files go under media 'audio'")
    if kind not in NATIVE_KINDS:
        raise RecordError("wrong_type", f"'media' must be one of {', '.join(NATIVE_KINDS)}, got {short(kind)}")
    names = obj.pop("name") if "name" in obj else obj.pop("media_files", None)
    if isinstance(names, str):
        names = [names]
    if kind == "text":
        if names:
            raise RecordError("wrong_type", f"media 'text' but {len(names)} media name(s) given")
        for other in NATIVE_KINDS[1:]:
            obj[other + "s"] = []
    else:
        if names is not None:
            obj[kind + "s"] = names
        for other in NATIVE_KINDS[1:]:
            if other != kind:
                obj.setdefault(other + "s", [])
    obj[LEADING] = True
    return obj
