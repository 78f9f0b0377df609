"""One image-processor computation per pack in the every-image sweeps.

A sweep asks the same question twice of transformers' image processor for every pack: once in
vlmpack's collator (``family.process_images`` on the pack's images) and once in the reference
(the model's own ``*Processor`` on the same images). :func:`shared_preprocess` memoizes the
processor class's ``_preprocess`` -- the step that receives the decoded images as arrays and the
fully resolved options (size, resample, rescale, normalize, crop and patch settings) and does all
the pixel work -- on its exact arguments: the sha256 of every image array (shape and dtype too)
and the ``repr`` of every other argument except ``return_tensors``. A call whose images or
options differ in any way is computed afresh, so the memo never makes two computations agree;
the sweeps assert that every pack was a hit, which also proves that the collator resolved the
same options as the reference processor. The reference's images are the collator's own decode of
the same part bytes where it made one (:func:`reference_image`: one PNG/JPEG decode per image instead
of two, ~5 CPU-s a sweep); that vlmpack's decode gives the pixels of
``transformers.image_utils.load_image`` is asserted on every distinct demo image by
``test_validate.py::test_real_sizes_and_pixels_equal_load_image``.

Pixel values, beyond the first pack: a sweep asserts token counts and ids, which depend on the
images' sizes and the resolved options, never on pixel values (no sweep runs a model). So after
the first ``real_pixels`` computations (default 1: the first image pack of every sweep is computed
for real), the memo computes ``_preprocess`` with shape-true stand-ins for transformers' PIL-backend
pixel arithmetic (:func:`shape_only_pixels`: ``np_resize`` gives zeros of the size the real resize
gives, ``np_rescale`` and ``np_normalize`` hand their input back); everything else of
``_preprocess`` (tiling, patch counts, grids, padding) runs as it is, Qwen's ``patchify`` (the
pixels rearranged into patches) as a stand-in of the same shapes. While it computes
for real, the memo also computes with the stand-ins and asserts that both give the same keys,
shapes and non-pixel values, so the stand-ins are checked on every sweep. Pixel values are not what a
sweep checks: the collator calls the model's own image processor class, so its pixels are that
processor's once its inputs (the decoded images and the resolved options) are the reference's, which
the memo's key proves for every pack; a batch's ``pixel_values`` are compared with the processor's,
value for value, in ``test_train_collate.py`` (``test_pixel_values_in_sample_order_like_the_processor``).
(The stand-ins cut InternVL's sweep from about 190 s to 80 s.) A call that converts to tensors (the
collator's) gets a list of stand-ins of one shape as one read-only zero view of the stacked shape
(:func:`_stacked_zeros`), which ``torch.from_numpy`` takes as it is, instead of a new array filled
with zeros (InternVL's sweep: 10 CPU-s of kernel page clearing). Likewise numpy's ``pad`` and ``array``
of stand-ins in the processors that pad and stack each image's patches (:class:`_NumpyStandins`; the
LLaVA-NeXT sweep 61 -> 52 CPU-s, LLaVA-OneVision's with the OV2 layout tests 63 -> 57; SmolVLM's stacking of
padded images, 7.4 -> 1.6 s of its sweep).

Exact because each of these ``_preprocess`` methods (``GotOcr2ImageProcessorPil``,
``Qwen2VLImageProcessorPil``, ``LlavaOnevisionImageProcessorPil`` in transformers 5) ends in
``BatchFeature(data=..., tensor_type=return_tensors)`` with ``data`` independent of
``return_tensors``: the memo computes with ``return_tensors=None``, hands the first caller a copy of
the entry's dict and lists and the second the entry itself. The arrays are shared, not copied (a deep
copy cost InternVL's sweep 34 s of its 340): ``BatchFeature``'s tensor conversion copies them into
new tensors, and neither caller writes into its input arrays.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import io
import warnings
from dataclasses import dataclass, field

import numpy as np


def _digest(images) -> object:
    if isinstance(images, np.ndarray):
        return images.shape, images.dtype.str, hashlib.sha256(np.ascontiguousarray(images)).hexdigest()
    if isinstance(images, (list, tuple)):
        return tuple(_digest(x) for x in images)
    raise TypeError(f"_preprocess got images of type {type(images).__name__}; expected arrays")


@dataclass
class Memo:
    """Counts of the memoized calls; ``last`` is the data (before tensor conversion, without
    ``pixel_values``) of the latest call, e.g. ``num_patches`` per image for InternVL, which its
    processor does not return."""

    hits: int = 0
    misses: int = 0
    #: reference images that were the collator's own decode of the same bytes (:func:`reference_image`)
    shared_images: int = 0
    last: dict = field(default_factory=dict)
    _entries: dict = field(default_factory=dict)


def _zeros(shape: tuple, dtype=np.float32) -> np.ndarray:
    """Zeros of ``shape`` (float32 unless ``dtype``), as a read-only view of one zero (no memory,
    nothing to fill: a writable ``np.zeros`` of a resized image was a fifth of the SmolVLM sweep, its
    pages zeroed by ``calloc`` under the suite's malloc settings); a step that wrote into it would raise."""
    return np.broadcast_to(np.dtype(dtype).type(0), shape)


def patch_standins(image, patch_size: int, temporal_patch_size: int) -> tuple[np.ndarray, int, int]:
    """Shape-true stand-in of a Qwen-style ``patchify`` of a channel-first image ``[C, H, W]``:
    :func:`_zeros` ``[grid_h * grid_w, C * temporal_patch_size * patch_size**2]`` (the flat patch
    layout), ``grid_h``, ``grid_w``."""
    channel, height, width = image.shape
    grid_h, grid_w = height // patch_size, width // patch_size
    return _zeros((grid_h * grid_w, channel * temporal_patch_size * patch_size ** 2)), grid_h, grid_w


def _zero_view(x) -> bool:
    """Whether ``x`` is a stand-in of :func:`_zeros` (a read-only view of one zero)."""
    return (isinstance(x, np.ndarray) and not x.flags.writeable and not any(x.strides) and x.size > 0
            and not x.flat[0])


class _NumpyStandins:
    """numpy, as the ``np`` of the :data:`STANDIN_NUMPY_MODULES` while :func:`shape_only_pixels` runs,
    but where numpy would only fill a new array with zeros from :func:`_zero_view` stand-ins, a
    read-only zero view of the result's shape and dtype instead: ``concatenate`` on dim 0 of stand-ins
    of one row shape and dtype, ``pad`` of a stand-in with the constant 0, ``array`` of a list of
    stand-ins of one shape and dtype (:func:`_stacked_zeros`); anything else is numpy's own."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def concatenate(arrays, axis=0, **kwargs):
        arrays = list(arrays)
        if (axis == 0 and not kwargs and arrays and all(_zero_view(a) and a.ndim for a in arrays)
                and len({(a.shape[1:], a.dtype) for a in arrays}) == 1):
            return _zeros((sum(a.shape[0] for a in arrays), *arrays[0].shape[1:]), arrays[0].dtype)
        return np.concatenate(arrays, axis=axis, **kwargs)

    @staticmethod
    def pad(array, pad_width, mode="constant", **kwargs):
        if (mode == "constant" and set(kwargs) <= {"constant_values"} and not np.any(kwargs.get("constant_values", 0))
                and _zero_view(array)):
            widths = np.broadcast_to(np.asarray(pad_width, dtype=np.intp), (array.ndim, 2))  # numpy's own spelling
            if (widths >= 0).all():
                return _zeros(tuple(n + a + b for n, (a, b) in zip(array.shape, widths.tolist())), array.dtype)
        return np.pad(array, pad_width, mode=mode, **kwargs)

    @staticmethod
    def array(obj, *args, **kwargs):
        stacked = obj if args or kwargs else _stacked_zeros(obj)
        return stacked if stacked is not obj else np.array(obj, *args, **kwargs)


def _cat_padded_standin(original):
    """``vlmpack.models.generic_rules.cat_padded`` while :func:`shape_only_pixels` runs: tensors that are
    all zero stand-ins (strides 0, as ``torch.from_numpy`` makes of :func:`_zeros`) give one zero view of
    the result's shape and dtype (what the real one gives them: zeros) instead of a new tensor filled with
    zeros and copied into (the LLaVA-NeXT sweep: ~9 CPU-s); anything else goes to ``original``."""
    import torch

    def cat_padded(tensors):
        tensors = list(tensors)
        if len(tensors) > 1 and all(isinstance(t, torch.Tensor) and t.dim() and t.numel() and not any(t.stride())
                                    and not t[(0,) * t.dim()].item() and t.dtype == tensors[0].dtype
                                    and t.dim() == tensors[0].dim() for t in tensors):
            rest = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].dim())]
            return torch.zeros((), dtype=tensors[0].dtype).expand(sum(t.shape[0] for t in tensors), *rest)
        return original(tensors)

    return cat_padded


def _stacked_zeros(value):
    """A list of :func:`_zeros` stand-ins of one shape ``[*s]`` -> one read-only zero view
    ``[len, *s]``: what ``BatchFeature``'s tensor conversion makes of the list (``np.array`` of it,
    then ``torch.from_numpy``), without filling a new array of that size with zeros (10 of the 45
    CPU-s of InternVL's sweep, its pages faulted in and cleared by the kernel); a list of such lists
    (images per sample, as SmolVLM's processor stacks them) likewise, one level each. Anything else
    is returned as it is."""
    if isinstance(value, list) and value and all(isinstance(x, list) for x in value):
        inner = [_stacked_zeros(x) for x in value]
        return value if any(a is b for a, b in zip(inner, value)) else _stacked_zeros(inner)
    if not (isinstance(value, list) and value and all(isinstance(x, np.ndarray) for x in value)):
        return value
    first = value[0]
    if all(x.shape == first.shape and x.dtype == first.dtype and _zero_view(x) for x in value):
        return _zeros((len(value), *first.shape), first.dtype)
    return value


#: transformers modules whose image processors join, pad or stack per-image arrays with numpy (their
#: ``np`` is :class:`_NumpyStandins` while :func:`shape_only_pixels` runs): Qwen2-VL's and GLM-4.1V's
#: ``_preprocess`` (patches joined), LLaVA-NeXT's and LLaVA-OneVision's (each image's patches stacked,
#: padded to the best resolution and to the batch's largest patch count), SmolVLM's (each image padded by
#: ``image_transforms.pad`` to the batch's largest, then stacked per sample), and ``BatchFeature``'s
#: tensor conversion (a list of per-image arrays stacked before ``torch.from_numpy``)
STANDIN_NUMPY_MODULES = ("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
                         "transformers.models.glm4v.image_processing_pil_glm4v",
                         "transformers.models.llava_next.image_processing_pil_llava_next",
                         "transformers.models.llava_onevision.image_processing_pil_llava_onevision",
                         "transformers.models.smolvlm.image_processing_pil_smolvlm", "transformers.image_transforms",
                         "transformers.feature_extraction_utils")


#: vlmpack modules whose ``cat_padded`` (the generic family's collator joining each sample's processor tensors)
#: is :func:`_cat_padded_standin` while :func:`shape_only_pixels` runs
CAT_PADDED_MODULES = ("vlmpack.models.generic_rules", "vlmpack.models.generic")


@contextlib.contextmanager
def shape_only_pixels():
    """While the block runs, transformers' PIL-backend pixel arithmetic
    (``transformers.image_processing_backends.np_resize`` / ``np_rescale`` / ``np_normalize``, what
    ``PilBackend.resize`` / ``rescale`` / ``normalize`` call on channel-first arrays) is replaced by
    shape-true stand-ins: resize -> zeros ``[C, *size]``, float32 (the dtype the real rescale and
    normalize give, so nothing downstream converts), rescale and normalize -> the input itself;
    ``Qwen2VLImageProcessorPil.patchify`` (a rearrangement of those pixels) -> zeros
    ``[grid_h * grid_w, C * temporal_patch_size * patch_size**2]`` and the grid; the ``np`` of the
    :data:`STANDIN_NUMPY_MODULES` -> :class:`_NumpyStandins` (zero-filled results as one view), the
    ``cat_padded`` of the :data:`CAT_PADDED_MODULES` -> :func:`_cat_padded_standin`. Each replaced name gets
    back the value it had on entry."""
    import importlib

    import transformers.image_processing_backends as backends
    from transformers.image_utils import ChannelDimension
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    names = ("np_resize", "np_rescale", "np_normalize")
    saved = {n: getattr(backends, n) for n in names}
    patchify = Qwen2VLImageProcessorPil.__dict__["patchify"]
    joiners = {m: m.np for m in map(importlib.import_module, STANDIN_NUMPY_MODULES)}
    catters = {m: m.cat_padded for m in map(importlib.import_module, CAT_PADDED_MODULES)}

    def flat_patches(self, image, patch_size, merge_size, temporal_patch_size):
        return patch_standins(image, patch_size, temporal_patch_size)

    def resize(image, size, *args, data_format=None, input_data_format=None, **kwargs):
        assert data_format == input_data_format == ChannelDimension.FIRST, (data_format, input_data_format)
        return _zeros((image.shape[0], *size))  # float32: what rescale + normalize give

    def same(image, *args, **kwargs):
        return image

    for name, standin in zip(names, (resize, same, same)):
        setattr(backends, name, standin)
    Qwen2VLImageProcessorPil.patchify = flat_patches
    for module in joiners:
        module.np = _NumpyStandins()
    for module, original in catters.items():
        module.cat_padded = _cat_padded_standin(original)
    try:
        with warnings.catch_warnings():  # torch's once-only note on a tensor of a read-only view: nothing writes
            warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
            yield
    finally:
        for n, f in saved.items():
            setattr(backends, n, f)
        Qwen2VLImageProcessorPil.patchify = patchify
        for module, saved_np in joiners.items():
            module.np = saved_np
        for module, original in catters.items():
            module.cat_padded = original


def _same_but_pixels(real: dict, standin: dict) -> None:
    """``real`` and ``standin`` (two ``_preprocess`` data dicts) have the same keys, the same array
    shapes and nesting, and equal values wherever a value is not an array of pixels."""
    def walk(a, b, where):
        if isinstance(a, np.ndarray):
            assert isinstance(b, np.ndarray) and a.shape == b.shape, (where, getattr(b, "shape", b), a.shape)
            if not np.issubdtype(a.dtype, np.floating):  # integer arrays (grids, counts) are not pixels
                assert np.array_equal(a, b), where
        elif isinstance(a, (list, tuple)):
            assert isinstance(b, (list, tuple)) and len(a) == len(b), (where, len(a))
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        else:
            assert a == b, (where, a, b)

    assert real.keys() == standin.keys(), (sorted(real), sorted(standin))
    for k in real:
        walk(real[k], standin[k], k)


@contextlib.contextmanager
def shared_preprocess(*classes: type, real_pixels: int = 1):
    """Memoize ``cls._preprocess`` of each image processor class while the block runs; yields the
    :class:`Memo`. An entry is dropped at its first hit (each pack is asked twice), so at most
    one pack's pixels are held. The first ``real_pixels`` computations do the pixel arithmetic for
    real (and check the stand-ins against it); the later ones use :func:`shape_only_pixels`. The
    collator's image decodes (``vlmpack.train.pack_input.open_image``) are kept for its latest pack, for
    :func:`reference_image`."""
    from transformers.feature_extraction_utils import BatchFeature

    import vlmpack.train.pack_input as pack_input

    memo = Memo()
    saved = {cls: cls.__dict__["_preprocess"] for cls in classes}
    open_image = pack_input.open_image

    def wrap(cls, original):
        signature = inspect.signature(original)

        def _preprocess(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop("self")
            return_tensors = arguments.pop("return_tensors", None)
            images = arguments.pop("images")
            extra = arguments.pop("kwargs", {})
            key = (cls.__name__, _digest(images), repr(sorted({**arguments, **extra}.items())))
            data = memo._entries.pop(key, None)
            if data is None:  # the second caller gets the entry: this one gets its own dict and lists
                memo.misses += 1
                bound.arguments["return_tensors"] = None
                with shape_only_pixels():
                    standin = dict(original(*bound.args, **bound.kwargs))
                if memo.misses <= real_pixels:
                    real = dict(original(*bound.args, **bound.kwargs))
                    _same_but_pixels(real, standin)
                    standin = real
                data = memo._entries[key] = standin
                handed = {k: list(v) if isinstance(v, list) else v for k, v in data.items()}
            else:  # the entry's last use: handed over as it is
                memo.hits += 1
                handed = data
            memo.last = {k: copy.deepcopy(v) for k, v in data.items() if k != "pixel_values"}
            if return_tensors is None:  # the reference processor's call: it slices and joins the lists
                return BatchFeature(data=handed)
            # the collator's call, converted to tensors: stand-ins as one read-only view, no stacked copy
            # (torch warns once that a tensor of a read-only array must not be written; nothing writes)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
                return BatchFeature(data={k: _stacked_zeros(v) for k, v in handed.items()}, tensor_type=return_tensors)

        return _preprocess

    for cls, original in saved.items():
        cls._preprocess = wrap(cls, original)
    pack_input.open_image = _recording(open_image)
    _DECODED.clear()
    _MEMO[:] = [memo]
    try:
        yield memo
    finally:
        for cls, original in saved.items():
            cls._preprocess = original
        pack_input.open_image = open_image
        _DECODED.clear()
        _MEMO.clear()


#: the images the collator decoded for its latest pack while :func:`shared_preprocess` runs, by the sha256 of
#: their bytes (key ``"pack"``: that pack's name), and that block's :class:`Memo`
_DECODED: dict = {}
_MEMO: list = []


def _recording(open_image):
    """``vlmpack.train.pack_input.open_image`` (the collator's decode of a pack's image parts), keeping each
    image it decodes from bytes in :data:`_DECODED`; a new pack's first image clears the last pack's."""
    def recorded(obj, *, where=""):
        img = open_image(obj, where=where)
        if isinstance(obj, (bytes, bytearray, memoryview)):
            pack = where.split(" sample ", 1)[0]
            if _DECODED.get("pack") != pack:
                _DECODED.clear()
                _DECODED["pack"] = pack
            _DECODED[hashlib.sha256(obj).digest()] = img
        return img

    return recorded


def reference_image(blob: bytes):
    """``blob`` (an image part's bytes) as transformers' ``load_image`` decodes it, for a reference
    processor's call. Inside :func:`shared_preprocess`, the image the collator decoded from the same bytes
    for its latest pack, when it did (counted in :attr:`Memo.shared_images`): one decode for both sides,
    as vlmpack's ``open_image`` gives ``load_image``'s pixels (asserted on every distinct demo image:
    ``test_validate.py::test_real_sizes_and_pixels_equal_load_image``) and neither side writes into
    its images. Else ``load_image``'s own decode."""
    from PIL import Image
    from transformers.image_utils import load_image

    img = _DECODED.get(hashlib.sha256(blob).digest()) if _MEMO else None
    if img is not None:
        _MEMO[0].shared_images += 1
        return img
    return load_image(Image.open(io.BytesIO(blob)))


def blank_reference_image(blob: bytes):
    """A black RGB image of the size transformers' ``load_image`` gives ``blob`` (an image part's
    bytes; EXIF orientation applied), without decoding it: for a reference processor called under
    :func:`shape_only_pixels`, whose ids read the images' sizes only. The size is vlmpack's header probe
    (:func:`vlmpack.media.probe.probe_bytes`, the sizes a pack records), equal to ``load_image``'s on
    every distinct demo image (``test_validate.py::test_real_sizes_and_pixels_equal_load_image``)."""
    from PIL import Image

    from vlmpack.media.probe import probe_bytes

    info = probe_bytes(blob, "image")
    return Image.new("RGB", (info.width, info.height))


def pack_reference(proc, raw: dict, samples: list[dict], *, nested: bool = False) -> tuple[list[list], list]:
    """The reference for a pack's image samples: each sample's images decoded as transformers'
    ``load_image`` decodes the shard's parts (:func:`reference_image`), and ``proc`` (the model's own
    processor) called once on the samples' chat-template texts and images as one padded batch
    (``nested``: images grouped per sample, as LLaVA-OneVision's processor takes them; else one flat
    list in order). Returns the
    images per sample, the processor's output (``return_tensors=None``: lists and the image
    processor's own arrays) and each sample's ``input_ids`` (int ``[n]``) without padding."""
    images = [[reference_image(raw[m["part"]]) for m in s["media"]] for s in samples]
    texts = [proc.apply_chat_template([{"role": m["role"], "content": [
        {"type": "image"} if p["type"] == "image" else p for p in m["content"]]} for m in s["messages"]],
        tokenize=False) for s in samples]
    # return_tensors=None: the processor's ids are the same lists either way; its pixel_values stay the
    # per-image arrays the memo handed over instead of being stacked and concatenated once more (for
    # InternVL 60 of the sweep's 260 s), and nothing here reads them
    ref = proc(text=texts, images=images if nested else [im for x in images for im in x], return_tensors=None,
               padding=True)
    wants = [np.asarray(ids)[np.asarray(mask, dtype=bool)]
             for ids, mask in zip(ref["input_ids"], ref["attention_mask"])]
    return images, ref, wants


def assert_sample_encodes(fam, s: dict, tokens: list[int], want, batch_ids) -> None:
    """The assertions every sweep makes of one image sample ``s`` of a pack (its entry in the pack
    JSON): its media's recorded token counts are ``tokens`` (read from the reference ids), its
    recorded length is that of ``want`` (the reference processor's ids), the family's ``encode``
    gives ``want`` exactly, and so does the collator's slice ``batch_ids`` (int ``[n]``)."""
    where = f"sample {s['id']!r}"
    assert [m["num_tokens"] for m in s["media"]] == tokens, where
    assert s["num_tokens"] == len(want), where
    got = fam.encode(s["messages"], tokens, s.get("special_tokens"))
    assert np.array_equal(got, want), where
    assert np.array_equal(batch_ids, want), where


def assert_grid_pack(fam, key: str, batch: dict, at: list, images: list[list], ref: dict, wants: list) -> int:
    """The per-pack assertions of the every-image sweeps of the families whose processor returns
    ``image_grid_thw`` with a 2 x 2 merge (Qwen3-VL, Qwen3.5, GLM-4.1V: ``t * h * w // 4`` tokens an
    image): ``at`` holds each image sample of the pack as ``(pack-JSON entry, start, end)`` in the
    collator's ``batch``; ``images``, ``ref`` and ``wants`` are :func:`pack_reference`'s answer for
    those samples (``ref["image_grid_thw"]`` int ``[images, 3]`` in order). Each sample's image-token
    count is its grids' and :func:`assert_sample_encodes` holds; no grid is left over (``key``: the
    pack, for the message). Returns the number of images compared."""
    grids = iter((np.asarray(ref["image_grid_thw"]).prod(-1) // 4).tolist())  # per image, in order
    n_media = 0
    for j, (s, a, z) in enumerate(at):
        want = wants[j]
        tokens = [next(grids) for _ in images[j]]
        assert np.count_nonzero(want == fam.image_token_id) == sum(tokens), f"sample {s['id']!r}"
        assert_sample_encodes(fam, s, tokens, want, batch["input_ids"][0, a:z].numpy())
        n_media += len(images[j])
    assert next(grids, None) is None, key
    return n_media
