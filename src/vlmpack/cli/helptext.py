"""How every command's ``--help`` reads: plain (click's layout, no rich table that cuts long option
names at 80 columns), arguments and option values named OUTPUT-style, defaults shown one way, ``(default: X)``.

:class:`HelpCommand` is the command class of every ``vlmpack`` command; :func:`choices` lists the
values of a config field that takes one of a fixed set.
"""

from __future__ import annotations

from typing import Any, get_args

from typer.core import TyperArgument, TyperCommand, TyperOption

from vlmpack.config import PackConfig


def choices(field: str) -> str:
    """The values a :class:`~vlmpack.config.PackConfig` ``Literal`` field takes, as ``a|b|c``."""
    return "|".join(get_args(PackConfig.model_fields[field].annotation))


def _shown(param: TyperOption) -> str | None:
    """The ``(default: X)`` text of ``param``'s default, or None where there is nothing to show (no
    default, an empty list, a plain flag that is off)."""
    value: Any = param.default
    if value is None or value == [] or value == ():
        return None
    if isinstance(value, bool):
        if param.is_flag and not param.secondary_opts and not value:
            return None
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


class HelpCommand(TyperCommand):
    """A typer command whose help shows each default as ``(default: X)`` at the end of the option's
    description (typer's own ``[default: X]`` off), and whose usage line names its arguments in
    upper case (``vlmpack check [OPTIONS] OUTPUT``), its options' values too (``--seq-len SEQ_LEN``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for p in self.params:
            if p.metavar is None and (isinstance(p, TyperArgument) or not getattr(p, "is_flag", False)):
                p.metavar = (p.name or "").upper()  # --seq-len SEQ_LEN, OUTPUT (argparse's convention)
            if not isinstance(p, TyperOption) or p.show_default is not True:
                continue
            p.show_default = False
            shown = _shown(p)
            if shown is not None and p.help and "(default: " not in p.help:
                p.help = f"{p.help} (default: {shown})"

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS]`` then each argument: ``OUTPUT``, ``[SOURCE]`` (optional), ``OUTPUTS...``."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if isinstance(p, TyperArgument):
                name = (p.metavar or "") + ("..." if p.nargs != 1 else "")
                pieces.append(name if p.required else f"[{name}]")
        return pieces
