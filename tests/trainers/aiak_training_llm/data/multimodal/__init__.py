"""LLaVA-OneVision-2's Energon sample class, restated (tests/trainers/README.md): the module the
``dataset.yaml`` of its offline packing names (``aiak_training_llm.data.multimodal``)."""

from __future__ import annotations

from dataclasses import dataclass

from megatron.energon.flavors.base_dataset import Sample


@dataclass
class PackedCaptioningSample(Sample):
    """flavors/packed_captioning.py: one packed bin, per-sample lists."""

    images: list
    prompts: list | None
    captions: list
    patch_positions: list | None = None
    fps: list | None = None
    timestamp_decimal: list | None = None
