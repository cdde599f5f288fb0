"""A teacher's own numbers for the tiny head: X, Wq, Wk and Wv written in a slide's TOML,

    [[slides]]
    page = "tiny-head"
    title = "Our own head"
    X  = [[1, 0], [0, 1], [1, 1]]       # T tokens × C features
    Wq = [[1, 0], [0, 1]]               # C × d_k
    Wk = [[1, 0], [0, 1]]               # C × d_k
    Wv = [[2, 0], [0, 2]]               # C × d_v

checked when the file loads: all four or none, each a rectangle of finite numbers no larger than
MAX_DIM × MAX_DIM (a slide a class reads, not a model), no number beyond ±MAX_ABS, and shapes that
multiply (X's columns are the weights' rows; Wq and Wk have as many columns as each other). An error
names the slide's line and the matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MATRICES = ("X", "Wq", "Wk", "Wv")
MAX_DIM = 8  # rows or columns of one matrix: 8 tokens, 8 features, d_k of 8
MAX_ABS = 1000.0  # a larger number makes the softmax a step, and the slide unreadable

Matrix = tuple[tuple[float, ...], ...]


class NumbersError(ValueError):
    """A matrix that cannot be used; the message says which and why (the caller adds the line)."""


@dataclass(frozen=True)
class Numbers:
    """The four matrices as tuples (hashable: the slide that holds them is a cache key)."""

    X: Matrix
    Wq: Matrix
    Wk: Matrix
    Wv: Matrix

    def as_dict(self) -> dict[str, Matrix]:
        return {"X": self.X, "Wq": self.Wq, "Wk": self.Wk, "Wv": self.Wv}

    @property
    def tokens(self) -> int:
        return len(self.X)


def _matrix(name: str, value) -> Matrix:
    shape = f"{name} must be a list of rows of numbers, e.g. {name} = [[1, 0], [0, 1]]"
    if not isinstance(value, list) or not value or not all(isinstance(r, list) and r for r in value):
        raise NumbersError(shape)
    if len(value) > MAX_DIM or any(len(r) > MAX_DIM for r in value):
        raise NumbersError(f"{name} is larger than {MAX_DIM} × {MAX_DIM}; a slide's matrix is read by a class")
    width = len(value[0])
    for i, row in enumerate(value):
        if len(row) != width:
            raise NumbersError(f"{name}: row {i} has {len(row)} numbers and row 0 has {width}; rows must agree")
        for x in row:
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise NumbersError(f"{name}: row {i} holds {x!r}"[:120] + "; only numbers")
            if not math.isfinite(x) or abs(x) > MAX_ABS:
                raise NumbersError(f"{name}: row {i} holds {x!r}; numbers from −{MAX_ABS:g} to {MAX_ABS:g} only")
    return tuple(tuple(float(x) for x in row) for row in value)


def parse_numbers(raw: dict) -> Numbers | None:
    """The slide's own X, Wq, Wk, Wv (raw: the slide's table), None when it gives none, or
    NumbersError when they are not four matrices whose shapes agree."""
    given = [m for m in MATRICES if m in raw]
    if not given:
        return None
    missing = [m for m in MATRICES if m not in raw]
    if missing:
        raise NumbersError(f"a tiny head's own numbers need X, Wq, Wk and Wv together; {missing[0]!r} is missing")
    m = {name: _matrix(name, raw[name]) for name in MATRICES}
    C = len(m["X"][0])
    for name in ("Wq", "Wk", "Wv"):
        if len(m[name]) != C:
            raise NumbersError(
                f"{name} has {len(m[name])} rows; it needs one per column of X ({C}), as X·{name} multiplies them"
            )
    if len(m["Wq"][0]) != len(m["Wk"][0]):
        raise NumbersError(f"Wq has {len(m['Wq'][0])} columns and Wk {len(m['Wk'][0])}; Q·Kᵀ needs them equal (d_k)")
    return Numbers(**m)
