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


class RunFailedError(VlmpackError):
    """A run that finished its stages but must not look like a success: more records rejected than
    ``--max-reject-fraction`` allows, or no sample packed (exit code 3)."""


class Interrupted(BaseException):
    """SIGTERM received (SIGINT raises ``KeyboardInterrupt``); ``signum`` is the signal number.
    A ``BaseException`` so that no ``except Exception`` of a stage swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class MediaDecodeError(VlmpackError):
    """Training side: an image of a pack (or of an unpacked sample) that PIL cannot open or decode;
    the message names the pack key, the sample id and the media part."""
