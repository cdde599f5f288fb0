"""The exceptions gptviz raises on bad input. Each message says what is wrong and what to do.

Every class derives from GptvizError, so a caller (the dashboard, the CLI) can catch one type
and show the message instead of a traceback. They also derive from the built-in type a
Python programmer would expect (ValueError, OSError) so generic handlers keep working.
"""

from __future__ import annotations


class GptvizError(Exception):
    """Base of every error gptviz raises on purpose."""


class ConfigError(GptvizError, ValueError):
    """A GPTConfig field has a value the model family does not support."""


class PromptError(GptvizError, ValueError):
    """The input to a forward pass cannot be run: empty, too long, or ids outside the vocabulary."""


class UnknownCharacterError(PromptError):
    """The text holds characters the tokenizer has no token for."""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = ", ".join(repr(c) for c in chars)
        super().__init__(
            f"the tokenizer does not know {len(chars)} character(s): {shown}; "
            "remove them, or encode with unknown='drop' to leave them out"
        )


class TokenizerError(PromptError):
    """The `tokenizers` library failed on this text or this tokenizer (a panic in its Rust code,
    caught as one line), or the text is more than the tokenizer may read at once."""


class ArgumentError(PromptError):
    """An argument of a library call is out of its range: a count below 1, NaN, a float where an
    index goes (gptviz/checks.py). A PromptError too, which the checks before it raised."""


class CheckpointError(GptvizError, OSError):
    """A checkpoint file or directory cannot be loaded. The message names the file."""


class DeviceError(GptvizError, RuntimeError):
    """The requested device (cuda, mps) is not available on this machine, or cannot hold the model."""


class OutputError(GptvizError, OSError):
    """A result cannot be written where it was asked to go (a full disk, a missing folder)."""


def summarise(items: list[str], what: str, show: int = 3) -> str:
    """A list for a message, kept short whatever its length: "a, b" when there are few, else
    "16,000 keys missing, e.g. a, b, c". `what` names the items when they are counted."""
    items = [str(i) for i in items]
    if len(items) <= show:
        return ", ".join(items)
    return f"{len(items):,} {what}, e.g. {', '.join(items[:show])}"
