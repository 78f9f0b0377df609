"""``vlmpack verify``: re-derive every token count of an output from its shard bytes alone.

:func:`verify_output` runs the :mod:`vlmpack.check` gate (report, ``.nv-meta``, shard sha256 and
tar structure, ``.tar.idx``, completeness against the run, one Energon pass that decodes every
distinct media part) and then recounts, in parallel over shards, every sample from what the shard holds:

- each media part: its header is read from the part's bytes (width x height after EXIF
  orientation, :func:`vlmpack.media.probe.probe_bytes`) and must equal the recorded ``width`` /
  ``height``; its media tokens from the model family's rule
  (:meth:`vlmpack.models.base.ModelFamily.media_tokens`, given the header and the part's bytes,
  :class:`PartMedia`: a rule that reads more than the picture header, the sound track of a
  Qwen2.5-Omni video with ``use_audio_in_video``, probes it from the member as the count stage
  probed the file) must equal the recorded ``num_tokens``;
- each sample: the chat template + tokenizer count of its messages with those media tokens
  (:meth:`~vlmpack.models.base.ModelFamily.token_ids` + ``num_tokens``) must equal its recorded
  ``num_tokens``; every media part is referenced once;
- a pretokenized pack (``input_ids.npy``, :func:`vlmpack.packfmt.parse_input_ids`): every id lies in
  ``[0, len(tokenizer))`` (the rule of :class:`vlmpack.train.encode.PackEncoder`), the part holds
  the samples' recorded counts, and each sample's slice equals, id for id, its messages encoded
  again as the collator encodes a pack without ids (``token_ids`` then
  :meth:`~vlmpack.models.base.ModelFamily.expand`, or ``expand_videos`` with each video's layout
  from its header, as the writer built it), so an id replaced in place (same length) is found;
- ``decode=True``: each pack is also encoded by the training side's
  :class:`vlmpack.train.encode.PackEncoder` from decoded pixels through the model's image
  processor (the collator's own path), which must give the recorded counts.

The gate also compares every file and every sample's content sha256 with the run's record
(:mod:`vlmpack.check.content`): an edit that keeps every count (one character of an answer, an image
of the same size) is found there, not by the recount.

Every finding is one ``problem`` line (shard, pack key, sample id); nothing raises for a bad output.
Nothing the output holds is run and nothing outside it is read: the gate is :mod:`vlmpack.check`'s
(``.nv-meta`` as vlmpack writes it, Energon given vlmpack's own loader), the shards recounted are
the regular ``*.tar`` files of ``OUT`` (:func:`vlmpack.packfmt.shard_paths`), read by
:class:`vlmpack.packfmt.ShardPacks` (no member over its size limit) and
:func:`vlmpack.packfmt.parse_pack` (a crafted pack object is a problem line).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from vlmpack.errors import ConfigError, MediaError, MediaRuleError, VlmpackError
from vlmpack.fsio import read_inside
from vlmpack.media.kinds import MEDIA_TAGS
from vlmpack.media.probe import probe_bytes
from vlmpack.models import MediaSize
from vlmpack.pack.rundir import RUN_DIR
from vlmpack.packfmt import MemberTooLarge, ShardPacks, loads_json, parse_input_ids, shard_paths
from vlmpack.sinks import sink_of

__all__ = ["PartMedia", "recount_shard", "verify_output"]


@dataclass(frozen=True, slots=True)
class PartMedia(MediaSize):
    """A media part of a pack as the recount gives it to the family: the
    :class:`~vlmpack.models.base.MediaSize` of its header (``kind``, ``width`` x ``height`` pixels,
    ``duration_s`` seconds, ``fps``, ``frames``) and ``data``, the part's bytes (not copied), for a
    rule that reads more than that header (Qwen2.5-Omni with ``use_audio_in_video``: the video's
    sound track, :func:`vlmpack.models.qwen_omni_video.sound_track_tokens`, which takes an item's
    ``data`` as the count stage takes its file)."""

    data: bytes | None = field(default=None, repr=False, compare=False)


def _indexed(messages: list[dict], parts: list[str]) -> list[dict]:
    """Pack-JSON messages (media named by ``part``) -> canonical messages (media by ``index``; the
    turns' other fields, tool calls and reasoning, as they are)."""
    where = {p: i for i, p in enumerate(parts)}
    return [{**m, "content": [{"type": c["type"], "index": where[c["part"]]} if "part" in c else c
                              for c in m["content"]]} for m in messages]


def _stored_ids(data: bytes | None, counts: list, vocab: int, where: str, problems: list[str]):
    """The ids of a pack's ``input_ids.npy`` (None without one, or when unreadable); a problem line
    for ids outside ``[0, vocab)`` or a length other than the sum of the samples' recorded ``counts``
    (then None: the samples' slices are unknown)."""
    import numpy as np

    if data is None:
        return None
    try:
        ids = parse_input_ids(data)
    except ValueError as e:
        problems.append(f"{where}: input_ids.npy is {e}")
        return None
    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if len(bad):
        problems.append(f"{where}: input_ids.npy holds {len(bad):,} id(s) outside the tokenizer's vocabulary "
                        f"[0, {vocab:,}), the first {int(ids[bad[0]])} at token {int(bad[0])}")
    if len(ids) != sum(counts):
        problems.append(f"{where}: input_ids.npy holds {len(ids):,} ids but the samples record {sum(counts):,}")
        return None
    return ids


def _expected_ids(family, ids, media_tokens: list[int], sizes: list, special: str | None):
    """One sample's ``input_ids`` as the collator builds them without stored ids: the unexpanded
    ``ids`` of :meth:`~vlmpack.models.base.ModelFamily.token_ids` expanded with ``media_tokens``
    (``expand``; with videos ``expand_videos``, each video's layout from its header ``sizes``)."""
    import numpy as np

    kinds = [m.kind for m in sizes]
    if "video" not in kinds:
        return family.expand(np.asarray(ids, dtype=np.int32), media_tokens)
    layouts = [family.video_layout(m) for m in sizes if m.kind == "video"]
    return family.expand_videos(np.asarray(ids, dtype=np.int64), media_tokens, layouts, special, kinds=kinds)


def _compare_ids(stored, want, where: str) -> str | None:
    """A problem line when a sample's stored ids differ from ``want`` (the first differing token)."""
    import numpy as np

    want = np.asarray(want, dtype=np.int64)
    if len(stored) == len(want) and np.array_equal(stored, want):
        return None
    n = min(len(stored), len(want))
    diff = np.flatnonzero(np.asarray(stored[:n], dtype=np.int64) != want[:n])
    at = int(diff[0]) if len(diff) else n
    got = int(stored[at]) if at < len(stored) else "nothing"
    exp = int(want[at]) if at < len(want) else "nothing"
    return (f"{where}: input_ids.npy differs from its recorded messages encoded again ({len(stored):,} ids stored, "
            f"{len(want):,} encoded; first at token {at}: {got} stored, {exp} encoded)")


def _recount_media(family, s: dict, parts: dict, key: str, where: str, lines: list[str]) -> tuple[list[int], list]:
    """One sample's media items recounted from their parts (header, and the bytes for a rule that
    reads them: :class:`PartMedia`): ``(media tokens, PartMedia of each part that could be
    probed)``; a problem line in ``lines`` for each difference."""
    sid, media = s.get("id"), s.get("media", [])
    media_tokens: list[int] = []
    sizes: list = []
    n_images = sum(m.get("kind", "image") == "image" for m in media)
    for m in media:
        part = m.get("part")
        data = parts.get(part)
        if data is None:
            lines.append(f"{where} sample {sid!r}: media part {part!r} is missing")
            media_tokens.append(int(m.get("num_tokens") or 0))
            continue
        try:
            info = probe_bytes(data, m.get("kind", "image"), name=f"{key}.{part}")
            if (info.width, info.height) != (m.get("width"), m.get("height")):
                lines.append(f"{where} sample {sid!r} part {part}: the bytes are {info.width}x"
                             f"{info.height} pixels but {m.get('width')}x{m.get('height')} is recorded")
            sizes.append(PartMedia(m.get("kind", "image"), info.width, info.height, info.duration_s,
                                   info.fps, info.frames, data))
            n = family.media_tokens(sizes[-1], sample_images=n_images)
        except (MediaError, MediaRuleError) as e:
            lines.append(f"{where} sample {sid!r} part {part}: {e}")
            n = int(m.get("num_tokens") or 0)
        if n != m.get("num_tokens"):
            lines.append(f"{where} sample {sid!r} part {part}: {n} media tokens from its header, "
                         f"{m.get('num_tokens')} recorded")
        media_tokens.append(n)
    return media_tokens, sizes


def _unrendered(where: str, s: dict, e: Exception) -> str:
    """The problem line of a sample whose messages cannot be rendered again."""
    return f"{where} sample {s.get('id')!r}: cannot be re-rendered ({type(e).__name__}: {e})"


class _Recount:
    """Samples waiting for their text to be recounted, tokenized together (one batched
    :meth:`~vlmpack.models.base.ModelFamily.token_ids` call per :data:`BATCH` samples, the
    processor's batched call); each pack's problem lines keep the order of a sample-by-sample
    recount: every line of a sample, in sample order, then the pack's own lines."""

    BATCH = 256

    def __init__(self, family, problems: list[str]) -> None:
        self.family, self.problems = family, problems
        self.samples: list[tuple] = []  # (where, sample, messages, media tokens, sizes, stored ids, lines)
        self.packs: list[tuple[list[list[str]], list[str]]] = []  # per pack: its samples' lines, its own lines

    def add(self, where: str, s: dict, media_tokens: list[int], sizes: list, stored, lines: list[str]) -> None:
        try:
            msgs = _indexed(s["messages"], [m.get("part") for m in s.get("media", [])])
        except (KeyError, ValueError, TypeError) as e:
            lines.append(_unrendered(where, s, e))
            return
        self.samples.append((where, s, msgs, media_tokens, sizes, stored, lines))

    def end_pack(self, sample_lines: list[list[str]], pack_lines: list[str]) -> None:
        self.packs.append((sample_lines, pack_lines))
        if len(self.samples) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        """Tokenize the waiting samples, compare, and hand every finished pack's lines on."""
        batch, self.samples = self.samples, []
        try:
            all_ids = self.family.token_ids([b[2] for b in batch], [b[1].get("special_tokens") for b in batch],
                                            [b[1].get("tools") for b in batch])
        except Exception:  # noqa: BLE001 - whatever one sample's template raises: each alone, as before batching
            all_ids = [None] * len(batch)
        for (where, s, msgs, media_tokens, sizes, stored, lines), ids in zip(batch, all_ids):
            self._compare(where, s, msgs, media_tokens, sizes, stored, lines, ids)
        for sample_lines, pack_lines in self.packs:
            for lines in sample_lines:
                self.problems.extend(lines)
            self.problems.extend(pack_lines)
        self.packs = []

    def _compare(self, where, s, msgs, media_tokens, sizes, stored, lines, ids) -> None:
        sid = s.get("id")
        try:
            if ids is None:
                ids = self.family.token_ids([msgs], [s.get("special_tokens")], [s.get("tools")])[0]
            total = self.family.num_tokens(ids, media_tokens)
        except (KeyError, ValueError, TypeError, VlmpackError) as e:  # e.g. a template error on crafted text
            lines.append(_unrendered(where, s, e))
            return
        if total != s.get("num_tokens"):
            lines.append(f"{where} sample {sid!r}: {total} tokens recounted from the shard, "
                         f"{s.get('num_tokens')} recorded")
        if stored is None or len(sizes) != len(s.get("media", [])):  # no ids, or a media item without its header
            return
        start, stored = stored
        try:
            want = _expected_ids(self.family, ids, media_tokens, sizes, s.get("special_tokens"))
        except (ValueError, VlmpackError) as e:
            lines.append(f"{where} sample {sid!r}: cannot be encoded again ({type(e).__name__}: {e})")
            return
        line = _compare_ids(stored[start:start + s["num_tokens"]], want, f"{where} sample {sid!r}")
        if line:
            lines.append(line)


def recount_shard(shard: str, model_dir: str, decode: bool = False, processor: str = "", tick=None) -> list[str]:
    """Problem lines for one shard (see the module docstring); ``[]`` when every count holds.

    ``shard``: path of a ``vlmpack.pack/1`` tar; ``model_dir``: the model directory the output
    was packed with, ``processor`` its processor options (canonical JSON, :func:`recorded_run`).
    Never raises for bad shard content (an unreadable shard is one problem line).
    A pretokenized pack's ``input_ids.npy`` is compared with its samples encoded again (module
    docstring). The samples' texts are tokenized in batches (:class:`_Recount`). ``tick``:
    called with no argument after each pack (a progress bar), or None.
    """
    from vlmpack.models import load_model

    family = load_model(str(model_dir), processor)
    vocab = len(family.tokenizer)  # ids 0 .. len - 1, added tokens included (PackEncoder's rule)
    encoder = None
    if decode:
        from vlmpack.train.encode import PackEncoder

        encoder = PackEncoder(family)
    name = Path(shard).name
    sink = sink_of(Path(shard).parent)
    problems: list[str] = []
    recount = _Recount(family, problems)
    try:
        for pack in ShardPacks(shard):
            if tick is not None:
                tick()
            key, parts = pack.key, pack.parts
            where = f"{name} {key}"
            try:
                obj, parts = sink.read_pack(parts)
                samples = obj["samples"]
            except (KeyError, ValueError, TypeError) as e:
                recount.end_pack([], [f"{where}: no readable pack JSON ({type(e).__name__}: {e})"])
                continue
            ids_lines: list[str] = []  # before the samples' own lines, as a sample-by-sample recount finds them
            counts = [s.get("num_tokens") for s in samples]
            stored = _stored_ids(parts.get("input_ids.npy"), counts, vocab, where, ids_lines)
            sample_lines, pack_lines = [ids_lines], []
            for s, start in zip(samples, accumulate(counts, initial=0)):  # each field has its type (parse_pack)
                lines: list[str] = []
                media_tokens, sizes = _recount_media(family, s, parts, key, where, lines)
                recount.add(where, s, media_tokens, sizes, None if stored is None else (start, stored), lines)
                sample_lines.append(lines)
            referenced = sorted(m.get("part") for s in samples for m in s.get("media", []))
            media_parts = sorted(p for p in parts if p.startswith(MEDIA_TAGS))
            if referenced != media_parts:
                pack_lines.append(f"{where}: media parts {media_parts} but the samples reference {referenced}")
            if encoder is not None:
                try:
                    encoder.encode({**parts, "json": obj, "__key__": key})  # the pack object, whatever the layout
                except VlmpackError as e:
                    pack_lines.append(f"{where}: decoded pixels: {e}")
            recount.end_pack(sample_lines, pack_lines)
    except (OSError, tarfile.TarError, EOFError, MemberTooLarge) as e:
        recount.flush()
        problems.append(f"{name}: cannot be read to the end ({type(e).__name__}: {e})")
        return problems
    recount.flush()
    return problems


def recorded_run(out: Path) -> tuple[str | None, str]:
    """``(model directory, processor options)`` of the run recorded in ``out/.vlmpack/config.json``
    (read once, without following a link, size and nesting bounded): the model directory or None,
    and the processor options (:attr:`vlmpack.config.PackConfig.processor`) as the canonical JSON
    :func:`vlmpack.models.load_model` takes, ``""`` when none are recorded or the file cannot be
    read (the check then names it). Raises :class:`ConfigError` for recorded processor options
    that are not valid ones."""
    from vlmpack.config import processor_options
    from vlmpack.models.options import processor_json

    try:
        options = loads_json(read_inside(out, f"{RUN_DIR}/config.json", 64 << 20))["options"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, ""
    if not isinstance(options, dict):
        return None, ""
    model = options.get("model")
    return (model if isinstance(model, str) else None), processor_json(processor_options(options))


def verify_output(out_dir: str | Path, *, model: str | None = None, decode: bool = False, workers: int = 2,
                  run_dir: bool = True, progress=None) -> dict:
    """:func:`vlmpack.check.check_output` plus the recount of every shard (module docstring).

    ``model``: the model directory (default: the one recorded in ``OUT/.vlmpack/config.json``; its
    processors are built with the processor options recorded there, :func:`recorded_run`);
    ``workers``: processes for the recount. The gate's Energon pass runs in this process
    (``check_output(num_workers=0)``): it decodes the media here either way, so loader workers would
    add only their start and the pickling of every pack with its media across processes (on the demo
    output ``vlmpack check --workers 0`` took ~12 CPU-s and no more wall time against ~14 with 2).
    Returns check's dict with
    ``recounted_shards`` added; ``problems`` holds every finding. Raises :class:`ConfigError` only
    when no model directory is given or recorded. ``progress``: called ``progress(label, advance,
    total)`` per pack checked and recounted (:func:`~vlmpack.check.check_output`'s), for a progress bar.
    """
    from concurrent.futures import ProcessPoolExecutor

    from vlmpack.check import check_output

    out = Path(out_dir)
    recorded, processor = recorded_run(out)
    model = model or recorded
    if not model:
        raise ConfigError(f"{out}: no model directory recorded in {RUN_DIR}/config.json; pass --model DIR "
                          "(the one given to vlmpack pack)")
    res = check_output(out, num_workers=0, run_dir=run_dir, progress=progress)
    shards = [str(p) for p in shard_paths(out)]  # regular files only: a link is never followed
    tick = progress or (lambda label, advance, total: None)
    label, counts = "recount", res["shard_counts"] or {}
    tick(label, 0, sum(counts.values()) or None)
    if workers > 1 and len(shards) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(shards))) as pool:
            found = []
            for s, lines in zip(shards, pool.map(recount_shard, shards, [model] * len(shards),
                                                 [decode] * len(shards), [processor] * len(shards))):
                found.append(lines)
                tick(label, counts.get(Path(s).name, 0), None)
    else:
        found = [recount_shard(s, model, decode, processor, tick=lambda: tick(label, 1, None)) for s in shards]
    for lines in found:
        res["problems"].extend(lines)
    res["recounted_shards"] = len(shards)
    return res
