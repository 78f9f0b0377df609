"""The one exception tree of vlmpack.

Every error a user can cause derives from :class:`VlmpackError`; messages say what went wrong,
where (file:line, shard/key) and how to fix it, on one line. Three families, decided by class,
never by message text:

- :class:`SampleError`: one record, one media item or one sample cannot be used. It carries
  ``reason``, a code of :data:`vlmpack.records.REASONS`, and ``detail`` (one line). At pack time
  it becomes a :class:`vlmpack.records.Rejection` with that reason; it never stops a run.
- :class:`FatalError`: the run cannot go on (a bad option, an unreadable input file, an output
  that belongs to another run). ``vlmpack.cli.main`` prints its one line and exits with
  ``exit_code`` (2; :class:`RunFailedError` 3).
- :class:`PackError`: training side, one pack (or unpacked sample) that cannot be trained on
  (its token count or media disagree with its record, an image that does not decode). The
  Energon task encoders turn it into Energon's ``SkipSample`` or ``FatalSampleError`` by their
  ``on_bad_pack`` policy (:mod:`vlmpack.energon.task_encoder`).

Anything else that escapes a command is an internal error (exit 70, see ``vlmpack.cli.main``);
:class:`InternalError` names the ones vlmpack raises itself (a broken invariant of its own state).
:class:`Interrupted` is a ``BaseException`` (signals).
"""

from __future__ import annotations


class VlmpackError(Exception):
    """Base class of all vlmpack errors."""


# ------------------------------------------------------------------------------ fatal (exit 2, 3)
class FatalError(VlmpackError):
    """An error that ends the command with one line; ``exit_code`` is the process exit status."""

    exit_code = 2


class ConfigError(FatalError):
    """An invalid option, config file or model directory."""


class InputError(FatalError):
    """Input data that cannot be read at all (a missing input file, an unreadable archive)."""


class OverlongError(FatalError):
    """A sample longer than the capacity while ``overlong="error"`` was asked for."""


class RunDirError(FatalError):
    """An output/run directory that belongs to another config and would be mixed up."""


class RunFailedError(FatalError):
    """A run that finished its stages but must not look like a success: more records rejected than
    ``--max-reject-fraction`` allows, or no sample packed (exit code 3)."""

    exit_code = 3


class StreamError(InputError):
    """A compressed input stream that is truncated or corrupt: ``reason`` (one line, e.g. ``"ends
    inside frame 2"``), ``codec`` and ``at`` (decompressed bytes produced before the break). The
    JSONL reader turns it into an :class:`InputError` line that names the file and the line."""

    def __init__(self, codec: str, reason: str, at: int) -> None:
        super().__init__(f"the {codec} stream {reason} at decompressed byte {at}")
        self.codec, self.reason, self.at = codec, reason, at


# ------------------------------------------------------------------------------ per sample
class SampleError(VlmpackError):
    """One record, media item or sample that cannot be packed: ``reason`` is a code of
    :data:`vlmpack.records.REASONS` (the rejection's reason), ``detail`` one line."""

    #: the reason code of a subclass raised without one
    default_reason = "wrong_type"

    def __init__(self, reason: str | None = None, detail: str = "") -> None:
        super().__init__(detail)
        self.reason = reason or self.default_reason
        self.detail = detail


class RecordError(SampleError):
    """A record that cannot become a sample (bad JSON, unknown schema, bad turns, ...)."""


class MediaError(SampleError):
    """A media item that cannot be used (missing, outside the media root, does not decode, ...)."""


class MediaRuleError(SampleError):
    """A media item the model's processor cannot take (e.g. aspect ratio > 200, a kind the family
    cannot count); a ``media_unsupported`` rejection. Raised as ``MediaRuleError(detail)``."""

    default_reason = "media_unsupported"

    def __init__(self, detail: str = "", reason: str | None = None) -> None:
        super().__init__(reason, detail)


class TemplateSplitError(SampleError):
    """The chat template changes the texts it is given (or a text holds the sentinel characters),
    so template tokens and user text cannot be told apart; a ``template_error`` rejection. Raised as
    ``TemplateSplitError(detail)``."""

    default_reason = "template_error"

    def __init__(self, detail: str = "", reason: str | None = None) -> None:
        super().__init__(reason, detail)


# ------------------------------------------------------------------------------ training side
class PackError(VlmpackError):
    """Training side: a pack (or unpacked sample) that cannot be trained on; the Energon task
    encoders skip it or stop (``on_bad_pack``)."""


class PackMismatchError(PackError):
    """A pack whose re-tokenized length or media disagree with its recorded counts."""


class PackTooLongError(PackError):
    """A pack with more tokens than its ``seq_len`` (the one it records, or the collator's); the
    message names the pack and the likely causes (a stale count cache, an edited output, another
    model directory)."""


class TokenIdError(PackError):
    """A pretokenized pack (``input_ids.npy``) whose ids are no 1-D integer array or lie outside
    the tokenizer's vocabulary (``0 <= id < len(tokenizer)``); the message names the pack."""


class MediaDecodeError(PackError):
    """An image or video of a pack (or of an unpacked sample) that cannot be opened or decoded;
    the message names the pack key, the sample id and the media part."""


# ------------------------------------------------------------------------------ internal (exit 70)
class InternalError(RuntimeError):
    """A broken invariant of vlmpack's own state (e.g. a planned pack whose counts sum above its
    capacity: a bug, or a run directory or count cache edited by hand). Deliberately no
    :class:`VlmpackError`: ``vlmpack.cli.main`` reports it as an internal error (one line, exit 70),
    never as a user error (exit 2)."""


# ------------------------------------------------------------------------------ signals
class Interrupted(BaseException):
    """SIGTERM received (SIGINT raises ``KeyboardInterrupt``); ``signum`` is the signal number.
    A ``BaseException`` so that no ``except Exception`` of a stage swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum
