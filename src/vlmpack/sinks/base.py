"""The ``Sink`` protocol: what one output layout module provides (see :mod:`vlmpack.sinks`).

The writer side (``pack_members``) and the reader side (``read_pack``) of one layout, and the
Energon files that make Energon load it (``dataset_files``). Grouping tar members into packs is
not a sink's job: :class:`vlmpack.packfmt.ShardPacks` does it for every layout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from vlmpack.packfmt import PackEntry

#: ``read_media(reference) -> bytes``: the original bytes of one media item, checked against what was
#: counted (the writer's own reader: the content sha256 and the media-root rule; raises
#: :class:`vlmpack.errors.MediaError` with a reason code).
MediaReader = Callable[[str], bytes]


@runtime_checkable
class Sink(Protocol):
    """One output layout: how a pack becomes tar members and which Energon files the output ships.

    Implementations are stateless, so shards are pure functions of their tasks (byte-reproducible
    whatever the workers)."""

    #: the layout's name: the registry key (and, later, the value of ``--layout``)
    name: str

    def pack_members(self, key: str, samples: list[PackEntry], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None) -> tuple[list[tuple[str, bytes]], int]:
        """The tar members ``[(member name, bytes)]`` of the pack ``key`` (any order: the writer
        sorts them) from its samples as the count stage serialized them
        (:class:`vlmpack.packfmt.PackEntry`: entry bytes, tokens, media references; a layout of
        another form reads the fields with ``PackEntry.sample()``) and the number of tokens it
        holds. ``model_dir`` set: also the pretokenized ids, where the layout has them. Raises
        what ``read_media`` raises (:class:`vlmpack.errors.MediaError`: a media item that changed
        since it was counted; the writer leaves that sample out)."""

    def read_pack(self, parts: dict[str, bytes | None]) -> dict:
        """The reader side: the pack object of one pack from its tar parts (part name after
        ``<key>.`` -> bytes, as :class:`vlmpack.packfmt.ShardPacks` groups them; parts not read
        may be None). Raises ``KeyError`` / ``ValueError`` / ``TypeError`` for parts that hold no
        readable pack object; parts may be crafted, so a pack object is returned only when every
        field a reader uses has its type (a crafted one is a ``ValueError``, never another error)."""

    def dataset_files(self) -> dict[str, bytes]:
        """The layout's own files of ``.nv-meta/`` (file name -> bytes): Energon's ``dataset.yaml``
        and the ``sample_loader.py`` it names (``.info.json`` and ``split.yaml`` are common)."""
