"""LLaVA-OneVision-2's trainer, the parts that read a ``PackedCaptioningSample`` output, restated
(tests/trainers/README.md; github:EvolvingLMMs-Lab/LLaVA-OneVision-2 at 2c3c25e).

- :data:`SAMPLE_LOADER`: the ``sample_loader.py`` its ``offline_packing/s5_convert_to_webdataset.py``
  generates (``generate_sample_loader_code``); Energon's decoder (``image_decode="pil"``, as its
  ``dataloader_provider.py`` asks) has turned ``json`` into a dict and ``img<i>_<j>.jpg`` into PIL
  images before it runs. (Theirs loads ``.npy`` parts with ``allow_pickle=True``; no such part is
  read here.)
- :func:`sample_messages`: the conversation ``task_encoder.py`` (``encode_sample``, with
  ``OFFLINE_PACKING_BMR=1``) builds for sub-sample ``idx``: user / assistant pairs from
  ``prompts[idx]`` / ``captions[idx]``, no system.
- :func:`image_seqlens`: tokens per image as its ``Qwen2VLPlugin`` (``mm_plugin.py``) counts them,
  the images first made RGB, at least 28 pixels a side and at most 200:1;
- ``template_ids``: its ``qwen2-vl`` chat template (``chat_templete.py``;
  tests/trainers/qwen2_vl_template.py).
"""

from __future__ import annotations

from qwen2_vl_template import grid_seqlens, plugin_resize, template_ids  # noqa: F401 - template_ids re-exported

SAMPLE_LOADER = '''
import io
import numpy as np


def _load_npy(data):
    if data is None:
        return None
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, bytes):
        return np.load(io.BytesIO(data), allow_pickle=False)
    return np.asarray(data)


def sample_loader(sample: dict) -> dict:
    data = sample['json']
    images = [
        [sample[f'img{i}_{j}.jpg'] for j in range(len(data['images'][i]))]
        for i in range(len(data['images']))
    ]
    patch_positions = None
    if 'patch_positions' in data:
        patch_positions = [
            [_load_npy(sample.get(f'img{i}_{j}.npy')) for j in range(len(data['patch_positions'][i]))]
            for i in range(len(data['patch_positions']))
        ]
    result = dict(__key__=sample['__key__'], __restore_key__=sample['__restore_key__'], images=images,
                  prompts=data['prompts'], captions=data['captions'])
    if patch_positions is not None:
        result['patch_positions'] = patch_positions
    if 'fps' in data:
        result['fps'] = data['fps']
    if 'timestamp_decimal' in data:
        result['timestamp_decimal'] = data['timestamp_decimal']
    return result


def part_filter(part: str) -> bool:
    return True
'''

def sample_messages(sample, idx: int) -> list[dict]:
    """``convert_to_messages(prompts[idx], captions[idx])`` of ``task_encoder.py``."""
    prompts, captions = sample.prompts[idx], sample.captions[idx]
    prompts = [prompts] if isinstance(prompts, str) else prompts
    captions = [captions] if isinstance(captions, str) else captions
    if len(prompts) != len(captions):
        raise ValueError("cur_prompt & cur_caption have different lengths")
    out = []
    for p, c in zip(prompts, captions):
        out += [{"content": p, "role": "user"}, {"content": c, "role": "assistant"}]
    return out


def preprocess_image(image):
    """``Qwen2VLPlugin._preprocess_image`` (after ``MMPlugin._preprocess_image``: RGB)."""
    return plugin_resize(image if image.mode == "RGB" else image.convert("RGB"))


def image_seqlens(image_processor, images) -> list[int]:
    """Tokens per image (:func:`preprocess_image`, then the processor's grids)."""
    return grid_seqlens(image_processor, [preprocess_image(im) for im in images])
