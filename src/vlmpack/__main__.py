"""``python -m vlmpack`` = the ``vlmpack`` command."""

from vlmpack.cli import main

main()
