"""Output layouts ("sinks"): one module per layout behind one interface, and the registry that picks one.

A sink (:class:`vlmpack.sinks.base.Sink`) turns a pack's samples as the count stage serialized them
(:class:`vlmpack.packfmt.PackEntry`) into
its tar members, reads a pack object back from its parts and names the Energon files
(``dataset.yaml``, ``sample_loader.py``) the output ships. The shard writer
(:mod:`vlmpack.pack.write`) owns everything else: shard rollover, tar headers, ``.tar.idx``,
hashes, atomic files; :mod:`vlmpack.packfmt` groups a shard's members into packs.

Layouts (:data:`SINKS`): ``vlmpack`` (:mod:`vlmpack.sinks.vlmpack`, the ``vlmpack.pack/1``
format of docs/format.md).

Adding a layout: write ``vlmpack/sinks/<name>.py`` with a class that satisfies
:class:`~vlmpack.sinks.base.Sink` and add one line to :data:`SINKS` (CONTRIBUTING.md).
"""

from __future__ import annotations

from vlmpack.errors import ConfigError
from vlmpack.sinks.base import Sink
from vlmpack.sinks.vlmpack import VlmpackSink

#: The registry: layout name -> sink.
SINKS: dict[str, Sink] = {"vlmpack": VlmpackSink()}
#: The layout written when none is asked for.
DEFAULT_LAYOUT = "vlmpack"


def get_sink(name: str = DEFAULT_LAYOUT) -> Sink:
    """The sink of layout ``name``; :class:`ConfigError` for an unknown name."""
    try:
        return SINKS[name]
    except KeyError:
        raise ConfigError(f"unknown output layout {name!r}; use one of {', '.join(SINKS)}") from None


__all__ = ["DEFAULT_LAYOUT", "SINKS", "Sink", "get_sink"]
