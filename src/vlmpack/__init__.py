"""vlmpack: padding-free packing of multimodal SFT data into Megatron-Energon shards.

Stages (one module each): ``readers`` -> ``validate`` -> ``measure`` -> ``packing`` ->
``writer`` + ``energon`` -> ``report``; ``pipeline`` runs them, ``cli`` is a thin layer over it.
The training side (collator, masks, mRoPE, TaskEncoders) lives in ``vlmpack.train``.
"""

__version__ = "0.1.0"
