"""SIGINT / SIGTERM for long runs: stop at once, and never lose the signal.

:func:`install` makes both signals raise :class:`vlmpack.errors.Interrupted` in the main thread
and remember that they came. Python ignores an exception raised inside ``os.fork``'s at-fork hooks
("Exception ignored in ... _releaseLock"), so a Ctrl-C that lands while a process pool forks its
workers would otherwise vanish and the run would go on; the stages call :func:`check` between
tasks (at least every :data:`POLL_S` seconds while they wait), which raises it again.
"""

from __future__ import annotations

import signal

from vlmpack.errors import Interrupted

#: Longest wait between two :func:`check` calls of a stage waiting for its tasks, in seconds.
POLL_S = 0.2
_pending: list[int] = []


def _handler(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    _pending.append(signum)
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to :class:`Interrupted` (main thread only)."""
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def check() -> None:
    """Raise :class:`Interrupted` if a signal came since :func:`install` (also one whose first
    exception was swallowed)."""
    if _pending:
        raise Interrupted(_pending[0])
