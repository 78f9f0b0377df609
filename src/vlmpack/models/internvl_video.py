"""InternVL videos (:class:`InternVLVideos`, a mixin of :class:`vlmpack.models.internvl.InternVLFamily`):
frames kept, token counts, ``input_ids`` and pixels.

Videos (``InternVLProcessor.replace_video_token`` with ``InternVLVideoProcessor``): the chat template
writes one ``<video>`` (the tokenizer's ``video_token``, a special added token) per video; the
video processor keeps ``F`` frames (every frame by default, ``do_sample_frames`` False; else its
``sample_frames``: :func:`vlmpack.models.frames_rule.internvl_frame_indices`, from the header's
frame count and average fps; settings from the model directory in transformers' order,
:func:`vlmpack.models.frames_rule.frame_settings`), each resized to one tile, and the processor
replaces ``<video>`` with ``"\n".join(f"Frame{i}: <img>" + "<IMG_CONTEXT>" * image_seq_length +
"</img>" for i in 1..F)``. That text is tokenized with the rest, so a video's media tokens
(:meth:`InternVLFamily.video_tokens`) are the replacement tokenized alone: ``F *
(image_seq_length + 2)`` plus the tokens of ``"Frame1: "`` and of each ``"\nFrame{i}: "``
(between ``</img>`` and ``<img>``, special tokens, so each is tokenized on its own), and
:meth:`InternVLFamily.num_tokens` adds what ``"Frame1: "`` changes when it joins the text right
before the video (back to the previous added token) into one piece. The model takes the frames as
``pixel_values`` tiles, merged with the images' tiles in text order (``InternVLProcessor.__call__``),
one tile's ``image_seq_length`` features per frame on the ``<IMG_CONTEXT>`` tokens: the collator
builds that with :mod:`vlmpack.models.frames_pixels` (:meth:`InternVLFamily.process_videos`,
:meth:`InternVLFamily.pack_media`).

Source: transformers 5.x ``models/internvl/processing_internvl.py`` and ``video_processing_internvl.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlmpack.errors import MediaRuleError
from vlmpack.models.base import MediaSize, ProcessedImages, ProcessedVideos
from vlmpack.models.frames_rule import SAMPLING_DEFAULTS, frame_settings, internvl_frame_indices

#: ``InternVLVideoProcessor``'s sampling defaults (class attributes, ``video_processing_internvl.py``).
VIDEO_DEFAULTS = {**SAMPLING_DEFAULTS, "initial_shift": True}


class InternVLVideos:
    """The video side of :class:`vlmpack.models.internvl.InternVLFamily` (module docstring). Needs
    the family's ``model_dir``, ``tokenizer``, ``image_seq_length``, ``tile_size``, the token ids
    and the caches ``_frames`` / ``_text_lens`` its ``__init__`` sets."""

    @property
    def video_config(self) -> dict:
        """``do_sample_frames``, ``num_frames``, ``fps``, ``initial_shift`` of the model directory's
        video processor (:func:`vlmpack.models.frames_rule.frame_settings` over :data:`VIDEO_DEFAULTS`)."""
        cfg = self.__dict__.get("_video_config")
        if cfg is None:
            cfg = self.__dict__["_video_config"] = frame_settings(self.model_dir, VIDEO_DEFAULTS)
        return cfg

    def _frames_uncached(self, frames: int, fps: float | None) -> int:
        return len(internvl_frame_indices(frames, fps, self.video_config))

    def video_frames(self, frames: int, fps: float | None) -> int:
        """Frames ``InternVLVideoProcessor`` keeps of a ``frames``-frame video at average ``fps``
        (:func:`vlmpack.models.frames_rule.internvl_frame_indices`). Raises :class:`MediaRuleError`."""
        return self._frames(int(frames or 0), fps)

    def _text_len(self, text: str) -> int:
        n = self._text_lens.get(text)
        if n is None:
            n = self._text_lens[text] = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return n

    @staticmethod
    def frame_prefix(i: int) -> str:
        """The text before frame ``i`` (from 0) in ``InternVLProcessor.replace_video_token``:
        ``"Frame1: "``, then ``"\\nFrame{i + 1}: "`` (the ``"\\n"`` join)."""
        return f"Frame{i + 1}: " if i == 0 else f"\nFrame{i + 1}: "

    def video_layout(self, media: MediaSize) -> int:
        """What :meth:`expand_videos` needs of a video beyond its token count: its kept frames ``F``."""
        if media.width <= 0 or media.height <= 0:
            raise MediaRuleError(f"invalid video size {media.width}x{media.height}")
        return self.video_frames(int(media.frames or 0), media.fps)

    def video_tokens(self, media: MediaSize) -> int:
        """Tokens of a video's replacement text tokenized alone: ``F * (image_seq_length + 2)`` +
        the frame prefixes (:meth:`frame_prefix`), ``F`` = :meth:`video_layout`. The frames are
        resized to one tile whatever their size, so only the frame count matters. Raises
        :class:`MediaRuleError` (no frames, a size of 0, a sampling the processor refuses)."""
        f = self.video_layout(media)
        return f * (self.image_seq_length + 2) + sum(self._text_len(self.frame_prefix(i)) for i in range(f))

    def _segment(self, ids: np.ndarray, p: int, floor: int = 0) -> int:
        """Start of the text piece that ends at ``ids[p]``: after the previous added token (the
        tokenizer splits the text at added tokens and tokenizes each piece alone), ``>= floor``."""
        added = self.__dict__.get("_added_ids")
        if added is None:
            added = self.__dict__["_added_ids"] = frozenset(int(k) for k in self.tokenizer.added_tokens_decoder)
        seg = p
        while seg > floor and int(ids[seg - 1]) not in added:
            seg -= 1
        return seg

    def _join_correction(self, ids: np.ndarray, p: int) -> int:
        """Tokens that ``"Frame1: "`` adds beyond its own when tokenized after the text right
        before the ``<video>`` at ``ids[p]``: ``len(tok(s + "Frame1: ")) - len(tok(s)) -
        len(tok("Frame1: "))``, ``s`` decoded from the ids since the previous added token."""
        seg = self._segment(ids, p)
        if seg == p:
            return 0
        s = self.tokenizer.decode(ids[seg:p].tolist(), clean_up_tokenization_spaces=False)
        first = self.frame_prefix(0)
        return self._text_len(s + first) - (p - seg) - self._text_len(first)

    def expand_videos(self, ids: np.ndarray, media_tokens: Sequence[int], layouts: Sequence,
                      special_tokens: str | None = None, kinds: Sequence[str] | None = None) -> np.ndarray:
        """int32 ``input_ids`` as ``InternVLProcessor`` builds them for ids with images and videos:
        an image as in :meth:`expand`; the j-th ``<video>`` replaced by ``layouts[j]`` = ``F`` frames
        (:meth:`video_layout`), each ``<img>`` + ``image_seq_length`` ``<IMG_CONTEXT>`` + ``</img>``
        after its tokenized prefix, the first prefix tokenized together with the text before the
        video (decoded back to the previous added token; ``special_tokens="split"``: with
        ``split_special_tokens``, as that text was). Length :meth:`num_tokens`. Raises
        ``ValueError`` when placeholders, media and layouts disagree."""
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.flatnonzero((ids == self.image_token_id) | (ids == self.video_token_id))
        if len(pos) != len(media_tokens):
            raise ValueError(f"{len(pos)} media placeholders in the ids for {len(media_tokens)} media items")
        tok = self.tokenizer

        def encode(text: str) -> list[int]:
            return tok(text, add_special_tokens=False, split_special_tokens=special_tokens == "split")["input_ids"]

        frame = [self.start_image_token_id] + [self.image_token_id] * self.image_seq_length + [self.end_image_token_id]
        out: list = []
        prev, vi = 0, 0
        for p, n in zip(pos.tolist(), media_tokens):
            if ids[p] == self.image_token_id:
                out += [ids[prev:p], [self.start_image_token_id], [self.image_token_id] * int(n),
                        [self.end_image_token_id]]
                prev = p + 1
                continue
            if vi >= len(layouts) or not layouts[vi]:
                raise ValueError(f"no frame layout for video {vi}")
            seg = self._segment(ids, p, prev)
            text = tok.decode(ids[seg:p].tolist(), clean_up_tokenization_spaces=False) if seg < p else ""
            out += [ids[prev:seg], encode(text + self.frame_prefix(0)), frame]
            for i in range(1, int(layouts[vi])):
                out += [encode(self.frame_prefix(i)), frame]
            vi += 1
            prev = p + 1
        out.append(ids[prev:])
        return np.concatenate([np.asarray(x, dtype=np.int64) for x in out]).astype(np.int32)

    # ------------------------------------------------------------------ pixels
    def process_videos(self, videos: Sequence) -> ProcessedVideos:
        """A pack's frames as ``InternVLVideoProcessor`` gives them (counted indices, one tile each):
        float32 ``[sum F, 3, 448, 448]``, grids ``(F, 1, 1)``, ``F * image_seq_length`` features on
        ``<IMG_CONTEXT>``: :func:`vlmpack.models.frames_pixels.process_frame_videos`."""
        from vlmpack.models.frames_pixels import process_frame_videos

        return process_frame_videos(self, videos, lambda n, fps: internvl_frame_indices(n, fps, self.video_config),
                                    self.tile_size, lambda f: f * self.image_seq_length)

    def pack_media(self, images: ProcessedImages, videos: ProcessedVideos, kinds: Sequence[str]):
        """Tiles and frames in one ``pixel_values``: :func:`vlmpack.models.frames_pixels.interleave_frames`."""
        from vlmpack.models.frames_pixels import interleave_frames

        return interleave_frames(images, videos, kinds)
