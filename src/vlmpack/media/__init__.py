"""Media: references to image bytes wherever they live, header probing and decodability checks.

- :mod:`vlmpack.media.ref`: ``MediaRef`` strings (a local path, a tar member by offset, a Parquet
  cell, an LMDB key, inline ``data:`` bytes) and byte access on any of them.
- :mod:`vlmpack.media.image`: the image format allowlist and the decodability checks.
- :mod:`vlmpack.media.probe`: resolving a reference found in a record and probing its header
  (size in pixels, orientation) with a bounded cache.
"""
