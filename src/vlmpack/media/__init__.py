"""Media: references to image bytes wherever they live, header probing and decodability checks.

- :mod:`vlmpack.media.ref`: ``MediaRef`` strings (a local path, a tar member by offset, a Parquet
  cell, an LMDB key, inline ``data:`` bytes) and byte access on any of them.
- :mod:`vlmpack.media.image`: the image format allowlist and the decodability checks.
- :mod:`vlmpack.media.resolve`: resolving a reference found in a record (lexically) and the
  media-root rule with symlinks followed.
- :mod:`vlmpack.media.kinds`: the media kinds (image, video), one module each: member tag,
  extensions, header probe, training-side decoder.
- :mod:`vlmpack.media.probe`: probing a media file's header (size in pixels, orientation) and
  checking it decodes, with a bounded cache.
- :mod:`vlmpack.media.orientation`: an image's size after the EXIF orientation the training
  decoder applies (PNG chunks after the image data, XMP, TIFF tags), without decoding pixels.
"""
