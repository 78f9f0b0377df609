"""The ``qwen2-vl`` chat template of LLaMA-Factory-derived trainers, restated (tests/trainers/README.md).

LLaVA-OneVision-2 (``aiak_training_llm/data/chat_templete.py``) and LoongForge
(``loongforge/data/chat_template.py``) register it alike: ``_encode`` gives message 0 the default
system ``You are a helpful assistant.``, each later user turn a ``"\\n"`` separator, user turns
``<|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n``, assistant turns ``{content}`` +
eos (replaced by ``<|im_end|>``), each element tokenized on its own; their ``Qwen2VLPlugin``
(``mm_plugin.py``) first replaces each ``<image>`` in order by ``<|vision_start|>`` + ``<|image_pad|>``
x (grid_t*grid_h*grid_w / merge^2) + ``<|vision_end|>``.
"""

from __future__ import annotations

DEFAULT_SYSTEM = "You are a helpful assistant."


def plugin_resize(image):
    """``Qwen2VLPlugin._preprocess_image``'s own step (both trainers' ``mm_plugin.py``): at least 28
    pixels a side, at most 200:1 (clamped to 180:1), NEAREST."""
    from PIL import Image

    if min(image.width, image.height) < 28:
        image = image.resize((max(image.width, 28), max(image.height, 28)), resample=Image.NEAREST)
    if image.width / image.height > 200:
        image = image.resize((image.height * 180, image.height), resample=Image.NEAREST)
    if image.height / image.width > 200:
        image = image.resize((image.width, image.width * 180), resample=Image.NEAREST)
    return image


def grid_seqlens(image_processor, images) -> list[int]:
    """Tokens per image: ``image_grid_thw.prod() // merge_size**2`` of the processor's output."""
    if not images:
        return []
    grids = image_processor(images=images)["image_grid_thw"]
    merge = image_processor.merge_size
    return [int(g[0] * g[1] * g[2]) // (merge * merge) for g in grids.tolist()]


def template_ids(tokenizer, messages: list[dict], seqlens: list[int]) -> list[int]:
    """The ids of ``messages`` by the ``qwen2-vl`` template, ``<image>`` expanded with ``seqlens``
    in order (``Qwen2VLPlugin.process_messages``: a count mismatch is a ``ValueError``)."""
    left = list(seqlens)
    expanded = []
    for m in messages:
        content = m["content"]
        while "<image>" in content:
            if not left:
                raise ValueError("more <image> placeholders than images")
            content = content.replace("<image>", "<|vision_start|>" + "<|image_pad|>" * left.pop(0)
                                      + "<|vision_end|>", 1)
        expanded.append({**m, "content": content})
    if left:
        raise ValueError("more images than <image> placeholders")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids: list[int] = []
    for i, m in enumerate(expanded):
        elements: list = []
        if i == 0:
            elements.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
        elif i % 2 == 0:
            elements.append("\n")
        if m["role"] == "user":
            elements.append(f"<|im_start|>user\n{m['content']}<|im_end|>\n<|im_start|>assistant\n")
        elif m["role"] == "assistant":
            elements += [m["content"], im_end]
        else:
            raise NotImplementedError(f"Unexpected role: {m['role']}")
        for e in elements:
            if isinstance(e, int):
                ids.append(e)
            elif e:
                ids += tokenizer.encode(e, add_special_tokens=False)
    return ids
