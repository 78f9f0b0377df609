"""Qwen3-VL (``model_type`` ``qwen3_vl``, and the MoE ``qwen3_vl_moe``): :class:`Qwen3VLFamily`.

Qwen3-VL keeps Qwen2-VL's processing of images and text, so :class:`Qwen3VLFamily` is
:class:`vlmpack.models.qwen2_vl.Qwen2VLFamily` with the Qwen3-VL model class; what differs lives in
the model directory and is read from it:

- image rule: ``Qwen3VLProcessor`` uses transformers' ``Qwen2VLImageProcessor`` (``smart_resize``,
  aspect ratio <= 200), here with ``patch_size`` 16, ``merge_size`` 2 and ``size`` =
  ``{shortest_edge: 65536, longest_edge: 16777216}`` from ``preprocessor_config.json``; image
  tokens = ``get_number_of_image_patches(h, w) // merge_size**2``, one ``<|image_pad|>`` expanded
  to that many copies (``Qwen3VLProcessor.replace_image_token``);
- chat template: Qwen3-VL's own (no default system turn), rendered by the tokenizer;
- mRoPE: ``Qwen3VLModel.get_rope_index`` (``Qwen3VLMoeModel`` for ``qwen3_vl_moe``); for images it
  is Qwen2-VL's rule (text advances 1; an image of grid (t, h, w) takes the merged grid and
  advances ``max(h, w) / merge``), so :func:`vlmpack.train.rope.mrope_positions_numpy` holds
  (checked against the class at start when ``rope_impl="numpy"``). Videos differ from Qwen2-VL
  (one timestamp text + ``<|vision_start|>`` per frame group) and are not counted yet
  (:class:`~vlmpack.models.base.MediaRuleError`).

Source: transformers 5.x ``models/qwen3_vl/processing_qwen3_vl.py`` and ``modeling_qwen3_vl.py``.
Qwen3.5 (``qwen3_5``) uses the same processor class but its own tokenizer (248k vocabulary) and
hybrid linear-attention text model; it is not registered until it has its own proof.
"""

from __future__ import annotations

from vlmpack.models.qwen2_vl import Qwen2VLFamily


class Qwen3VLFamily(Qwen2VLFamily):
    """Renderer, counter, encoder and training rules for one Qwen3-VL model directory (see the
    module docstring; everything else as :class:`Qwen2VLFamily`)."""

    name = "qwen3_vl"

    def rope_model_class(self) -> type:
        """transformers' ``Qwen3VLModel`` (``Qwen3VLMoeModel`` for ``qwen3_vl_moe``)."""
        if self.model_type == "qwen3_vl_moe":
            from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeModel
            return Qwen3VLMoeModel
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel
        return Qwen3VLModel
