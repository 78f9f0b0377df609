"""``vlmpack inspect``: look at packs as the model will see them, label mask included.

A pack is read from its shard (:func:`find_packs`: by key, by sample id, or N at random with a
seed), each sample is encoded by the model family exactly as the collator does it
(:meth:`vlmpack.models.base.ModelFamily.encode` with the recorded media tokens, no pixels; a sample
with videos as ``--pretokenize`` and ``vlmpack verify`` encode it: ``token_ids`` +
:meth:`~vlmpack.models.base.ModelFamily.expand_videos` with each video's layout from the header of
its part's bytes, e.g. the grid that lays out a Qwen2.5-Omni video's sound-track runs with
``use_audio_in_video``) and split into runs of tokens: text trained on (labels,
:meth:`~vlmpack.models.base.ModelFamily.label_mask`), text not trained on, and media tokens (the
family's image, video and audio token ids). :func:`render_terminal` prints them with rich (label
tokens highlighted), :func:`render_html` writes one self-contained page with the images inline
and the label mask coloured.
"""

from __future__ import annotations

import base64
import bisect
import html
import itertools
import json
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlmpack.errors import ConfigError, InputError
from vlmpack.fsio import LinkRefused, read_inside
from vlmpack.packfmt import ShardPacks, compact_json, loads_json, parse_pack, shard_paths
from vlmpack.sinks import DEFAULT_LAYOUT, Sink, get_sink, sink_of

__all__ = ["InspectedSample", "find_packs", "inspect_pack", "render_html", "render_terminal"]

#: The most tokens of a pack :func:`inspect_pack` expands (a crafted count must not allocate more).
MAX_INSPECT_TOKENS = 1 << 24
_MAX_INFO_BYTES = 64 << 20  # .nv-meta/.info.json
_MIME = {"jpg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp", "bmp": "image/bmp",
         "tiff": "image/tiff"}


@dataclass
class InspectedSample:
    """One sample of a pack, encoded: ``runs`` are ``(kind, text)`` in token order with ``kind`` in
    ``"label"`` (trained on), ``"context"`` (labels -100) and ``"media"`` (``text`` names the part
    and its token count); ``num_tokens`` the encoded length (tokens), ``label_tokens`` how many
    are trained on; ``media`` the pack JSON's media entries (part, kind, width, height, num_tokens)."""

    id: str
    source: dict
    num_tokens: int
    recorded_tokens: int
    label_tokens: int
    media: list[dict]
    runs: list[tuple[str, str]]


def _canonical(sink: Sink, parts: dict[str, bytes | None]) -> dict[str, bytes | None]:
    """The parts of a pack of another output layout as the ``vlmpack`` layout names them: ``json``
    its pack object, each media part under the object's name (parts that hold no readable pack
    object are returned as they are)."""
    if sink.name == DEFAULT_LAYOUT or parts.get("json") is None:
        return parts
    try:
        obj, named = sink.read_pack(parts)
    except (KeyError, ValueError, TypeError):
        return parts
    return {**named, "json": compact_json(obj)}


def _shard_packs(path: Path, want=None):
    """``(key, {part: bytes})`` of the packs of one shard for which ``want(key, json bytes)`` is true,
    named as the ``vlmpack`` layout names them (:func:`_canonical`, the layout of the shard's output).
    Raises :class:`InputError` for a shard that cannot be read (corrupt tar, a member over its
    size limit, a symbolic link)."""
    sink = sink_of(path.parent)
    try:
        for pack in ShardPacks(path):
            parts = _canonical(sink, pack.parts)
            body = parts.get("json")
            if body is not None and (want is None or want(pack.key, body)):
                yield pack.key, parts
    except (tarfile.TarError, EOFError, ValueError) as e:  # MemberTooLarge is a ValueError
        raise InputError(f"{path}: cannot be read as a vlmpack shard ({' '.join(str(e).split())})") from None


def _holds_sample(body: bytes, sample: str) -> bool:
    """Whether the pack JSON ``body`` holds the sample id ``sample`` (a pack that is no pack
    object holds none)."""
    if json.dumps(str(sample)).encode() not in body:
        return False
    try:
        return any(str(s["id"]) == str(sample) for s in parse_pack(body)["samples"])
    except ValueError:
        return False


def _random_slots(out: Path, sizes: dict[str, int], n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` ``(shard name, pack index)`` drawn with ``seed`` over the packs ``.info.json`` counts
    (shards in name order), sorted; the same draw as ``random.Random(seed).sample`` of the list of
    every slot, without making that list. ``sizes``: the regular ``*.tar`` files of ``out`` (name ->
    bytes). Raises :class:`InputError` when ``.info.json`` cannot be read, names a shard that is not
    one of them, or counts more packs than its bytes can hold (a pack takes >= 512 bytes)."""
    rel = ".nv-meta/.info.json"
    try:
        counts = loads_json(read_inside(out, rel, _MAX_INFO_BYTES))["shard_counts"]
        if not isinstance(counts, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                   for v in counts.values()):
            raise ValueError("shard_counts is not an object of counts")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{out / rel} cannot be read ({' '.join(str(e).split())}); give --pack or --sample") from None
    if foreign := sorted(set(counts) - set(sizes)):
        raise InputError(f"{out / rel} names {foreign[0][:200]!r}, which is no shard file of {out} (a crafted or "
                         "edited output: run vlmpack check)")
    if over := sorted(name for name, c in counts.items() if c > sizes[name] // 512):
        raise InputError(f"{out / rel} counts {counts[over[0]]:,} packs in {over[0]}, more than its "
                         f"{sizes[over[0]]:,} bytes can hold (a crafted or edited output: run vlmpack check)")
    order = sorted(counts.items())
    bounds = list(itertools.accumulate(c for _, c in order))
    total = bounds[-1] if bounds else 0
    picked = random.Random(seed).sample(range(total), min(n, total))
    slots = []
    for j in picked:
        i = bisect.bisect_right(bounds, j)
        slots.append((order[i][0], j - (bounds[i - 1] if i else 0)))
    return sorted(slots)


def find_packs(out_dir: str | Path, *, pack: str | None = None, sample: str | None = None, random_n: int = 0,
               seed: int = 0) -> list[tuple[str, str, dict[str, bytes]]]:
    """``[(shard name, key, {part: bytes})]`` of the packs asked for: the pack ``pack``, the pack
    holding sample id ``sample``, or ``random_n`` packs drawn with ``seed`` over the counts of
    ``.info.json`` (default: the first pack). Only the regular ``*.tar`` files of OUT are read
    (:func:`vlmpack.packfmt.shard_paths`; a ``*.tar`` that is a symbolic link, or a name
    ``.info.json`` gives outside them, is refused). Raises :class:`InputError` when OUT has no
    shards, nothing matches, or a shard or ``.info.json`` cannot be read."""
    out = Path(out_dir)
    if links := sorted(p for p in out.glob("*.tar") if p.is_symlink()):
        raise InputError(f"{LinkRefused(links[0])} (a crafted or edited output: run vlmpack check)")
    shards = shard_paths(out)
    if not shards:
        raise InputError(f"{out} holds no shard (*.tar); give a vlmpack output directory")
    if pack is not None:
        want = lambda k, _: k == pack  # noqa: E731
    elif sample is not None:
        want = lambda _, body: _holds_sample(body, sample)  # noqa: E731
    else:
        want = None
    if random_n > 0:
        chosen = _random_slots(out, {p.name: p.stat().st_size for p in shards}, random_n, seed)
        found = []
        for name in sorted({s for s, _ in chosen}):
            idx = {i for s, i in chosen if s == name}
            found += [(name, k, p) for j, (k, p) in enumerate(_shard_packs(out / name)) if j in idx]
        return found
    for path in shards:
        for key, parts in _shard_packs(path, want):
            return [(path.name, key, parts)]
    what = f"pack {pack!r}" if pack is not None else f"sample id {sample!r}" if sample is not None else "a pack"
    raise InputError(f"{out}: no {what} in its shards")


def inspect_pack(parts: dict[str, bytes], model_dir: str, where: str = "pack", processor: str = ""
                 ) -> list[InspectedSample]:
    """Encode every sample of one pack (``parts``: the pack's tar parts) with the model family
    (built with the run's ``processor`` options, :func:`vlmpack.verify.recorded_run`).
    Raises :class:`ConfigError` for a model directory that cannot be loaded and
    :class:`InputError` (naming ``where``) for parts that hold no pack object
    (:func:`vlmpack.packfmt.parse_pack`), whose recorded counts do not add up within ``seq_len``
    (<= :data:`MAX_INSPECT_TOKENS`: the tokens are expanded in memory), or a sample with videos
    that cannot be encoded from its parts' headers (:func:`_sample_ids`)."""
    from vlmpack.models import load_model
    from vlmpack.verify import _indexed

    try:
        obj, parts = get_sink().read_pack(parts)
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"{where}: no readable pack object ({type(e).__name__}: {' '.join(str(e).split())})") \
            from None
    recorded = [s["num_tokens"] for s in obj["samples"]]
    if sum(recorded) != obj["num_tokens"] or obj["num_tokens"] > min(obj["seq_len"], MAX_INSPECT_TOKENS) or any(
            sum(m["num_tokens"] for m in s["media"]) > s["num_tokens"] for s in obj["samples"]):
        raise InputError(f"{where}: its recorded token counts do not add up within seq_len {obj['seq_len']} "
                         f"(at most {MAX_INSPECT_TOKENS:,}); run vlmpack check on the output")
    family = load_model(str(model_dir), processor)
    tok = family.tokenizer
    media_ids = {name: t for name in ("image", "video", "audio")
                 if (t := getattr(family, f"{name}_token_id", None)) is not None}
    out = []
    for s in obj["samples"]:
        media = s.get("media", [])
        msgs = _indexed(s["messages"], [m["part"] for m in media])
        ids = _sample_ids(family, s, msgs, parts, where)
        labels = family.label_mask(ids)
        is_media = np.isin(ids, list(media_ids.values()))
        kinds = np.where(is_media, 2, np.where(labels, 1, 0))
        bounds = list(np.flatnonzero(np.diff(kinds)) + 1) + [len(ids)]
        n_media_runs = sum(int(kinds[a]) == 2 for a in [0, *bounds[:-1]]) if len(ids) else 0
        runs, start, media_i = [], 0, 0
        for end in bounds if len(ids) else []:
            k = int(kinds[start])
            if k == 2:
                runs.append(("media", _media_run(ids[start:end], media_ids,
                                                 media[media_i]["part"] if n_media_runs == len(media) else None)))
                media_i += 1
            else:
                runs.append(("label" if k == 1 else "context", tok.decode(ids[start:end].tolist())))
            start = end
        out.append(InspectedSample(str(s["id"]), s.get("source", {}), int(len(ids)), int(s["num_tokens"]),
                                   int(labels.sum()), media, runs))
    return out


def _media_run(ids: np.ndarray, media_ids: dict[str, int], part: str | None) -> str:
    """The text shown for one run of media tokens: ``[part: n tokens]``, with the tokens of each
    kind when the run mixes kinds (a Qwen2.5-Omni video with its sound track: ``(v video + a
    audio)``); ``part`` None when the runs do not map one to one onto the sample's media items
    (a video laid out in several runs, Qwen3-VL's timestamps): ``[n media tokens]``."""
    per_kind = {name: int(np.count_nonzero(ids == t)) for name, t in media_ids.items()}
    mixed = [f"{n} {name}" for name, n in per_kind.items() if n]
    detail = f" ({' + '.join(mixed)})" if len(mixed) > 1 else ""
    return f"[{part}: {len(ids)} tokens{detail}]" if part is not None else f"[{len(ids)} media tokens{detail}]"


def _sample_ids(family, s: dict, msgs: list[dict], parts: dict[str, bytes], where: str) -> np.ndarray:
    """One sample's ``input_ids`` as the collator and ``--pretokenize`` build them from its recorded
    media tokens: :meth:`~vlmpack.models.base.ModelFamily.encode`, or, with videos, ``token_ids`` +
    ``expand_videos`` with each video's layout (:meth:`~vlmpack.models.base.ModelFamily.video_layout`)
    from the header of its part (:func:`vlmpack.media.probe.probe_bytes`; the same function as
    :func:`vlmpack.verify._expected_ids`). Raises :class:`InputError` (naming ``where`` and the
    sample) for a video part that is missing or does not probe, or recorded counts the expansion
    cannot lay out (e.g. a Qwen2.5-Omni video counted with fewer tokens than its grid's)."""
    from vlmpack.errors import MediaError, SampleError
    from vlmpack.media.probe import probe_bytes
    from vlmpack.verify import PartMedia, _expected_ids

    media = s.get("media", [])
    tokens, special, tools = [m["num_tokens"] for m in media], s.get("special_tokens"), s.get("tools")
    if not any(m.get("kind") == "video" for m in media):
        return np.asarray(family.encode(msgs, tokens, special, tools))
    sid = s.get("id")
    sizes = []
    for m in media:
        kind, data = m.get("kind", "image"), parts.get(m["part"])
        if kind != "video":
            sizes.append(PartMedia(kind, int(m.get("width") or 0), int(m.get("height") or 0)))
            continue
        if data is None:
            raise InputError(f"{where} sample {sid!r}: media part {m['part']!r} is missing; run vlmpack check")
        try:
            info = probe_bytes(data, "video", name=m["part"])
        except MediaError as e:
            raise InputError(f"{where} sample {sid!r} part {m['part']}: {' '.join(str(e).split())}") from None
        sizes.append(PartMedia("video", info.width, info.height, info.duration_s, info.fps, info.frames, data))
    try:
        ids = family.token_ids([msgs], [special], [tools])[0]
        return np.asarray(_expected_ids(family, ids, tokens, sizes, special))
    except (ValueError, SampleError) as e:
        raise InputError(f"{where} sample {sid!r}: cannot be encoded from its recorded counts "
                         f"({type(e).__name__}: {' '.join(str(e).split())}); run vlmpack verify") from None


def marked(chunk: str) -> str:
    """A trained (label) run marked without colour: ``[[text]]``, the brackets inside the run's
    leading and trailing white space (so ``]]`` never starts the next line)."""
    core = chunk.strip()
    if not core:
        return f"[[{chunk}]]"
    start = chunk.index(core)
    return f"{chunk[:start]}[[{core}]]{chunk[start + len(core):]}"


def render_terminal(shard: str, key: str, samples: list[InspectedSample], console=None, plain: bool = False) -> None:
    """Print one pack with rich: a table of its samples, then each sample's text with the trained
    tokens in bold green and media in cyan; ``plain``: no colours, the trained tokens between
    ``[[`` and ``]]`` (:func:`marked`), for a file or a pipe."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(no_color=plain, highlight=not plain)
    total = sum(s.num_tokens for s in samples)
    table = Table(title=f"{shard} {key}: {len(samples)} samples, {total:,} tokens")
    for col in ("id", "source", "tokens", "share", "label tokens", "media"):
        table.add_column(col)
    for s in samples:
        vals = list(s.source.values())
        src = f"{Path(str(vals[0])).name}:{vals[1]}" if len(vals) >= 2 else "-"
        media = ", ".join(f"{m['part']} {m.get('width')}x{m.get('height')} ({m['num_tokens']} tok)" for m in s.media)
        table.add_row(s.id, src, f"{s.num_tokens:,}", f"{100 * s.num_tokens / max(total, 1):.1f} %",
                      f"{s.label_tokens:,}", media or "-")
    console.print(table)
    for s in samples:
        text = Text(f"--- {s.id} ---\n", style="" if plain else "bold")
        for kind, chunk in s.runs:
            if plain:
                text.append(marked(chunk) if kind == "label" else chunk)
            else:
                text.append(chunk, style={"label": "bold green", "media": "cyan", "context": "dim"}[kind])
        console.print(text)


def render_html(packs: list[tuple[str, str, dict[str, bytes], list[InspectedSample]]], path: str | Path) -> Path:
    """Write one self-contained HTML page: per pack a table of its samples, their images inline
    (base64) and their text with the trained tokens on a green background. Returns ``path``."""
    esc = html.escape
    body = ["<h1>vlmpack inspect</h1>",
            "<p>Text on green is trained on (labels); grey text is context (labels -100); "
            "<span class=media>[imgN: n tokens]</span> marks the media tokens.</p>"]
    for shard, key, parts, samples in packs:
        total = sum(s.num_tokens for s in samples)
        body.append(f"<section class=pack id='{esc(key)}'><h2>{esc(shard)} {esc(key)}: {len(samples)} samples, "
                    f"{total:,} tokens</h2><table><tr><th>id</th><th>tokens</th><th>label tokens</th>"
                    "<th>media</th></tr>")
        for s in samples:
            body.append(f"<tr class=sample><td>{esc(s.id)}</td><td>{s.num_tokens:,}</td><td>{s.label_tokens:,}</td>"
                        f"<td>{len(s.media)}</td></tr>")
        body.append("</table>")
        for s in samples:
            body.append(f"<div class=sample-text id='{esc(key)}-{esc(s.id)}'><h3>{esc(s.id)}</h3>")
            for m in s.media:
                data = parts.get(m["part"])
                mime = _MIME.get(m["part"].rsplit(".", 1)[-1])
                if data is not None and mime:
                    body.append(f"<img alt='{esc(m['part'])}' title='{esc(m['part'])} {m.get('width')}x"
                                f"{m.get('height')}, {m['num_tokens']} tokens' "
                                f"src='data:{mime};base64,{base64.b64encode(data).decode()}'>")
            body.append("<pre>" + "".join(f"<span class={kind}>{esc(chunk)}</span>" for kind, chunk in s.runs)
                        + "</pre></div>")
        body.append("</section>")
    page = ("<!doctype html><meta charset=utf-8><title>vlmpack inspect</title><style>"
            "body{font-family:sans-serif;margin:2em}pre{white-space:pre-wrap;background:#fafafa;padding:.5em}"
            ".label{background:#c8f7c5}.context{color:#666}.media{color:#06c;font-weight:bold}"
            "img{max-height:160px;margin:4px;border:1px solid #ccc}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px}</style>" + "\n".join(body))
    out = Path(path)
    out.write_text(page, encoding="utf-8")
    return out


def model_of(out_dir: str | Path, model: str | None) -> str:
    """``model``, else the model directory recorded in ``OUT/.vlmpack/config.json``; raises
    :class:`ConfigError` when neither is there."""
    from vlmpack.verify import recorded_run

    found = model or recorded_run(Path(out_dir))[0]
    if not found:
        raise ConfigError(f"{out_dir}: no model directory recorded; pass --model DIR (the one given to vlmpack pack)")
    return found
