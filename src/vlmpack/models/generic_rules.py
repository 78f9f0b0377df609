"""Pure rules of the generic family (:mod:`vlmpack.models.generic`): calibration of the per-image
offset, the chat template's image string and label markers, the marker label scan, padded
concatenation of image tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vlmpack.errors import ConfigError

#: Blank image sizes of the calibration, ``(height, width)`` in pixels: tiny, square, tall, wide, large.
CALIBRATION_SIZES = ((12, 12), (224, 224), (500, 37), (480, 640), (900, 1500))


@dataclass(frozen=True)
class Calibration:
    """``offset``: the per-image constant ``k``; ``multi_image``: whether ``k`` also holds for two
    images in one turn; ``repeats``: whether the processor's ids are the text's ids with each
    placeholder repeated (LLaVA, LLaVA-NeXT, Qwen-VL: ``input_ids`` can be built without the
    processor); ``problem``: why the rule is not exact (then the family is refused), or ""."""

    offset: int
    multi_image: bool
    repeats: bool = False
    problem: str = ""


def num_image_tokens(processor, height: int, width: int) -> int:
    """``processor._get_num_multimodal_tokens(image_sizes=[(height, width)]).num_image_tokens[0]``:
    the tokens the processor counts for one image of that size in pixels (raises what it raises)."""
    return int(processor._get_num_multimodal_tokens(image_sizes=[(height, width)]).num_image_tokens[0])


def template_image_string(render: Callable[..., str]) -> str:
    """What the chat template writes for one ``{"type": "image"}`` part: the difference between a
    user turn rendered with and without an image before its text. :class:`ConfigError` when the
    template writes nothing for it."""
    a = render([{"role": "user", "content": [{"type": "text", "text": "XYZ"}]}])
    b = render([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "XYZ"}]}])
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    j = 0
    while j < min(len(a), len(b)) - i and a[-1 - j] == b[-1 - j]:
        j += 1
    out = b[i:len(b) - j]
    if not out:
        raise ConfigError("the chat template writes nothing for an image part")
    return out


def _conversations() -> list[tuple[list[dict], int]]:
    """The calibration conversations, with the number of images each holds."""
    def turn(role, *parts):
        return {"role": role, "content": [{"type": "image"} if p is None else {"type": "text", "text": p}
                                          for p in parts]}

    return [([turn("user", None, "What is shown?"), turn("assistant", "A picture.")], 1),
            ([turn("user", "Look:", None, "\n\nand say.\n"), turn("assistant", "\nIt is\n\nblank.")], 1),
            ([turn("user", "Two:", None, None, "Compare."), turn("assistant", "Alike.")], 2)]


def calibrate(family) -> Calibration:
    """Find ``k`` of ``len(input_ids) = len(tokenizer(text)) + sum(n_i + k)`` for ``family``'s
    processor (``family.processor``, ``family.render``, ``family.tokenize``) on blank RGB images of
    :data:`CALIBRATION_SIZES` in the conversations of :func:`_conversations` and in a raw text
    ``x<image string>y``, and check that the
    text put in place of an image placeholder starts and ends with an added token (where the
    processor reports it: ``return_text_replacement_offsets``). Never raises for a processor that
    disagrees: the reason goes to :attr:`Calibration.problem`."""
    from PIL import Image

    proc = family.processor
    added = [t for t in family.tokenizer.get_added_vocab() if t]
    single, multi, problems, repeats = set(), set(), [], True
    for h, w in CALIBRATION_SIZES:
        blank = Image.new("RGB", (w, h))
        try:
            n = num_image_tokens(proc, h, w)
        except Exception as e:  # noqa: BLE001 - a size the processor refuses is no calibration point
            problems.append(f"_get_num_multimodal_tokens refuses {w}x{h} ({type(e).__name__})")
            continue
        # the template's conversations, and a raw text (a processor that edits the whole text, such as
        # PaliGemma's "\n" appended after it, shows a k that depends on how the text ends)
        for conv, n_images in [*_conversations(), (None, 1)]:
            text = family.render(conv) if conv is not None else f"x{family.image_string}y"
            text_ids = np.asarray(family.tokenize([text])[0])
            want = len(text_ids)
            try:
                got_ids = np.asarray(proc(text=[text], images=[[blank] * n_images],
                                          **family.text_kwargs(text))["input_ids"][0])
            except Exception as e:  # noqa: BLE001
                first = str(e).splitlines()[0] if str(e) else ""
                return Calibration(0, False, problem=f"the processor fails on a blank {w}x{h} image "
                                                     f"({type(e).__name__}: {first})")
            got = len(got_ids)
            k = got - want - n_images * n
            per = (got - want) // n_images + 1  # copies of each placeholder, if the ids are repeats (0: removed)
            repeats = (repeats and (got - want) % n_images == 0 and per >= 0 and np.array_equal(
                np.repeat(text_ids, np.where(text_ids == family.image_token_id, per, 1)), got_ids))
            (single if n_images == 1 else multi).add(k if n_images == 1 else k / n_images)
        try:
            out = proc(text=[f"x{family.image_string}y"], images=[[blank]], return_text_replacement_offsets=True)
            for r in out["text_replacement_offsets"][0]:
                s = r["replacement"]
                if s and not (any(s.startswith(t) for t in added) and any(s.endswith(t) for t in added)):
                    problems.append("the text it puts in place of an image does not start and end with an added "
                                    f"token ({s[:20]!r}...{s[-20:]!r}), so it can merge with the text around it")
                    break
        except Exception:  # noqa: BLE001, S110 - not reported by this processor: the contexts above decide
            pass
    if len(single) != 1:
        problems.append(f"the tokens an image adds beyond _get_num_multimodal_tokens vary with the size or the text "
                        f"around it ({sorted(single)})")
    if problems:
        return Calibration(0, False, problem="; ".join(dict.fromkeys(problems)))
    k = int(single.pop())
    return Calibration(k, multi == {k}, repeats)


@dataclass(frozen=True)
class LabelMarkers:
    """Token ids of the assistant header (``head``, trailing whitespace removed), of that
    whitespace (``trail``, skipped when it follows as its own tokens) and the end-of-turn id."""

    head: tuple[int, ...]
    trail: tuple[int, ...]
    end_id: int


def label_markers(render: Callable[..., str], tokenizer, where: str) -> LabelMarkers:
    """The assistant header and end of turn of a chat template (see :mod:`vlmpack.models.generic`).
    :class:`ConfigError` when the template adds no generation prompt or no added token ends an
    assistant reply."""
    user = [{"role": "user", "content": [{"type": "text", "text": "U"}]}]
    plain = render(user)
    prompt = render(user, add_generation_prompt=True)
    header = prompt[len(plain):] if prompt.startswith(plain) else ""
    if not header.strip():
        raise ConfigError(f"{where}: the chat template adds no assistant header with add_generation_prompt, so the "
                          "assistant turns cannot be found for the labels")
    full = render(user + [{"role": "assistant", "content": [{"type": "text", "text": "XYZ"}]}])
    after = full[full.rindex("XYZ") + 3:] if "XYZ" in full else ""
    added = sorted((t for t in tokenizer.get_added_vocab() if t and after.lstrip().startswith(t)), key=len)
    if not added:
        raise ConfigError(f"{where}: no added token ends an assistant turn in the chat template ({after[:30]!r}), so "
                          "the labels cannot be found")
    core = header.rstrip()
    enc = lambda s: tuple(tokenizer(s, add_special_tokens=False)["input_ids"]) if s else ()  # noqa: E731
    return LabelMarkers(enc(core), enc(header[len(core):]), int(tokenizer.convert_tokens_to_ids(added[-1])))


def marker_label_mask(ids: np.ndarray, m: LabelMarkers) -> np.ndarray:
    """bool ``[n]``: True from after each ``m.head`` (and ``m.trail`` when it follows exactly) up to
    and including the next ``m.end_id``; to the end of ``ids`` when none follows."""
    ids = np.asarray(ids)
    n, h = len(ids), len(m.head)
    mask = np.zeros(n, dtype=bool)
    if n < h or not h:
        return mask
    windows = np.lib.stride_tricks.sliding_window_view(ids, h)
    starts = np.flatnonzero((windows == np.asarray(m.head)).all(axis=1)) + h
    ends = np.flatnonzero(ids == m.end_id)
    t = len(m.trail)
    for c in starts.tolist():
        if t and c + t <= n and tuple(ids[c:c + t].tolist()) == m.trail:
            c += t
        k = np.searchsorted(ends, c)
        stop = int(ends[k]) + 1 if k < len(ends) else n
        mask[c:stop] = True
    return mask


def cat_padded(tensors: Sequence):
    """``torch.cat`` on dim 0 of tensors whose other dims may differ: each placed at the start of
    every other dim of a zero tensor of the largest sizes (one copy; one tensor is returned as it
    is, tensors of equal shapes are concatenated)."""
    import torch

    tensors = list(tensors)
    if len(tensors) == 1:
        return tensors[0]
    rest = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].dim())]
    if all(list(t.shape[1:]) == rest for t in tensors):
        return torch.cat(tensors, dim=0)
    out = tensors[0].new_zeros([sum(t.shape[0] for t in tensors), *rest])
    row = 0
    for t in tensors:
        out[(slice(row, row + t.shape[0]), *(slice(0, n) for n in t.shape[1:]))] = t
        row += t.shape[0]
    return out
