"""The orientation red team of issue 19 item 11, part of the media corpus of :mod:`hostile_corpus`
(``media/orient/`` of its run, accepted classes) and of ``test_orientation.py``: one image per place
an EXIF orientation can hide, which the size probe must read as the training decoder does."""

from __future__ import annotations

import io
import zlib

from hostile_corpus import _png_chunk, _png_chunks
from PIL import Image


def _with_chunks(png: bytes, before: list[tuple[bytes, bytes]] = (), after: list[tuple[bytes, bytes]] = ()) -> bytes:
    """``png`` with chunks inserted before its first ``IDAT`` and after its last (before ``IEND``)."""
    body, seen = b"", False
    for kind, data in _png_chunks(png):
        if kind == b"IDAT" and not seen:
            body += b"".join(_png_chunk(*c) for c in before)
            seen = True
        if kind == b"IEND":
            body += b"".join(_png_chunk(*c) for c in after)
        body += _png_chunk(kind, data)
    return png[:8] + body


def _exif(orientation: int | None) -> bytes:
    exif = Image.Exif()
    exif[0x0131] = "vlmpack red team"  # Software: an EXIF block with or without an orientation
    if orientation is not None:
        exif[0x0112] = orientation
    return exif.tobytes()


def _xmp(orientation: int, element: bool = False) -> bytes:
    tag = (b"<tiff:Orientation>%d</tiff:Orientation>" % orientation if element else b"")
    attr = b"" if element else b' tiff:Orientation="%d"' % orientation
    return (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/"%s>%s</rdf:Description></rdf:RDF>'
            b"</x:xmpmeta>" % (attr, tag))


def _raw_profile(orientation: int) -> bytes:
    """ImageMagick's ``Raw profile type exif`` text: newline, name, length, hex lines."""
    data = _exif(orientation)
    hexed = "\n".join(data.hex()[i:i + 72] for i in range(0, len(data) * 2, 72))
    return f"\nexif\n{len(data):8}\n{hexed}\n".encode()


def orientation_media(real_png: bytes) -> dict[str, tuple[bytes, int]]:
    """The red-team images of issue 19 item 11, one per place an EXIF orientation can hide (name ->
    (file bytes, the orientation the construction intends ``exif_transpose`` to apply)), built from
    a 300x180 crop of ``real_png`` (deterministic for a given Pillow/libjpeg/libwebp). PNG chunks
    after ``IDAT`` are only read by ``load()``; TIFF applies tag 274 itself; a second ``eXIf``
    replaces the first. The name's extension is the format's."""
    rgb = Image.open(io.BytesIO(real_png)).convert("RGB").resize((300, 180))
    buf = io.BytesIO()
    rgb.save(buf, "PNG")
    png = buf.getvalue()
    raw = b"Raw profile type exif\0"
    xmp_key = b"XML:com.adobe.xmp\0"
    out = {
        "png_xmp_attr_itxt_after_idat.png": (_with_chunks(png, after=[(b"iTXt", xmp_key + b"\0\0\0\0" + _xmp(6))]), 6),
        "png_xmp_element_text_after_idat.png": (_with_chunks(png, after=[(b"tEXt", xmp_key + _xmp(8, True))]), 8),
        "png_raw_profile_ztxt_after_idat.png": (_with_chunks(png, after=[
            (b"zTXt", raw + b"\0" + zlib.compress(_raw_profile(6)))]), 6),
        "png_raw_profile_text_after_idat.png": (_with_chunks(png, after=[(b"tEXt", raw + _raw_profile(5))]), 5),
        "png_second_exif_after_idat.png": (_with_chunks(png, [(b"eXIf", _exif(1))], [(b"eXIf", _exif(6))]), 6),
        "png_second_exif_resets_after_idat.png": (_with_chunks(png, [(b"eXIf", _exif(6))], [(b"eXIf", _exif(1))]), 1),
        "png_two_exif_after_idat.png": (_with_chunks(png, after=[(b"eXIf", _exif(7)), (b"eXIf", _exif(1))]), 1),
        "png_exif_after_idat.png": (_with_chunks(png, after=[(b"eXIf", _exif(8))]), 8),
        "png_exif_1_beats_xmp_after_idat.png": (_with_chunks(png, [(b"eXIf", _exif(1))], [
            (b"iTXt", xmp_key + b"\0\0\0\0" + _xmp(6))]), 1),
        "png_exif_without_tag_xmp_after_idat.png": (_with_chunks(png, [(b"eXIf", _exif(None))], [
            (b"iTXt", xmp_key + b"\0\0\0\0" + _xmp(6))]), 6),
    }
    buf = io.BytesIO()  # an animated PNG: load() of frame 0 reads the chunks up to the next fcTL only
    rgb.save(buf, "PNG", save_all=True, append_images=[rgb.transpose(Image.Transpose.ROTATE_180)])
    apng = _png_chunks(buf.getvalue())  # IHDR acTL fcTL IDAT fcTL fdAT IEND
    frame2 = next(i for i, (k, _) in enumerate(apng) if k == b"fdAT")
    for name, at, o in (("png_apng_exif_after_idat.png", frame2 - 1, 6),
                        ("png_apng_exif_after_next_frame_after_idat.png", frame2 + 1, 1)):
        chunks = [*apng[:at], (b"eXIf", _exif(6)), *apng[at:]]
        out[name] = (buf.getvalue()[:8] + b"".join(_png_chunk(k, d) for k, d in chunks), o)
    for fmt, ext in (("TIFF", "tiff"), ("JPEG", "jpg"), ("WEBP", "webp")):
        for o in (5, 6, 7, 8):
            buf = io.BytesIO()
            rgb.save(buf, fmt, **({"tiffinfo": {0x0112: o}} if fmt == "TIFF" else {"exif": _exif(o)}))
            out[f"{ext}_orientation_{o}.{ext}"] = (buf.getvalue(), o)
        buf = io.BytesIO()
        rgb.save(buf, fmt, **({"tiffinfo": {700: _xmp(6)}} if fmt == "TIFF" else {"xmp": _xmp(6)}))
        out[f"{ext}_xmp_orientation_6.{ext}"] = (buf.getvalue(), 6)
    return out
