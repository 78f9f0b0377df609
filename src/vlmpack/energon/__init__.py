"""Everything that touches Megatron-Energon, behind one package (its API changes between majors).

- :mod:`vlmpack.energon.meta` writes the on-disk metadata (``.tar.idx``, ``.nv-meta/*``) from
  offsets recorded while writing; it never imports ``megatron.energon`` (not needed at pack time).
- :mod:`vlmpack.energon.sample` defines :class:`VlmpackPack`, the sample type Energon yields for
  one pack (imports ``megatron.energon``; needed at training time only).
- :mod:`vlmpack.energon.task_encoder` turns packs into model batches.
"""
