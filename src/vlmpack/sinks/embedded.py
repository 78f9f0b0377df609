"""Output layouts of other trainers' packed sample classes, one shape for all of them: the trainer's
own json fields beside the ``vlmpack`` pack object, media under the trainer's member names.

A sink of this shape (:class:`EmbeddedSink`) writes one tar sample per pack: ``<key>.json`` holding
the trainer's fields (:meth:`EmbeddedSink.fields`) followed by ``"vlmpack"``, the pack object of
docs/format.md as :func:`vlmpack.packfmt.join_pack` writes it (their loaders read their own keys
and ignore it), and each media item's original bytes under :meth:`EmbeddedSink.member`. ``vlmpack
check`` / ``verify`` / ``inspect`` read the pack object (:meth:`EmbeddedSink.read_pack`), which
refuses a json whose trainer fields say anything else, so what check passes is what the trainer
reads. The conversation rules of the trainers' ``qwen2-vl`` template are
:mod:`vlmpack.sinks.qwen2_vl_turns`.
"""

from __future__ import annotations

from vlmpack.energon.meta import DATASET_YAML
from vlmpack.packfmt import PackEntry, compact_json, join_pack, loads_json, media_part, pack_object
from vlmpack.records import Sample
from vlmpack.sinks.base import MediaReader
from vlmpack.sinks.qwen2_vl_turns import conversation_problem, model_problem

#: The loader of vlmpack's own Energon pass over such an output (``vlmpack check``): the ``vlmpack``
#: pack object and the media parts under its names, as :class:`vlmpack.energon.sample.VlmpackPack`
#: fields. ``@MEMBER@``: the layout's member name of item ``j`` (part ``part``) of sample ``i``.
CHECK_LOADER_TEMPLATE = '''"""vlmpack check loader (used by vlmpack check only): VlmpackPack fields."""
import json


def _json(value):
    if isinstance(value, (bytes, bytearray, str)):
        return json.loads(value)
    return value


def _member(i, j, part):
    return @MEMBER@


def sample_loader(raw: dict) -> dict:
    meta = _json(raw["json"])["vlmpack"]
    names = [(m["part"], _member(i, j, m["part"])) for i, s in enumerate(meta["samples"])
             for j, m in enumerate(s["media"])]
    present = [(p, n) for p, n in names if n in raw]
    return dict(seq_len=meta["seq_len"], num_tokens=meta["num_tokens"], samples=meta["samples"],
                media=[raw[n] for _, n in present], media_parts=[p for p, _ in present], input_ids=None)


def part_filter(part: str) -> bool:
    return True
'''


class EmbeddedSink:
    """The common part of the trainers' layouts (a :class:`vlmpack.sinks.base.Sink` once a subclass
    gives ``name``, ``sample_class``, :meth:`pack_key`, :meth:`fields`, :meth:`member`,
    :data:`member_expr` and :meth:`dataset_files`)."""

    name = ""
    default_prefix = "pretrain"
    pretokenize = False
    videos = False  # whether the layout holds video samples
    one_kind_per_pack = False
    fields_line = True
    sample_class = ""
    #: :meth:`member` as a Python expression of ``i``, ``j``, ``part`` (for :data:`CHECK_LOADER_TEMPLATE`)
    member_expr = ""

    @staticmethod
    def member(i: int, j: int, part: str) -> str:
        """The part name of media item ``j`` (the object's part ``part``) of sample ``i`` of a pack."""
        raise NotImplementedError

    @staticmethod
    def sample_values(messages: list[dict], exts: list[str], sid: str) -> list:
        """The per-sample values the trainer's fields are made of (JSON values), from a sample's
        canonical messages, its media's file extensions and its id: the one definition both
        :meth:`entry_fields` (count time) and :meth:`fields` (read time) use."""
        raise NotImplementedError

    def fields(self, samples: list[dict]) -> dict:
        """The trainer's json fields of a pack from its samples (entries of the pack object): the
        object form of what :meth:`join_fields` writes."""
        raise NotImplementedError

    def join_fields(self, samples: list[PackEntry]) -> bytes:
        """The trainer's json fields of a pack as compact JSON bytes (an object), joined from the
        samples' :attr:`~vlmpack.packfmt.PackEntry.fields` lines without parsing them."""
        raise NotImplementedError

    def entry_fields(self, sample: Sample) -> bytes | None:
        """:meth:`sample_values` of the sample, each compact JSON, joined by tabs (compact JSON holds
        none: a control character in a string is escaped), so :meth:`join_fields` splits them unparsed."""
        exts = [media_part(m.kind, m.format, i).rsplit(".", 1)[-1] for i, m in enumerate(sample.media)]
        return b"\t".join(compact_json(v) for v in self.sample_values(sample.messages, exts, str(sample.id)))

    def object_values(self, s: dict) -> list:
        """:meth:`sample_values` of a sample of a pack object as read."""
        return self.sample_values(s["messages"], [m["part"].rsplit(".", 1)[-1] for m in s["media"]], str(s["id"]))

    @staticmethod
    def model_problem(model_type: str) -> str | None:
        """:func:`vlmpack.sinks.qwen2_vl_turns.model_problem`."""
        return model_problem(model_type)

    def sample_problem(self, sample: Sample) -> tuple[str, str] | None:
        """:func:`vlmpack.sinks.qwen2_vl_turns.conversation_problem` of the sample."""
        return conversation_problem(sample.messages, sample.tools, videos=self.videos)

    def pack_members(self, key: str, samples: list[PackEntry], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None, processor: str = ""  # noqa: ARG002
                     ) -> tuple[list[tuple[str, bytes]], int]:
        """``<key>.json`` (the trainer's fields, then ``"vlmpack"``: the pack object as
        :func:`vlmpack.packfmt.join_pack` writes it) and each media item's original bytes under
        :meth:`member`."""
        tokens = sum(s.num_tokens for s in samples)
        pack_json = join_pack([s.entry for s in samples], [len(s.media) for s in samples], tokens, seq_len)
        entries = [(f"{key}.json", self.join_fields(samples)[:-1] + b',"vlmpack":' + pack_json + b"}")]
        for i, s in enumerate(samples):
            entries += [(f"{key}.{self.member(i, j, part)}", read_media(ref))
                        for j, (_sha, part, ref) in enumerate(s.media)]
        return entries, tokens

    def read_pack(self, parts: dict[str, bytes | None]) -> tuple[dict, dict[str, bytes | None]]:
        """The ``vlmpack`` pack object of ``<key>.json`` (:func:`vlmpack.packfmt.pack_object`), checked
        to say what the trainer's fields say (``ValueError`` otherwise), and the parts under its
        names (:meth:`member` -> the object's part of that media item)."""
        payload = loads_json(parts["json"])
        if not isinstance(payload, dict) or not isinstance(payload.get("vlmpack"), dict):
            raise ValueError("the json holds no vlmpack pack object")
        obj = pack_object(payload["vlmpack"])
        want = self.fields(obj["samples"])
        if set(payload) - {"vlmpack"} != set(want) or any(payload[k] != v for k, v in want.items()):
            raise ValueError(f"its {self.sample_class} fields differ from its pack object")
        out = {k: v for k, v in parts.items() if k != "json"}
        for i, s in enumerate(obj["samples"]):
            for j, m in enumerate(s["media"]):
                name = self.member(i, j, m["part"])
                if name in out:
                    out[m["part"]] = out.pop(name)
        out["json"] = parts["json"]
        return obj, out

    def check_files(self) -> dict[str, bytes]:
        """``VlmpackPack`` fields from the ``vlmpack`` object (:data:`CHECK_LOADER_TEMPLATE`)."""
        return {"dataset.yaml": DATASET_YAML.encode(),  # the vlmpack layout's: sample type VlmpackPack
                "sample_loader.py": CHECK_LOADER_TEMPLATE.replace("@MEMBER@", self.member_expr).encode()}
