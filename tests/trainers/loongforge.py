"""LoongForge's trainer, the parts that read a ``packed_multi_mix_qa`` output, restated
(tests/trainers/README.md; github:baidu-baige/LoongForge at c627566).

- :class:`PackedMultiMixQASample` (``loongforge/data/multimodal/flavors/packed_multi_mix_qa.py``) and
  :func:`cooker_packed_multi_mix_qa` (``loongforge/data/multimodal/base/task_encoder.py``), which its
  task encoder registers for the subflavor ``sample_type: packed_multi_mix_qa``; Energon's decoder
  (``image_decode="pil"``, ``dataloader_provider.py``) has decoded the parts by their extension.
- :func:`child_messages`: the conversation ``encode_packed_multi_mix_qa`` (``vlm_task_encoder.py``)
  builds for child ``idx``: user / assistant pairs of ``contexts[idx]`` / ``answers[idx]``, no system.
- :func:`image_seqlens`: tokens per image as ``process_sft_qa`` sizes them: ``_resize_image``
  (``smart_resize``, factor 28, the trainer's ``--min-pixels`` / ``--max-pixels``), then
  ``MMPlugin._preprocess_image`` (longer side at most ``image_resolution``, NEAREST; RGB) and
  ``Qwen2VLPlugin._preprocess_image`` (at least 28 a side, at most 200:1), then the image processor's
  ``image_grid_thw`` over merge^2.
- ``template_ids``: its ``qwen2-vl`` chat template (tests/trainers/qwen2_vl_template.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.energon.flavors.base_dataset import Sample
from megatron.energon.task_encoder.base import stateless
from qwen2_vl_template import grid_seqlens, plugin_resize, template_ids  # noqa: F401 - template_ids re-exported

#: The trainer's ``--min-pixels`` / ``--max-pixels`` defaults (``loongforge/train/arguments.py``).
MIN_PIXELS, MAX_PIXELS = 3136, 16384 * 28 * 28


@dataclass
class PackedMultiMixQASample(Sample):
    """flavors/packed_multi_mix_qa.py."""

    images: list | None
    videos: list | None
    contexts: list
    answers: list
    answer_weights: list | None = None


@stateless
def cooker_packed_multi_mix_qa(sample: dict) -> PackedMultiMixQASample:
    """The cooker: ``texts`` / ``media_files`` / ``media_type`` of the json -> the sample."""
    data = sample["json"]
    texts = data.get("texts", {})
    prompts, captions = texts.get("prompts", []) or [], texts.get("captions", []) or []
    if len(captions) != len(prompts):
        raise ValueError("captions/prompts length mismatch")
    as_list = lambda x: [x] if isinstance(x, str) else (list(x) if isinstance(x, (list, tuple)) else [])  # noqa: E731
    contexts, answers = [as_list(p) for p in prompts], [as_list(c) for c in captions]
    media_files = data.get("media_files", []) or []
    media_type = (data.get("media_type") or "").lower()
    images = videos = None
    if media_type in ("image", "video"):
        groups = []
        for group in media_files:
            names = group if isinstance(group, (list, tuple)) else [group]
            groups.append([sample[n] for n in names if sample.get(n) is not None])
        if not all(len(g) == 0 for g in groups):
            images, videos = (groups, None) if media_type == "image" else (None, groups)
    elif media_type != "text":
        raise ValueError(f"unknown media_type={media_type!r}")
    return PackedMultiMixQASample(__key__=sample["__key__"], __restore_key__=sample["__restore_key__"],
                                  __subflavors__=sample.get("__subflavors__", {}), images=images, videos=videos,
                                  contexts=contexts, answers=answers)


def child_messages(sample: PackedMultiMixQASample, idx: int) -> list[dict]:
    """The messages of child ``idx`` (turn counts must match)."""
    contexts, answers = list(sample.contexts[idx]), list(sample.answers[idx])
    if len(contexts) != len(answers):
        raise ValueError("context/answer turn count mismatch")
    out = []
    for c, a in zip(contexts, answers):
        out += [{"role": "user", "content": c}, {"role": "assistant", "content": a}]
    return out


def preprocess_image(image, image_resolution: int):
    """``_resize_image`` then the plugin's ``_preprocess_image`` (module docstring)."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize  # qwen_vl_utils' rule

    h, w = smart_resize(image.height, image.width, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    image = image.resize((w, h))
    if max(image.width, image.height) > image_resolution:
        f = image_resolution / max(image.width, image.height)
        image = image.resize((int(image.width * f), int(image.height * f)), resample=Image.NEAREST)
    if image.mode != "RGB":
        image = image.convert("RGB")
    return plugin_resize(image)


def image_seqlens(image_processor, images, image_resolution: int = 512) -> list[int]:
    """Tokens per image (module docstring; ``image_resolution``: the plugin's, 512 by default)."""
    return grid_seqlens(image_processor, [preprocess_image(im, image_resolution) for im in images])
