"""The ``Sink`` protocol: what one output layout module provides (see :mod:`vlmpack.sinks`).

The writer side (``pack_members``, ``pack_key``), the reader side (``read_pack``), what a layout
cannot hold (``sample_problem``, ``model_problem``: checked before counting, so a sample the layout
cannot write is a rejection with a reason, never a pack with a hole) and the Energon files that make
Energon load it (``dataset_files``; ``check_files`` for vlmpack's own Energon pass). Grouping tar
members into packs is not a sink's job: :class:`vlmpack.packfmt.ShardPacks` does it for every layout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from vlmpack.packfmt import PackEntry
from vlmpack.records import Sample

#: ``read_media(reference) -> bytes``: the original bytes of one media item, checked against what was
#: counted (the writer's own reader: the content sha256 and the media-root rule; raises
#: :class:`vlmpack.errors.MediaError` with a reason code).
MediaReader = Callable[[str], bytes]


@runtime_checkable
class Sink(Protocol):
    """One output layout: how a pack becomes tar members and which Energon files the output ships.

    Implementations are stateless, so shards are pure functions of their tasks (byte-reproducible
    whatever the workers)."""

    #: the layout's name: the registry key and the value of ``--layout``
    name: str
    #: the shard name prefix when none is asked for (shards are ``<prefix>-NNNNNN.tar``)
    default_prefix: str
    #: whether ``--pretokenize`` (an ``input_ids.npy`` part per pack) exists in this layout
    pretokenize: bool
    #: whether the count stage stores :meth:`entry_fields` (a third line per sample in its records)
    fields_line: bool
    #: whether the layout's trainer needs packs of one sample kind (text / image / video:
    #: ``--group-by-kind``)
    one_kind_per_pack: bool

    def pack_key(self, global_pack: int, samples: list[PackEntry]) -> str:
        """The tar key of pack number ``global_pack`` (0-based over the output) holding ``samples``:
        no dot, unique."""

    def model_problem(self, model_type: str) -> str | None:
        """Why this layout cannot be written for a model of HF ``model_type`` (one line), or None."""

    def sample_problem(self, sample: Sample) -> tuple[str, str] | None:
        """``(reason code, detail)`` when the layout cannot hold ``sample`` as counted (the count
        stage rejects it), else None."""

    def entry_fields(self, sample: Sample) -> bytes | None:
        """The layout's own fields of a counted ``sample``, serialized once by the count stage (no
        newline; :attr:`vlmpack.packfmt.PackEntry.fields` to the writer), or None for a layout that
        has none (:attr:`fields_line` False)."""

    def pack_members(self, key: str, samples: list[PackEntry], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None, processor: str = "") -> tuple[list[tuple[str, bytes]], int]:
        """The tar members ``[(member name, bytes)]`` of the pack ``key`` (any order: the writer
        sorts them) from its samples as the count stage serialized them
        (:class:`vlmpack.packfmt.PackEntry`: entry bytes, tokens, media references; a layout of
        another form reads the fields with ``PackEntry.sample()``) and the number of tokens it
        holds. ``model_dir`` set: also the pretokenized ids, where the layout has them (the model
        loaded with its ``processor`` options, :func:`vlmpack.models.load_model`). Raises
        what ``read_media`` raises (:class:`vlmpack.errors.MediaError`: a media item that changed
        since it was counted; the writer leaves that sample out)."""

    def read_pack(self, parts: dict[str, bytes | None]) -> tuple[dict, dict[str, bytes | None]]:
        """The reader side: ``(pack object, parts)`` of one pack from its tar parts (part name after
        ``<key>.`` -> bytes, as :class:`vlmpack.packfmt.ShardPacks` groups them; parts not read may
        be None): the ``vlmpack.pack/1`` pack object (docs/format.md) the pack records and its parts
        under the names that object gives them (a part the layout does not map keeps its own name).
        Raises ``KeyError`` / ``ValueError`` / ``TypeError`` for parts that hold no readable pack
        object; parts may be crafted, so a pack object is returned only when every field a reader
        uses has its type and the layout's own fields say what the object says (a crafted one is a
        ``ValueError``, never another error)."""

    def dataset_files(self) -> dict[str, bytes]:
        """The layout's own files of ``.nv-meta/`` (file name -> bytes): Energon's ``dataset.yaml``
        and the ``sample_loader.py`` it names (``.info.json`` and ``split.yaml`` are common)."""

    def check_files(self) -> dict[str, bytes]:
        """The ``.nv-meta`` files (file name -> bytes) of vlmpack's own Energon pass over the
        output (``vlmpack check``): a loader that yields :class:`vlmpack.energon.sample.VlmpackPack`
        fields from this layout's tars, so the check needs no trainer code."""
