"""The Generate page's bookkeeping: a generation's steps into the session's record, and why it ended."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ..generation import Generation
from .widgets import plain


def record(gen: dict, g: Generation) -> None:
    """Append each new token, its probability and its alternatives to the page's record `gen`."""
    for s in g.steps:
        gen["ids"].append(s.id)
        gen["probs"].append(s.prob)
        gen["top_ids"].append([i for i, _ in s.top])
        gen["top_probs"].append([p for _, p in s.top])


def say_why_stopped(g: Generation, display: Callable[[list[int]], list[str]]) -> None:
    """One line when fewer tokens came out than asked: the model's end-of-text token, or its context."""
    if g.stopped == "eos":
        eos = g.ids[-1]
        st.info(
            f"Generation stopped at the model's end-of-text token **{plain(display([eos])[0])}** (id {eos}) "
            f"after {len(g.steps)} token(s), as Hugging Face's generate does."
        )
    elif g.stopped:
        st.warning(f"Generation {g.stopped}.")  # gptviz's own sentence, no user text
