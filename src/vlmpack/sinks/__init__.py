"""Output layouts ("sinks"): one module per layout behind one interface, and the registry that picks one.

A sink (:class:`vlmpack.sinks.base.Sink`) turns a pack's samples as the count stage serialized them
(:class:`vlmpack.packfmt.PackEntry`) into
its tar members, reads a pack object back from its parts and names the Energon files
(``dataset.yaml``, ``sample_loader.py``) the output ships. The shard writer
(:mod:`vlmpack.pack.write`) owns everything else: shard rollover, tar headers, ``.tar.idx``,
hashes, atomic files; :mod:`vlmpack.packfmt` groups a shard's members into packs.

Layouts (:data:`SINKS`): ``vlmpack`` (:mod:`vlmpack.sinks.vlmpack`, the ``vlmpack.pack/1``
format of docs/format.md), ``llava-ov2-captioning`` (:mod:`vlmpack.sinks.llava_ov2`,
LLaVA-OneVision-2's ``PackedCaptioningSample``), ``loongforge-mix-qa`` (:mod:`vlmpack.sinks.loongforge`,
LoongForge's ``packed_multi_mix_qa``); the trainers' layouts share :mod:`vlmpack.sinks.embedded`.
An output's layout is found by its ``.nv-meta/dataset.yaml`` (:func:`sink_of`).

Adding a layout: write ``vlmpack/sinks/<name>.py`` with a class that satisfies
:class:`~vlmpack.sinks.base.Sink` and add one line to :data:`SINKS` (CONTRIBUTING.md).
"""

from __future__ import annotations

from pathlib import Path

from vlmpack.config import PackConfig
from vlmpack.errors import ConfigError
from vlmpack.fsio import read_inside
from vlmpack.sinks.base import Sink
from vlmpack.sinks.llava_ov2 import LlavaOv2CaptioningSink
from vlmpack.sinks.loongforge import LoongForgeMixQASink
from vlmpack.sinks.vlmpack import VlmpackSink

#: The registry: layout name -> sink.
SINKS: dict[str, Sink] = {s.name: s for s in (VlmpackSink(), LlavaOv2CaptioningSink(), LoongForgeMixQASink())}
#: The layout written when none is asked for.
DEFAULT_LAYOUT = "vlmpack"


#: Layout names users ask for that no trainer reads as packs, and what to use instead.
NOT_LAYOUTS = {
    "llava-ov2-mix-qa": "LLaVA-OneVision-2's trainer reads offline-packed QA as a PackedCaptioningSample whose "
                        "samples it turns into MultiMixQASample conversations (OFFLINE_PACKING_BMR=1): use "
                        "--layout llava-ov2-captioning (their s4 writer's MultiMixQASample shards hold "
                        "PackedCaptioningSample fields, which that class cannot take)",
}


def get_sink(name: str = DEFAULT_LAYOUT) -> Sink:
    """The sink of layout ``name``; :class:`ConfigError` for an unknown name (with what to use
    instead for a name of :data:`NOT_LAYOUTS`)."""
    try:
        return SINKS[name]
    except KeyError:
        if name in NOT_LAYOUTS:
            raise ConfigError(f"--layout {name}: {NOT_LAYOUTS[name]}") from None
        raise ConfigError(f"unknown output layout {name!r}; use one of {', '.join(SINKS)}") from None


def check_layout(cfg: PackConfig) -> None:
    """:class:`ConfigError` (one line) for an unknown ``--layout``, ``--pretokenize`` with a layout
    that has no ids part, a layout of one kind per pack without ``--group-by-kind``, or a model
    whose family the layout's trainer does not render alike (``vlmpack pack`` checks it first)."""
    from vlmpack.models import model_type

    sink = get_sink(cfg.layout)
    if cfg.pretokenize and not sink.pretokenize:
        raise ConfigError(f"--pretokenize: layout {cfg.layout} has no input_ids part (its trainer tokenizes)")
    if sink.one_kind_per_pack and not cfg.group_by_kind:
        raise ConfigError(f"--layout {cfg.layout}: its trainer reads packs of one kind (text or image), "
                          "add --group-by-kind")
    problem = sink.model_problem(model_type(cfg.model))
    if problem is not None:
        raise ConfigError(f"--layout {cfg.layout}: {problem}")


def sink_of(out_dir: str | Path) -> Sink:
    """The layout of the output folder ``out_dir``: the sink whose ``dataset.yaml`` equals
    ``out_dir/.nv-meta/dataset.yaml`` byte for byte (compared, never imported or parsed); the
    default layout when that file is missing, unreadable or matches none (``vlmpack check`` then
    names the difference)."""
    try:
        data = read_inside(out_dir, ".nv-meta/dataset.yaml", 1 << 16)
    except (OSError, ValueError):
        return SINKS[DEFAULT_LAYOUT]
    for sink in SINKS.values():
        if sink.dataset_files()["dataset.yaml"] == data:
            return sink
    return SINKS[DEFAULT_LAYOUT]


__all__ = ["DEFAULT_LAYOUT", "SINKS", "Sink", "check_layout", "get_sink", "sink_of"]
