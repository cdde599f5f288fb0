"""A real model's heatmap on a slide shows the tokens that matter: a window of at most ZOOM_TOKENS
positions around the highlight (or ending at the slide's position), so that on a projector a row is at
least 12 px tall and a highlighted cell's frame at least as wide. A 60-token map drawn whole in a 300 px
plot gives each row 5 px, and the class cannot find the cell the teacher points at.

The heads slide shows the slide's layer, each head a tile of HEAD_TOKENS positions; a features slide
BAR_TOKENS bars: the same window, as wide as the screen allows a bar of 12 px.

The window is square (queries and keys are the same positions) and keeps each position's own label
('index token'), so a class reads where in the prompt it is; the caption says which part is shown."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Highlight

ZOOM_TOKENS = 16  # positions a slide's heatmap shows: ≥ 12 px a row in the ~195 px plot of 1280 × 720
HEAD_TOKENS = 6  # positions each tile of the heads slide shows: two rows of tiles in ~185 px (1024 × 768)
BAR_TOKENS = 24  # bars a features slide shows: a bar ≥ 12 px wide in the ~400 px plot of 1024 × 768
AFTER = 2  # positions shown after the highlight's last (the mask's edge is part of the picture)


@dataclass(frozen=True)
class Window:
    lo: int  # first position shown
    hi: int  # one past the last
    T: int  # the prompt's positions

    @property
    def whole(self) -> bool:
        return self.lo == 0 and self.hi == self.T

    def square(self, a: np.ndarray) -> np.ndarray:
        """The window of a [T, T] matrix (queries and keys)."""
        return a[self.lo : self.hi, self.lo : self.hi]

    def highlight(self, h: Highlight | None) -> Highlight | None:
        """A highlight in the window's own positions (clamped to the prompt first, as slides do)."""
        if h is None:
            return None
        return Highlight(h.kind, tuple(min(a, self.T - 1) - self.lo for a in h.at))

    def note(self, keys: bool = True) -> str:
        """What the caption says of the window ('' when the map is whole); keys: the window is of an
        attention map, whose rows also weigh the keys before it."""
        if self.whole:
            return ""
        return f" Shown: positions {self.lo}–{self.hi - 1} of {self.T}." + (
            " Earlier keys hold the rest." if self.lo and keys else ""
        )


def window(T: int, highlight: Highlight | None, row: int, size: int = ZOOM_TOKENS) -> Window:
    """The positions to show: every one when T ≤ size; else `size` of them holding the highlight's
    positions (its row and column for a cell) with AFTER more after them where the prompt has them, or,
    without a highlight, ending just after `row` (the slide's position)."""
    if size >= T:
        return Window(0, T, T)
    wanted = [min(a, T - 1) for a in highlight.at] if highlight is not None else [min(row, T - 1)]
    hi = min(T, max(wanted) + 1 + AFTER)
    lo = max(0, hi - size)
    hi = min(T, lo + size)  # a window against the prompt's start is still `size` long
    if min(wanted) < lo:  # a cell whose row and column lie further apart than the window: its column first
        lo = max(0, min(wanted) - 1)
        hi = min(T, lo + size)
    return Window(lo, hi, T)
