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
What that rendering cannot hold is rejected ``layout_unsupported``
(:func:`vlmpack.sinks.qwen2_vl_turns.conversation_problem`).
"""

from __future__ import annotations

from vlmpack.packfmt import PackEntry, compact_json
from vlmpack.sinks.embedded import EmbeddedSink
from vlmpack.sinks.qwen2_vl_turns import turns


def _head(n_media: list[int]) -> dict:
    return {"images": [[f"img{i:03d}_sub{j:03d}.jpg" for j in range(n)] for i, n in enumerate(n_media)]}


def _tail(n_media: list[int]) -> dict:
    return {"sample_count": len(n_media), "patch_positions": [[""] * n for n in n_media],
            "timestamp_decimal": [1] * len(n_media)}


#: ``.nv-meta/dataset.yaml`` as their ``write_energon_config`` writes it (``yaml.dump``, ``sort_keys=False``).
DATASET_YAML = """sample_type:
  __module__: aiak_training_llm.data.multimodal
  __class__: PackedCaptioningSample
part_filter: sample_loader.py:part_filter
sample_loader: sample_loader.py:sample_loader
"""

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


class LlavaOv2CaptioningSink(EmbeddedSink):
    """``llava-ov2-captioning``: LLaVA-OneVision-2's ``PackedCaptioningSample`` (module docstring;
    a :class:`vlmpack.sinks.base.Sink` of the :class:`~vlmpack.sinks.embedded.EmbeddedSink` shape)."""

    name = "llava-ov2-captioning"
    sample_class = "PackedCaptioningSample"
    member_expr = 'f"img{i}_{j}.jpg"'

    @staticmethod
    def pack_key(global_pack: int, samples: list[PackEntry]) -> str:  # noqa: ARG004
        """``ps_`` + 8 digits (their ``build_direct_sample``; 9 or more past 10^8 packs)."""
        return f"ps_{global_pack:08d}"

    @staticmethod
    def member(i: int, j: int, part: str) -> str:  # noqa: ARG004 - every image is named .jpg
        """``img<i>_<j>.jpg`` whatever the image's format (their writer's name; their decoder opens
        it by its content)."""
        return f"img{i}_{j}.jpg"

    @staticmethod
    def sample_values(messages: list[dict], exts: list[str], sid: str) -> list:  # noqa: ARG004
        """``[prompts, captions]``: the user and the assistant turn texts
        (:func:`vlmpack.sinks.qwen2_vl_turns.turns`)."""
        return list(turns(messages))

    def fields(self, samples: list[dict]) -> dict:
        """``images`` (per sample, the names ``img<iii>_sub<jjj>.jpg``), ``prompts``, ``captions``,
        ``sample_count``, ``patch_positions`` (``""`` per image), ``timestamp_decimal`` (1 per sample),
        in the key order of their writer."""
        n_media = [len(s["media"]) for s in samples]
        values = [self.object_values(s) for s in samples]
        return {**_head(n_media), "prompts": [v[0] for v in values], "captions": [v[1] for v in values],
                **_tail(n_media)}

    def join_fields(self, samples: list[PackEntry]) -> bytes:
        """:meth:`fields` as bytes, the turn texts joined from the count stage's lines."""
        n_media = [len(s.media) for s in samples]
        values = [s.fields.split(b"\t") for s in samples]
        return (compact_json(_head(n_media))[:-1] + b',"prompts":[' + b",".join(v[0] for v in values)
                + b'],"captions":[' + b",".join(v[1] for v in values) + b"]," + compact_json(_tail(n_media))[1:])

    def dataset_files(self) -> dict[str, bytes]:
        """``dataset.yaml`` (sample type ``aiak_training_llm.data.multimodal.PackedCaptioningSample``,
        as their ``write_energon_config`` writes it) and the restated ``sample_loader.py``."""
        return {"dataset.yaml": DATASET_YAML.encode(),
                "sample_loader.py": SAMPLE_LOADER_SOURCE.encode()}


__all__ = ["LlavaOv2CaptioningSink"]
