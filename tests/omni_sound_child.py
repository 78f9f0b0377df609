"""The part of ``test_train_omni_video.py``'s sound-track tests that runs transformers' own
``Qwen2_5OmniProcessor`` with ``use_audio_in_video=True``, in a child process (its video processor
needs torchvision: ``PYTHONPATH`` starts with ``tests/kimi_standin``, the shape-true stand-in, as for
``omni_video_child.py``, whose decoding this child shares).

``python tests/omni_sound_child.py SPEC.json DEST.npz``; ``SPEC.json``: ``{"model_dir": ..., "cases":
[{"text", "parts"}, ...]}``, ``parts`` the sample's ``[kind, path]`` media in content order. Each case
is one call ``processor(text=[text], videos=[frames, ...], audio=[...], images=[...],
use_audio_in_video=True, audio_from_video_indices=[...])``: per video every frame of the file (PyAV,
:func:`vlmpack.media.frames.decode_frames`) and its sound track, each audio part and each track
decoded at 16 kHz mono by :func:`vlmpack.media.audio.decode_audio` (the length ``librosa.load(path,
sr=16000)`` gives, what qwen-omni-utils hands the processor; the processor's own decode of a track
needs torchcodec), one audio slot per audio part and video in content order (``None`` for a part,
the video's index for a track: what ``apply_chat_template`` passes). The log-mel features are
computed for real on every call (unlike ``omni_video_child.py``). Output per case, in a NumPy
``.npz`` (no pickle): ``ids<i>`` int64 ``input_ids``, and where the call gives them ``grid<i>``
(``video_grid_thw``), ``sec<i>`` (``video_second_per_grid``), ``igrid<i>`` (``image_grid_thw``),
``feats<i>`` float32 ``input_features`` ``[k, 128, 30000]`` and ``fmask<i>`` int32
``feature_attention_mask`` ``[k, 30000]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(spec_path: str, dest: str) -> None:
    from vlmpack.media.audio import decode_audio
    from vlmpack.media.frames import decode_frames
    from vlmpack.media.kinds import KINDS
    from vlmpack.media.video import probe_video
    from vlmpack.models.processor_build import build_processor

    spec = json.loads(Path(spec_path).read_text())
    proc = build_processor(spec["model_dir"])
    assert type(proc.video_processor).__name__ == "Qwen2VLVideoProcessor", type(proc.video_processor)
    out = {}
    for i, case in enumerate(spec["cases"]):
        videos, audio, from_video, images = [], [], [], []
        for kind, path in case["parts"]:
            if kind == "image":
                images.append(KINDS["image"].decode(Path(path).read_bytes(), where=path))
                continue
            if kind == "video":
                videos.append(decode_frames(path, range(probe_video(path, Path(path).name).frames), where=path))
            audio.append(decode_audio(path, where=path))
            from_video.append(len(videos) - 1 if kind == "video" else None)
        kw = {"use_audio_in_video": True, "audio_from_video_indices": from_video} if videos else {}
        got = proc(text=[case["text"]], videos=videos or None, images=images or None, audio=audio or None,
                   return_tensors="pt", **kw)
        out[f"ids{i}"] = got["input_ids"][0].numpy().astype(np.int64)
        for key, name in (("video_grid_thw", "grid"), ("video_second_per_grid", "sec"), ("image_grid_thw", "igrid"),
                          ("input_features", "feats"), ("feature_attention_mask", "fmask")):
            if key in got:
                out[f"{name}{i}"] = np.asarray(got[key])
    np.savez(dest, **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
