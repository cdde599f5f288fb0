"""The positions a page draws of a long prompt: a window the person moves, and a line saying which.

A context of 131,072 positions makes a prompt of 8,192 tokens ordinary, and a figure or table with a
row, a bar or a cell per position (or per pair of positions) more than a browser draws at once. A page
that draws per position asks for a window here: the whole prompt up to LONG positions (nothing drawn,
nothing said); past that, a "Positions shown" range (the last SHOW positions by default, or the ones
around the position the page is about), at most LONG wide, and a caption naming the window. Windowing
is about drawing: the numbers in the window are the run's, computed over the whole prompt (a loss, a
softmax over every key), never recomputed on the window alone.

    shown = window.positions(T, "qkv", around=v.position)    # a range of positions
    figures.matrix_heatmap(m[shown.start : shown.stop], labels[shown.start : shown.stop], ...)
"""

from __future__ import annotations

from typing import cast

import streamlit as st

LONG = 1024  # positions drawn whole; a longer prompt is drawn in a window at most this wide
SHOW = 512  # the window's width when the page opens on a long prompt


def default_window(T: int, around: int | None = None, width: int = SHOW) -> tuple[int, int]:
    """The first and last position of the window a page opens on: the last `width` positions, or, when
    `around` is given, the `width` positions ending a little after it (the position and what led to it)."""
    width = min(width, T)
    if around is None:
        return T - width, T - 1
    end = min(T - 1, max(around + width // 8, width - 1))
    return end - width + 1, end


def clamp(lo: int, hi: int, T: int, most: int = LONG) -> tuple[int, int]:
    """(lo, hi) inside [0, T - 1], in order, and at most `most` positions wide (its end kept)."""
    lo, hi = sorted((max(0, min(T - 1, int(lo))), max(0, min(T - 1, int(hi)))))
    return max(lo, hi - most + 1), hi


def caption(lo: int, hi: int, T: int) -> str:
    """'Positions 7,680–8,191 of 8,192 shown.' (the window's first and last position, 0-based)."""
    return f"Positions {lo:,}–{hi:,} of {T:,} shown."


def positions(T: int, key: str, around: int | None = None, what: str = "positions", width: int = SHOW) -> range:
    """The positions this page draws: range(T) for a prompt of up to LONG positions; else a window the
    person sets with a range slider (key: its widget key), at most LONG wide, captioned. `around`: the
    position the page is about (the chosen query): when it changes to one outside the window, the window
    moves to it; else the window stays where the person put it.
    width: the window's width when the page opens (a costly step per position opens on fewer)."""
    if T <= LONG:
        return range(T)
    state, followed = f"window_{key}", f"window_{key}_around"
    held = st.session_state.get(state)
    if not (isinstance(held, tuple) and len(held) == 2 and all(isinstance(p, int) and 0 <= p < T for p in held)):
        held = None
    moved = around is not None and st.session_state.get(followed) != around  # a position chosen since
    if held is None or (moved and around is not None and not held[0] <= around <= held[1]):
        st.session_state[state] = default_window(T, around, width)
    st.session_state[followed] = around
    lo, hi = cast(
        tuple[int, int],
        st.slider(
            f"Positions shown (a window of at most {LONG:,} of the {T:,} {what})",
            0,
            T - 1,
            key=state,
            help="A long prompt is drawn a window at a time; the numbers are the whole run's.",
        ),
    )
    wide = abs(hi - lo) + 1 > LONG
    lo, hi = clamp(lo, hi, T)
    st.caption(caption(lo, hi, T) + (f" At most {LONG:,} at once: the window ends at {hi:,}." if wide else ""))
    return range(lo, hi + 1)
