"""GLM-4.1V (``model_type`` ``glm4v``, transformers' ``Glm4vForConditionalGeneration``): :class:`Glm4vFamily`.

GLM-4.1V takes images like Qwen2-VL (patches of 14 px, 2 x 2 merged into one token, 3-D mRoPE),
so :class:`Glm4vFamily` is :class:`vlmpack.models.qwen2_vl.Qwen2VLFamily` with what differs
overridden. The rules matched are transformers' ``Glm4vProcessor.__call__``
(``processing_glm4v``), ``Glm4vImageProcessorPil`` and ``Glm4vModel.get_rope_index``:

- chat template (the model directory's, rendered by the tokenizer): ``[gMASK]<sop>``, then per turn
  ``<|system|>\\n`` / ``<|user|>\\n`` / ``<|assistant|>\\n`` + content, with no end-of-turn token
  (the next role token ends a turn); an image part is written
  ``<|begin_of_image|><|image|><|end_of_image|>``. The template writes a system or assistant turn's
  ``content`` as it is (``{{ msg.content }}``: a list would be written as its Python repr), so
  :meth:`Glm4vFamily.template_messages` gives those turns their text parts joined as one string
  (user turns keep their parts, which the template renders one by one);
- ``Glm4vProcessor`` replaces every ``<|image|>`` with ``image_grid_thw.prod() // merge_size**2``
  copies (``replace_image_token``) and tokenizes with the tokenizer's default call; ``<|image|>`` is
  a special added token, so (as for Qwen2-VL)
  ``len(input_ids) = len(tokenizer(rendered)) + sum(n_i - 1)``;
- ``n_i`` from the image *header*: ``Glm4vImageProcessorPil.get_number_of_image_patches(h, w) //
  merge_size**2``, the processor's own ``smart_resize`` (``factor = patch_size * merge_size``; a side
  under ``factor`` is first scaled up to it; then ``t * h * w`` with ``t = temporal_patch_size``
  kept within ``size`` ``[shortest_edge, longest_edge]``; aspect ratio <= 200 after the scaling),
  so :meth:`Glm4vFamily.media_problem` asks that same rule;
- mRoPE: ``Glm4vModel.get_rope_index`` with ``mm_token_type_ids`` 1 on the image tokens (what
  ``Glm4vProcessor.create_mm_token_type_ids`` gives outside video segments): text advances the
  position by 1, an image of grid ``(1, h, w)`` takes ``start + (0, i, j)`` on the merged
  ``h/2 x w/2`` grid and advances it by ``max(h, w) / 2`` -- Qwen2-VL's image rule, so
  :func:`vlmpack.train.rope.mrope_positions_numpy` holds (self-checked against the class when
  ``rope_impl="numpy"``);
- labels (:func:`glm_label_mask`): each assistant reply after ``<|assistant|>`` (and its ``"\\n"``
  token) up to the next role token, that token included when it is one GLM-4.1V stops at
  (``<|user|>``, ``<|observation|>``: its ``eos_token_id`` list), so the model learns to end a
  reply as it does at inference; the template gives the last reply no end token, so it has none;
- videos: not counted (``media_unsupported``): ``Glm4vProcessor`` writes each sampled frame as
  ``<|begin_of_image|>`` + tokens + ``<|end_of_image|>`` + its timestamp as text, whose
  tokenization and frame sampling (``Glm4vVideoProcessor``, torchvision only) vlmpack does not
  restate yet.

Values read from the model directory: ``preprocessor_config.json`` (``size``, ``patch_size``,
``merge_size``, ``temporal_patch_size``, through ``Glm4vImageProcessorPil.from_pretrained``),
``config.json`` (the six vision token ids, checked against the tokenizer), the tokenizer and chat
template. Source: transformers 5.x ``models/glm4v/processing_glm4v.py``,
``image_processing_pil_glm4v.py`` and ``modeling_glm4v.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, MediaRuleError
from vlmpack.models.base import COUNTING_FILES, MediaSize, ProcessedVideos
from vlmpack.models.chat_tokenizer import load_chat_tokenizer
from vlmpack.models.chatml import skip_token, spans_mask
from vlmpack.models.qwen2_vl import Qwen2VLFamily
from vlmpack.models.special_tokens import special_token_pattern, special_token_strings

__all__ = ["Glm4vFamily", "glm_label_mask"]

#: Token strings of the template and processor (``Glm4vProcessor`` defaults), by config key.
TOKENS = {"image_token_id": "<|image|>", "video_token_id": "<|video|>",
          "image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
          "video_start_token_id": "<|begin_of_video|>", "video_end_token_id": "<|end_of_video|>"}
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
#: Role tokens GLM-4.1V stops generating at (``generation_config.json`` / ``eos_token_id``).
STOP_TOKENS = ("<|user|>", "<|observation|>")


def glm_label_mask(ids: np.ndarray, *, assistant_id: int, newline_id: int, role_ids: Sequence[int],
                   stop_ids: Sequence[int]) -> np.ndarray:
    """bool ``[n]``: True on the tokens of GLM assistant replies that are trained on.

    Found on the token ids of the rendered GLM template: a reply starts after an ``<|assistant|>``
    token (``assistant_id``) and its ``"\\n"`` when that is a token of its own (``newline_id``; a
    merged ``"\\n\\n"`` holds content and is kept) and runs to the next role token (``role_ids``:
    ``<|system|>``, ``<|user|>``, ``<|assistant|>``, ``<|observation|>``), which is included when it
    is a stop token (``stop_ids``: the end of a turn the model must emit), else to the end of
    ``ids``. Every other token stays unlabelled. ids: int ``[n]``.
    """
    ids = np.asarray(ids)
    n = len(ids)
    mask = np.zeros(n, dtype=bool)
    heads = np.flatnonzero(ids == assistant_id)
    if not len(heads):
        return mask
    content = skip_token(ids, heads + 1, newline_id)
    roles = np.flatnonzero(np.isin(ids, np.asarray(role_ids)))
    k = np.searchsorted(roles, content)
    end = np.where(k < len(roles), roles[np.minimum(k, len(roles) - 1)], n)
    inclusive = (end < n) & np.isin(ids[np.minimum(end, n - 1)], np.asarray(stop_ids))
    return spans_mask(n, content, end + inclusive)


class Glm4vFamily(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one GLM-4.1V model directory (a
    :class:`vlmpack.models.base.ModelFamily`; see the module docstring; everything else as
    :class:`Qwen2VLFamily`).

    Attributes: ``tokenizer``, ``image_processor`` (``Glm4vImageProcessorPil``), ``merge_size``,
    ``patch_size``, ``model_type``, the token ids ``image_token_id`` (``<|image|>``),
    ``video_token_id``, ``image_start_token_id``, ``image_end_token_id``, ``pad_token_id``. Raises
    :class:`ConfigError` when the directory lacks a tokenizer, a chat template or a preprocessor
    config, or when ``config.json``'s token ids are not the tokenizer's.
    """

    name = "glm4v"
    counting_files = (*COUNTING_FILES, "processor_config.json")
    mrope = True
    #: no named option: ``size`` / ``patch_size`` / ``merge_size`` through ``--processor-kwargs``
    #: (GLM's ``size`` bounds ``temporal_patch_size * h * w``, not Qwen's ``min_pixels`` / ``max_pixels``)
    processor_options: dict = {}
    video_option_keys = ()

    @classmethod
    def image_processor_class(cls) -> type:
        """``Glm4vImageProcessorPil`` (see :meth:`Qwen2VLFamily.image_processor_class`)."""
        from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

        return Glm4vImageProcessorPil

    def __init__(self, model_dir: str | Path):  # noqa: D107 - documented on the class
        d = Path(model_dir)
        self.model_dir = str(model_dir)
        self.tokenizer = load_chat_tokenizer(model_dir)
        if not (d / "preprocessor_config.json").is_file():
            raise ConfigError(f"{model_dir}: no preprocessor_config.json (needed for image token counts)")
        self.image_processor = self.image_processor_class().from_pretrained(self.model_dir)
        self.merge_size = int(self.image_processor.merge_size)
        self.patch_size = int(self.image_processor.patch_size)
        cfg = json.loads((d / "config.json").read_text())
        self.model_type = str(cfg.get("model_type"))
        tok = self.tokenizer
        convert = tok.convert_tokens_to_ids
        for key, token in TOKENS.items():
            want = convert(token)
            if not isinstance(want, int) or want == tok.unk_token_id:
                raise ConfigError(f"{model_dir}: the tokenizer has no {token} token (GLM-4.1V's {key})")
            got = int(cfg[key]) if cfg.get(key) is not None else want
            if want != got:
                raise ConfigError(f"{model_dir}: config.json {key} {got} is not the tokenizer's {token} ({want})")
            setattr(self, key, got)
        self._roles = {t: convert(t) for t in ROLE_TOKENS}
        if any(not isinstance(i, int) or i == tok.unk_token_id for i in self._roles.values()):
            raise ConfigError(f"{model_dir}: the tokenizer lacks GLM's role tokens {ROLE_TOKENS}")
        eos = tok.convert_tokens_to_ids("<|endoftext|>")
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else eos)
        self._label_ids: tuple[int, int] | None = None
        self.special_tokens = special_token_strings(tok)
        self._special_re = special_token_pattern(self.special_tokens)
        self._image_tokens = lru_cache(maxsize=65536)(self._image_tokens_uncached)

    # ------------------------------------------------------------------ media rule
    def media_tokens(self, media: MediaSize, *, sample_images: int = 1) -> int:
        """``<|image|>`` copies of one image (:meth:`Qwen2VLFamily.image_tokens`: the
        ``Glm4vImageProcessorPil`` rule; ``sample_images`` is ignored). Raises
        :class:`MediaRuleError` for videos (see the module docstring), other kinds and sizes the
        processor refuses."""
        if media.kind != "image":
            raise MediaRuleError(f"{media.kind} token counting is not implemented for {self.name} (GLM-4.1V "
                                 "writes timestamp text per video frame, which vlmpack does not count yet)")
        return self.image_tokens(media.width, media.height)

    def media_problem(self, kind: str, width: int, height: int) -> str | None:
        """For images, the one-line reason ``Glm4vImageProcessorPil``'s ``smart_resize`` refuses a
        ``width`` x ``height`` image (aspect ratio > 200 once a side under ``patch_size *
        merge_size`` is scaled up), else None; videos: None (refused at counting time)."""
        if kind != "image":
            return None
        try:
            self.image_tokens(width, height)
        except MediaRuleError as e:
            return f"{width}x{height}: {e}"
        return None

    # ------------------------------------------------------------------ text
    @staticmethod
    def template_messages(messages: Sequence[dict]) -> list[dict]:
        """Canonical messages -> what GLM's template takes: user turns as
        :meth:`Qwen2VLFamily.template_messages` (``{"type": "image"}`` / ``{"type": "text", "text"}``
        parts); system and assistant turns whose parts are all text as one string, the parts joined
        with nothing between (what the template does with a user turn's parts; it writes a
        non-user turn's ``content`` as it is). A non-user turn with a media part keeps its parts:
        the template drops the media, and :meth:`check_ids` rejects the sample."""
        out = Qwen2VLFamily.template_messages(messages)
        for m in out:
            if m["role"] != "user" and all(p["type"] == "text" for p in m["content"]):
                m["content"] = "".join(p["text"] for p in m["content"])
        return out

    # ------------------------------------------------------------------ samples
    def check_ids(self, ids: np.ndarray, n_images: int, n_videos: int) -> str | None:
        """A one-line problem unless the rendered ids hold exactly one ``<|image|>``,
        ``<|begin_of_image|>`` and ``<|end_of_image|>`` per image and no video token (user text
        with such a token, or media the template did not render), else None."""
        counts = [int(np.count_nonzero(ids == t)) for t in (self.image_token_id, self.image_start_token_id,
                                                             self.image_end_token_id, self.video_token_id)]
        if counts != [n_images, n_images, n_images, n_videos]:
            return (f"rendered text holds {counts[0]} <|image|>, {counts[1]} <|begin_of_image|>, {counts[2]} "
                    f"<|end_of_image|>, {counts[3]} <|video|> for {n_images} images and {n_videos} videos")
        return None

    # ------------------------------------------------------------------ training
    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: :func:`glm_label_mask` with this tokenizer's ids. Raises
        :class:`ConfigError` when ``"\\n"`` is not one token (the rule needs it)."""
        if self._label_ids is None:
            nl = self.tokenizer.encode("\n", add_special_tokens=False)
            if len(nl) != 1:
                raise ConfigError(f"{self.model_dir}: '\\n' is not one token; the label rule needs it")
            self._label_ids = (int(self._roles["<|assistant|>"]), int(nl[0]))
        assistant_id, newline_id = self._label_ids
        return glm_label_mask(ids, assistant_id=assistant_id, newline_id=newline_id,
                              role_ids=list(self._roles.values()), stop_ids=[self._roles[t] for t in STOP_TOKENS])

    def rope_model_class(self) -> type:
        """transformers' ``Glm4vModel``: its ``get_rope_index`` defines the mRoPE positions."""
        from transformers.models.glm4v.modeling_glm4v import Glm4vModel

        return Glm4vModel

    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """:class:`ConfigError`: GLM-4.1V videos are not counted, so never packed (module docstring)."""
        raise ConfigError(f"{self.model_dir}: {self.name} videos are not supported (counted media_unsupported)")

    def placeholder(self) -> tuple[np.ndarray, list]:
        """``<|begin_of_image|><|image|>*n<|end_of_image|>`` for a black ``patch_size * merge_size``
        square (the processor scales it up to its ``shortest_edge``: ``n`` = :meth:`image_tokens`)."""
        from PIL import Image

        side = self.patch_size * self.merge_size
        n = self.image_tokens(side, side)
        ids = np.array([self.image_start_token_id] + [self.image_token_id] * n + [self.image_end_token_id],
                       dtype=np.int64)
        return ids, [Image.new("RGB", (side, side))]

