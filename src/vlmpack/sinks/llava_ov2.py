"""The LLaVA-OneVision-2 output layouts: ``llava-ov2-captioning`` (its ``PackedCaptioningSample``).

What LLaVA-OneVision-2's offline packing writes (``offline_packing/s4_bins_to_webdataset.py``,
``build_direct_sample``; ``.nv-meta`` of ``s5_convert_to_webdataset.py``, ``write_energon_config``)
and its trainer reads (``aiak_training_llm/data/multimodal/flavors/packed_captioning.py``, turned
into one conversation per sample by ``task_encoder.py`` when ``OFFLINE_PACKING_BMR=1``):

- one tar sample per pack, key ``ps_<pack:08d>``; shards ``<prefix>-NNNNNN.tar``, prefix ``pretrain``;
- ``<key>.img<i>_<j>.jpg``: the original bytes of image ``j`` of sample ``i`` (whatever the format:
  their writer copies the file under that name, their trainer's decoder opens it by its content);
- ``<key>.json``: ``images`` (per sample, the names ``img<iii>_sub<jjj>.jpg``), ``prompts`` and
  ``captions`` (per sample, the user / assistant turn texts, each image a ``<image>`` placeholder where
  it stood), ``sample_count``, ``patch_positions`` (per image ``""``: no precomputed positions) and
  ``timestamp_decimal`` (1 per sample), plus ``vlmpack``: the pack object of docs/format.md that
  ``vlmpack check`` / ``verify`` read (their loader ignores the key; :meth:`read_pack` requires the
  trainer's fields to say what it says).

The trainer renders each sample with its ``qwen2-vl`` chat template (``aiak_training_llm/data/
chat_templete.py``: default system ``You are a helpful assistant.``, ChatML turns, ``<image>``
expanded by its ``Qwen2VLPlugin``), which is the Qwen2-VL / Qwen2.5-VL chat template without the
final newline: vlmpack's count is the trainer's plus one per sample, so no pack it reads exceeds L.
What that rendering cannot hold is rejected ``layout_unsupported`` (:func:`conversation_problem`).
"""

from __future__ import annotations

import json
import re

from vlmpack.packfmt import PackEntry, join_pack, loads_json, parse_pack, shift_part
from vlmpack.records import Sample
from vlmpack.sinks.base import MediaReader

#: The trainer's ``qwen2-vl`` template's default system prompt (``chat_templete.py``), also the
#: Qwen2-VL / Qwen2.5-VL chat templates' when a conversation has none.
DEFAULT_SYSTEM = "You are a helpful assistant."
#: The placeholders the trainer's multimodal plugin expands wherever they occur in a turn.
PLACEHOLDERS = ("<image>", "<video>")
#: Model types whose chat template renders as the trainer's ``qwen2-vl`` template does.
MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
#: Text the trainer tokenizes apart from the ``assistant`` header before it: a leading newline
#: (after optional blanks) would merge with the header's newline in one rendering and not the other.
_LEADING_NEWLINE = re.compile(r"^\s*[\r\n]")


def turn_text(msg: dict) -> str:
    """A turn's content as the trainer's prompt / caption text: text items as they are, each media
    item its placeholder (``<image>``, ``<video>``) where it stands."""
    return "".join(c["text"] if c.get("type") == "text" else f"<{c.get('type')}>" for c in msg["content"])


def conversation_problem(messages: list[dict], tools, *, videos: bool) -> tuple[str, str] | None:
    """Why a conversation cannot be written as the trainer's user / assistant turns, rendered by its
    ``qwen2-vl`` template exactly as counted: ``("layout_unsupported", detail)`` or None.

    Accepted: an optional first system turn equal to :data:`DEFAULT_SYSTEM` (what the trainer
    renders anyway), then user, assistant, user, ... ending with an assistant turn, no tool schemas,
    tool calls or reasoning, no text holding a placeholder (the trainer would expand it), no
    assistant text starting with a newline, no video unless ``videos``."""
    def bad(detail: str) -> tuple[str, str]:
        return "layout_unsupported", detail

    if tools:
        return bad("tool schemas: the trainer's template renders none")
    msgs = list(messages)
    if msgs and msgs[0]["role"] == "system":
        if turn_text(msgs[0]) != DEFAULT_SYSTEM or any(c.get("type") != "text" for c in msgs[0]["content"]):
            return bad(f"a system prompt other than {DEFAULT_SYSTEM!r}: the trainer renders its default one")
        msgs = msgs[1:]
    if not msgs or len(msgs) % 2:
        return bad("not user / assistant turn pairs")
    for i, m in enumerate(msgs):
        want = "user" if i % 2 == 0 else "assistant"
        if m["role"] != want:
            return bad(f"turn {i + 1} is {m['role']}, the trainer reads alternating user / assistant turns")
        if set(m) - {"role", "content"}:
            return bad(f"turn {i + 1} holds {', '.join(sorted(set(m) - {'role', 'content'}))}: the trainer's "
                       "template renders only text and media")
        for c in m["content"]:
            if c.get("type") == "text" and any(p in c["text"] for p in PLACEHOLDERS):
                return bad(f"turn {i + 1}'s text holds a literal {'/'.join(PLACEHOLDERS)}, which the trainer "
                           "would expand as media")
            if c.get("type") == "video" and not videos:
                return bad("a video: this layout holds images only")
        if want == "assistant" and _LEADING_NEWLINE.match(turn_text(m)):
            return bad(f"turn {i + 1} starts with a newline, which the trainer tokenizes apart from the "
                       "turn header (the count would not bound its)")
    return None


def turns(messages: list[dict]) -> tuple[list[str], list[str]]:
    """``(prompts, captions)``: the user and the assistant turn texts (:func:`turn_text`) of an
    accepted conversation (a default system turn dropped)."""
    msgs = [m for m in messages if m["role"] != "system"]
    return [turn_text(m) for m in msgs[0::2]], [turn_text(m) for m in msgs[1::2]]


def member(i: int, j: int) -> str:
    """The part name of media item ``j`` of sample ``i`` of a pack: ``img<i>_<j>.jpg``."""
    return f"img{i}_{j}.jpg"


def captioning_fields(samples: list[dict]) -> dict:
    """The ``PackedCaptioningSample`` fields of a pack's json from its samples (entries of the pack
    object), in the key order of their writer."""
    prompts, captions = zip(*(turns(s["messages"]) for s in samples), strict=True) if samples else ((), ())
    return {"images": [[f"img{i:03d}_sub{j:03d}.jpg" for j in range(len(s["media"]))] for i, s in enumerate(samples)],
            "prompts": list(prompts), "captions": list(captions), "sample_count": len(samples),
            "patch_positions": [[""] * len(s["media"]) for s in samples], "timestamp_decimal": [1] * len(samples)}


def _dumps(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


SAMPLE_LOADER_SOURCE = '''"""LLaVA-OneVision-2 PackedCaptioningSample loader (written by vlmpack).

The loader of LLaVA-OneVision-2's offline_packing/s5_convert_to_webdataset.py, restated: the parts
of one packed sample -> PackedCaptioningSample fields. .npy parts are read without pickle.
"""
import io
import json


def _json(value):
    if isinstance(value, (bytes, bytearray, str)):  # the decoder is off
        return json.loads(value)
    return value


def _load_npy(data):
    if data is None:
        return None
    import numpy as np
    if isinstance(data, (bytes, bytearray)):
        return np.load(io.BytesIO(data), allow_pickle=False)
    return np.asarray(data)


def sample_loader(sample: dict) -> dict:
    data = _json(sample["json"])
    images = [[sample[f"img{i}_{j}.jpg"] for j in range(len(names))] for i, names in enumerate(data["images"])]
    result = dict(__key__=sample["__key__"], __restore_key__=sample["__restore_key__"], images=images,
                  prompts=data["prompts"], captions=data["captions"])
    if "patch_positions" in data:
        result["patch_positions"] = [[_load_npy(sample.get(f"img{i}_{j}.npy")) for j in range(len(names))]
                                     for i, names in enumerate(data["patch_positions"])]
    for key in ("fps", "timestamp_decimal"):
        if key in data:
            result[key] = data[key]
    return result


def part_filter(part: str) -> bool:
    return True
'''

#: The loader of vlmpack's own Energon pass (``vlmpack check``): the ``vlmpack`` pack object of the
#: json and the media parts under its names, as :class:`vlmpack.energon.sample.VlmpackPack` fields.
CHECK_LOADER_SOURCE = '''"""vlmpack check loader for the LLaVA-OneVision-2 layouts (used by vlmpack check only)."""
import json


def _json(value):
    if isinstance(value, (bytes, bytearray, str)):
        return json.loads(value)
    return value


def sample_loader(raw: dict) -> dict:
    meta = _json(raw["json"])["vlmpack"]
    names = [(m["part"], f"img{i}_{j}.jpg") for i, s in enumerate(meta["samples"]) for j, m in enumerate(s["media"])]
    present = [(p, n) for p, n in names if n in raw]
    return dict(seq_len=meta["seq_len"], num_tokens=meta["num_tokens"], samples=meta["samples"],
                media=[raw[n] for _, n in present], media_parts=[p for p, _ in present], input_ids=None)


def part_filter(part: str) -> bool:
    return part == "json" or part.startswith("img")
'''


def _dataset_yaml(module: str, cls: str) -> bytes:
    return (f"sample_type:\n  __module__: {module}\n  __class__: {cls}\n"
            "part_filter: sample_loader.py:part_filter\nsample_loader: sample_loader.py:sample_loader\n").encode()


class LlavaOv2CaptioningSink:
    """``llava-ov2-captioning``: LLaVA-OneVision-2's ``PackedCaptioningSample`` (module docstring;
    a :class:`vlmpack.sinks.base.Sink`)."""

    name = "llava-ov2-captioning"
    default_prefix = "pretrain"
    pretokenize = False
    sample_class = "PackedCaptioningSample"
    videos = False

    @staticmethod
    def pack_key(global_pack: int) -> str:
        """``ps_`` + 8 digits (their ``build_direct_sample``; 9 or more past 10^8 packs)."""
        return f"ps_{global_pack:08d}"

    @staticmethod
    def model_problem(model_type: str) -> str | None:
        """One line unless ``model_type`` is one of :data:`MODEL_TYPES`."""
        if model_type in MODEL_TYPES:
            return None
        return (f"the trainer renders with its qwen2-vl template (default system prompt), which the chat template "
                f"of model type {model_type!r} does not match; use a {' / '.join(MODEL_TYPES)} model directory")

    def sample_problem(self, sample: Sample) -> tuple[str, str] | None:
        """:func:`conversation_problem` of the sample."""
        return conversation_problem(sample.messages, sample.tools, videos=self.videos)

    def fields(self, samples: list[dict]) -> dict:
        """The trainer's json fields of a pack from its samples (:func:`captioning_fields`)."""
        return captioning_fields(samples)

    def pack_members(self, key: str, samples: list[PackEntry], seq_len: int, read_media: MediaReader, *,
                     model_dir: str | None = None) -> tuple[list[tuple[str, bytes]], int]:  # noqa: ARG002
        """``<key>.json`` (the trainer's fields, then ``"vlmpack"``: the pack object as
        :func:`vlmpack.packfmt.join_pack` writes it) and ``<key>.img<i>_<j>.jpg`` (original bytes)."""
        tokens = sum(s.num_tokens for s in samples)
        pack_json = join_pack([s.entry for s in samples], [len(s.media) for s in samples], tokens, seq_len)
        fields = self.fields([s.sample() for s in samples])
        entries = [(f"{key}.json", _dumps(fields)[:-1] + b',"vlmpack":' + pack_json + b"}")]
        for i, s in enumerate(samples):
            entries += [(f"{key}.{member(i, j)}", read_media(ref)) for j, (_sha, _part, ref) in enumerate(s.media)]
        return entries, tokens

    def read_pack(self, parts: dict[str, bytes | None]) -> tuple[dict, dict[str, bytes | None]]:
        """The ``vlmpack`` pack object of ``<key>.json`` (:func:`vlmpack.packfmt.parse_pack`), checked
        to say what the trainer's fields say (``ValueError`` otherwise), and the parts under its
        names (``img<i>_<j>.jpg`` -> the object's part of that media item)."""
        payload = loads_json(parts["json"])
        if not isinstance(payload, dict) or not isinstance(payload.get("vlmpack"), dict):
            raise ValueError("the json holds no vlmpack pack object")
        obj = parse_pack(_dumps(payload["vlmpack"]))
        want = self.fields(obj["samples"])
        if set(payload) - {"vlmpack"} != set(want) or any(payload[k] != v for k, v in want.items()):
            raise ValueError(f"its {self.sample_class} fields differ from its pack object")
        out = {k: v for k, v in parts.items() if k != "json"}
        for i, s in enumerate(obj["samples"]):
            for j, m in enumerate(s["media"]):
                if member(i, j) in out:
                    out[m["part"]] = out.pop(member(i, j))
        out["json"] = parts["json"]
        return obj, out

    def dataset_files(self) -> dict[str, bytes]:
        """``dataset.yaml`` (sample type ``aiak_training_llm.data.multimodal.<class>``, as their
        ``write_energon_config`` writes it) and the restated ``sample_loader.py``."""
        return {"dataset.yaml": _dataset_yaml("aiak_training_llm.data.multimodal", self.sample_class),
                "sample_loader.py": SAMPLE_LOADER_SOURCE.encode()}

    @staticmethod
    def check_files() -> dict[str, bytes]:
        """``VlmpackPack`` fields from the ``vlmpack`` object (:data:`CHECK_LOADER_SOURCE`)."""
        return {"dataset.yaml": _dataset_yaml("vlmpack.energon.sample", "VlmpackPack"),
                "sample_loader.py": CHECK_LOADER_SOURCE.encode()}


__all__ = ["DEFAULT_SYSTEM", "LlavaOv2CaptioningSink", "captioning_fields", "conversation_problem", "shift_part"]
