"""The part of ``test_omni_video.py`` that runs transformers' own ``Qwen2_5OmniProcessor`` on videos,
in a child process.

The processor's video processor (``Qwen2VLVideoProcessor``) is torchvision-only, and torchvision
cannot be installed here. The test runs ``python tests/omni_video_child.py SPEC.json DEST.npz`` with
``PYTHONPATH`` starting with ``tests/kimi_standin`` (the shape-true torchvision stand-in, see its
README.md: without ``KIMI_STANDIN_PIXELS`` its ``resize`` gives tensors of the right shape on the
``meta`` device, and ids depend on shapes only), so only this child imports the stand-in.

``SPEC.json``: ``{"model_dir": ..., "cases": [{"text", "parts", "audio_in_video"}, ...]}``, ``parts``
the sample's ``[kind, path]`` media in content order (``"video"`` / ``"audio"`` / ``"image"``, an
image decoded by the kind's decoder). The
processor is the directory's, built as ``AutoProcessor.from_pretrained`` builds it
(:func:`vlmpack.models.processor_build.build_processor`: ``AutoVideoProcessor`` loads with the
stand-in). Each case is one call ``processor(text=[text], videos=[frames, ...], audio=..., ...)``:
per video every frame of the file (uint8 ``[T, H, W, 3]``, T the header's frame count, decoded with
PyAV as transformers' ``read_video_pyav`` does: :func:`vlmpack.media.frames.decode_frames`) and, with
``audio_in_video``, ``use_audio_in_video=True`` and ``audio_from_video_indices`` (``None`` for an
audio part, the video's index for its sound track, in content order: what ``apply_chat_template``
passes); each audio part and each sound track decoded at 16 kHz mono
(:func:`vlmpack.media.audio.decode_audio`, the length of ``librosa.load(path, sr=16000)``, what
qwen-omni-utils hands the processor; the processor's own
decode of the track needs torchcodec). The log-mel features are real on the first call, shape-true
after (``test_audio.shape_only_fbank``). Output per case, in a NumPy ``.npz`` (no pickle): ``ids<i>``
int64 (the call's ``input_ids``) and, where the call gives them, ``grid<i>`` (``video_grid_thw``
``[k, 3]``), ``sec<i>`` (``video_second_per_grid`` ``[k]``) and ``igrid<i>`` (``image_grid_thw``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # test_audio


def main(spec_path: str, dest: str) -> None:
    from test_audio import shape_only_fbank

    from vlmpack.media.audio import decode_audio
    from vlmpack.media.frames import decode_frames
    from vlmpack.media.kinds import KINDS
    from vlmpack.media.video import probe_video
    from vlmpack.models.processor_build import build_processor

    spec = json.loads(Path(spec_path).read_text())
    proc = build_processor(spec["model_dir"])
    assert type(proc.video_processor).__name__ == "Qwen2VLVideoProcessor", type(proc.video_processor)
    out = {}
    with shape_only_fbank(proc.feature_extractor, real_files=1):
        for i, case in enumerate(spec["cases"]):
            videos, audio, from_video, images = [], [], [], []
            for kind, path in case["parts"]:  # in content order, as apply_chat_template collects them
                if kind == "image":
                    images.append(KINDS["image"].decode(Path(path).read_bytes(), where=path))
                    continue
                if kind == "video":
                    head = probe_video(path, Path(path).name)
                    videos.append(decode_frames(path, range(head.frames), where=path))
                if kind == "audio" or case["audio_in_video"]:
                    audio.append(decode_audio(path, where=path))
                    from_video.append(len(videos) - 1 if kind == "video" else None)
            kw = {"audio": audio or None}
            if case["audio_in_video"]:
                kw.update(use_audio_in_video=True, audio_from_video_indices=from_video)
            got = proc(text=[case["text"]], videos=videos or None, images=images or None, return_tensors="pt", **kw)
            out[f"ids{i}"] = got["input_ids"][0].numpy().astype(np.int64)
            for key, name in (("video_grid_thw", "grid"), ("video_second_per_grid", "sec"),
                              ("image_grid_thw", "igrid")):
                if key in got:
                    out[f"{name}{i}"] = np.asarray(got[key])
    np.savez(dest, **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
