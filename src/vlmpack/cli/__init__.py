"""The ``vlmpack`` command line: a thin layer over the Python API (see :mod:`vlmpack.cli.main`)."""

from vlmpack.cli.main import app, main

__all__ = ["app", "main"]
