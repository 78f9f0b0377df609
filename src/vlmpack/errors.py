"""The one exception hierarchy of vlmpack.

Every error a user can cause derives from :class:`VlmpackError`; messages say what went wrong,
where (file:line, shard/key) and how to fix it, on one line.
"""

from __future__ import annotations


class VlmpackError(Exception):
    """Base class of all vlmpack errors."""


class ConfigError(VlmpackError):
    """An invalid option, config file or model directory."""


class InputError(VlmpackError):
    """Input data that cannot be read at all (a missing input file, an unreadable archive)."""


class OverlongError(VlmpackError):
    """A sample longer than the capacity while ``overlong="error"`` was asked for."""


class RunDirError(VlmpackError):
    """An output/run directory that belongs to another config and would be mixed up."""


class PackMismatchError(VlmpackError):
    """Training side: a pack whose re-tokenized length or media disagrees with its recorded counts."""
