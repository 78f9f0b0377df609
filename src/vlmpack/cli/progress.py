"""What ``check``, ``verify`` and ``inspect`` show while they work: progress bars on stderr (only on
a terminal, off with ``--no-progress``) and no warnings of the libraries they call (PIL,
transformers, torch, webdataset, Megatron) unless ``--verbose``."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator

import typer

#: Modules whose ``warnings.warn`` a command hides without ``--verbose`` (regex prefixes).
THIRD_PARTY = ("PIL", "transformers", "torch", "torchvision", "webdataset", "megatron", "numpy", "tokenizers")


class Bars:
    """Progress bars on stderr, one per label: call ``bars(label, advance, total)`` to advance the
    bar ``label`` by ``advance`` (``total``: its length, given when it is first seen, or None).
    Shown only when ``show`` and stderr is a terminal; use it as a context manager."""

    def __init__(self, show: bool) -> None:
        self.show = show and sys.stderr.isatty()
        self._bars: dict = {}

    def __call__(self, label: str, advance: int = 1, total: int | None = None) -> None:
        if not self.show:
            return
        bar = self._bars.get(label)
        if bar is None:
            from tqdm import tqdm

            bar = self._bars[label] = tqdm(total=total, desc=label, unit="pack", leave=False, file=sys.stderr,
                                           dynamic_ncols=True)
        elif total is not None and bar.total != total:
            bar.total = total
            bar.refresh()
        if advance:
            bar.update(advance)

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def progress_option():
    """The ``--progress/--no-progress`` option of ``check``, ``verify`` and ``inspect`` (see :class:`Bars`)."""
    return typer.Option(True, "--progress/--no-progress", help="progress bars on stderr (only on a terminal)")


def verbose_option():
    """The ``--verbose`` option of ``check``, ``verify`` and ``inspect`` (see :func:`library_warnings`)."""
    return typer.Option(False, "--verbose", help="also show the warnings of the libraries it calls (PIL, "
                        "transformers, torch, ...)")


@contextlib.contextmanager
def library_warnings(verbose: bool) -> Iterator[None]:
    """Inside: the ``warnings.warn`` of :data:`THIRD_PARTY` modules are dropped (in this process and
    the worker processes it forks), unless ``verbose``."""
    with warnings.catch_warnings():
        if not verbose:
            for name in THIRD_PARTY:
                warnings.filterwarnings("ignore", module=rf"{name}(\.|$)")
        yield
