"""The ``vlmpack`` command line as one click command, for the docs' CLI reference.

Loaded by mkdocs as a hook (``hooks:`` in ``mkdocs.yml``); it registers itself as the module
``cli_app`` so that ``docs/cli.md``'s ``::: mkdocs-click`` directive (``:module: cli_app``,
``:command: cli``) documents the commands from their own definitions, never a copy.

``:style: plain`` there: typer >= 0.29 builds its commands on a vendored copy of click, whose options
are not ``click.Option`` instances, so mkdocs-click's ``table`` style lists none of them; the plain
style prints each command's own ``--help`` option block.
"""

from __future__ import annotations

import importlib
import sys

import typer

#: the typer app of ``vlmpack`` (``vlmpack.cli`` exports a function ``main`` that shadows the module)
app = importlib.import_module("vlmpack.cli.main").app
#: its click group, as the ``vlmpack`` console script runs it
cli = typer.main.get_command(app)

sys.modules.setdefault("cli_app", sys.modules[__name__])
