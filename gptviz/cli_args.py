"""argparse types shared by every subcommand: each checks one kind of value where it enters, so a
bad one is argparse's one line ("error: argument --repeats: ...", exit 2) before any command runs.

A command line is bytes: on POSIX, Python hands bytes that are not UTF-8 over as lone surrogates,
which only fail later, deep inside a tokenizer; `text` refuses them here."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

THREADS_HELP = "torch CPU threads (default: one per core; OpenMP waits passively, so a busy core costs little)"


def _shown(text: str) -> str:
    return ascii(text) if len(text) <= 40 else ascii(text[:37]) + "…"


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in [low, high]: '--repeats 0' or '--batch-size 1.5' is refused."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {_shown(text)}") from None
        if value < low or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse


def number(low: float, *, above: bool = False) -> Callable[[str], float]:
    """A finite number >= low (> low with above=True): '--lr nan' or '--lr -1' is refused."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if above else '>='} {low:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def whole_list(low: int) -> Callable[[str], list[int]]:
    """Comma-separated whole numbers, each >= low, at least one: '--lengths -5' is refused."""
    one = whole(low)

    def parse(text: str) -> list[int]:
        values = [one(part) for part in text.split(",") if part.strip()]
        if not values:
            raise argparse.ArgumentTypeError("expected comma-separated whole numbers, got none")
        return values

    parse.__name__ = "list of whole numbers"
    return parse


def text(value: str) -> str:
    """Text that is valid UTF-8 (a prompt, a token): bytes that are not are refused, named by position."""
    bad = next((i for i, c in enumerate(value) if 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raw = value[bad].encode("utf-8", "surrogateescape") if 0xDC80 <= ord(value[bad]) <= 0xDCFF else b"?"
        raise argparse.ArgumentTypeError(
            f"is not valid UTF-8 text (byte {raw!r} at character {bad}); pass text in UTF-8"
        )
    return value


def path(value: str) -> str:
    """A file or folder name: any bytes the OS allows (not UTF-8 included), but never a NUL byte."""
    if "\0" in value:
        raise argparse.ArgumentTypeError("a path cannot contain a NUL byte")
    return value


PORT = whole(1, 65535)
