"""The LoongForge output layout ``loongforge-mix-qa``: its ``packed_multi_mix_qa`` samples.

What LoongForge's offline packing writes (``tools/data_preprocess/vlm/offline_packing``,
``wds_pack/io/webdataset_writer.py``, native path) and its trainer reads (the cooker
``cooker_packed_multi_mix_qa`` of ``loongforge/data/multimodal/base/task_encoder.py`` ->
``PackedMultiMixQASample``, each child encoded by ``encode_packed_multi_mix_qa`` of
``vlm_task_encoder.py`` as a user / assistant conversation with no system prompt):

- one tar sample per pack, key ``<media_type>_pack_<pack:08d>``; shards ``pretrain-NNNNNN.tar``;
- ``<key>.s<iii>_img<j>.<ext>``: the original bytes of image ``j`` of child ``i``, ``ext`` its format's
  (``jpg``, ``png``, ...). Their writer names members ``s<iii>_<source suffix>`` (``s000_jpg``),
  which has no extension, so Energon's decoder (``image_decode="pil"``, chosen by the text after the
  last dot) would pass raw bytes to an encoder that needs PIL images; this name keeps their
  ``s<iii>_`` prefix and ends in the real extension, which their trainer decodes;
- ``<key>.json``: ``texts`` (``prompts`` / ``captions``: per child the list of its user / assistant
  turn texts, each image a ``<image>`` placeholder where it stood; their writer keeps only each
  child's first turn, their cooker reads lists), ``media_files`` (per child its member names),
  ``media_type`` (``image`` when a child has images, else ``text``), ``_meta`` (``sample_ids``,
  ``token_lens``, ``total_token_len``; the cooker ignores it), plus ``vlmpack`` (the pack object check
  reads; the cooker ignores it);
- ``.nv-meta/dataset.yaml``: their crude dataset (``CrudeWebdataset``, subflavor ``sample_type:
  packed_multi_mix_qa``, which routes each sample to the cooker); no ``sample_loader.py``.

Counts: each child is rendered by the trainer's ``qwen2-vl`` template
(:mod:`vlmpack.sinks.qwen2_vl_turns`, vlmpack's count less one). Its images are first resized by the
trainer's ``--min-pixels`` / ``--max-pixels`` (``_resize_image``) and then to at most
``--image-resolution`` pixels on the longer side (``Qwen2VLPlugin``; 512 when not given), so with
the trainer's defaults an image counts fewer tokens in training than vlmpack counted, never more:
packs hold less than L. Pass ``--image-resolution`` above the longest image side to train on the
images as counted. Video is not written (``layout_unsupported``). Packs hold one kind of sample
(``--group-by-kind``, required): their encoder fails on a text child in an image pack
(``process_sft_qa`` reads the image grid of its empty image list), and their writer never makes one.
"""

from __future__ import annotations

import json

from vlmpack.packfmt import PackEntry, compact_json
from vlmpack.sinks.embedded import EmbeddedSink
from vlmpack.sinks.qwen2_vl_turns import turns

#: ``.nv-meta/dataset.yaml`` as their ``write_config`` writes it (``yaml.dump``, ``sort_keys=False``).
DATASET_YAML = """__module__: megatron.energon
__class__: CrudeWebdataset
subflavors:
  sample_type: packed_multi_mix_qa
"""


def _tail(names: list[list[str]], ids: list[str], tokens: list[int]) -> dict:
    return {"media_files": names, "media_type": "image" if any(names) else "text",  # video is not written
            "_meta": {"sample_ids": ids, "token_lens": tokens, "total_token_len": sum(tokens)}}


class LoongForgeMixQASink(EmbeddedSink):
    """``loongforge-mix-qa`` (module docstring; a :class:`vlmpack.sinks.base.Sink` of the
    :class:`~vlmpack.sinks.embedded.EmbeddedSink` shape)."""

    name = "loongforge-mix-qa"
    one_kind_per_pack = True  # a text child in an image pack: their encoder reads its missing image grid
    sample_class = "packed_multi_mix_qa"
    member_expr = 'f"s{i:03d}_img{j}." + part.rsplit(".", 1)[1]'

    @staticmethod
    def pack_key(global_pack: int, samples: list[PackEntry]) -> str:
        """``<media_type>_pack_`` + 8 digits (their ``build_plan.py``; numbered over the output)."""
        kind = "image" if any(s.media for s in samples) else "text"
        return f"{kind}_pack_{global_pack:08d}"

    @staticmethod
    def member(i: int, j: int, part: str) -> str:
        """``s<iii>_img<j>.<ext>`` (``ext``: the extension of the object's part name)."""
        return f"s{i:03d}_img{j}.{part.rsplit('.', 1)[1]}"

    @staticmethod
    def sample_values(messages: list[dict], exts: list[str], sid: str) -> list:
        """``[prompts, captions, media extensions, id]`` (:func:`vlmpack.sinks.qwen2_vl_turns.turns`)."""
        return [*turns(messages), exts, sid]

    def _names(self, exts: list[list[str]]) -> list[list[str]]:
        return [[self.member(i, j, f"x.{e}") for j, e in enumerate(x)] for i, x in enumerate(exts)]

    def fields(self, samples: list[dict]) -> dict:
        """``texts``, ``media_files``, ``media_type`` and ``_meta`` (module docstring: their
        ``pack_id`` left out, the key says it; token counts as the object records them)."""
        values = [self.object_values(s) for s in samples]
        return {"texts": {"prompts": [v[0] for v in values], "captions": [v[1] for v in values]},
                **_tail(self._names([v[2] for v in values]), [v[3] for v in values],
                        [s["num_tokens"] for s in samples])}

    def join_fields(self, samples: list[PackEntry]) -> bytes:
        """:meth:`fields` as bytes, the turn texts joined from the count stage's lines."""
        values = [s.fields.split(b"\t") for s in samples]
        exts = [json.loads(v[2]) for v in values]
        ids = [json.loads(v[3]) for v in values]
        return (b'{"texts":{"prompts":[' + b",".join(v[0] for v in values) + b'],"captions":['
                + b",".join(v[1] for v in values) + b"]}," +
                compact_json(_tail(self._names(exts), ids, [s.num_tokens for s in samples]))[1:])

    @staticmethod
    def dataset_files() -> dict[str, bytes]:
        """Their crude ``dataset.yaml`` (:data:`DATASET_YAML`); no loader file."""
        return {"dataset.yaml": DATASET_YAML.encode()}


__all__ = ["LoongForgeMixQASink"]
