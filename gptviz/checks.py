"""Checking the numbers a caller passes to the library, where they enter: one sentence naming the
argument, never a wrong answer from a value that slipped through (a batch of -1 runs nothing) and
never a torch error from deep inside (a NaN count, a float where an index goes)."""

from __future__ import annotations

import math

import numpy as np

from .errors import ArgumentError


def whole(value: object, name: str, low: int | None = None, high: int | None = None) -> int:
    """value as an int in [low, high] (either bound may be None), or ArgumentError. A bool, a float
    (2.0 included: an index or a count is never a measurement) or text is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            raise ArgumentError(f"{name} must be at least {low}, got {value}")
        if low is None:
            raise ArgumentError(f"{name} must be at most {high}, got {value}")
        raise ArgumentError(f"{name} must lie in [{low}, {high}], got {value}")
    return value


def real(value: object, name: str, low: float | None = None, high: float | None = None) -> float:
    """value as a finite float in [low, high] (either bound may be None), or ArgumentError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ArgumentError(f"{name} must be a finite number, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ArgumentError(f"{name} must lie in [{low}, {high}], got {value}")
    return value
