"""The Generate page's bookkeeping: a generation's steps into the session's record, and why it ended."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ...generation import Generation
from ..widgets import plain


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


def context_note(stuck: bool, room: int, block: int) -> None:
    """Why generation cannot go on (the text filled the context and sliding is off), or that it slides."""
    if stuck:
        st.info(
            f"The text has reached the model's context, block_size = {block} tokens: it reads no more, so "
            "generation stops here. Tick *Slide past block_size* to go on with its last tokens, Clear, or use a "
            "shorter prompt."
        )
    elif room < 0:
        st.info(
            f"The text is longer than the model's context, block_size = {block} tokens: each token past it was "
            f"predicted from the {block} tokens before it (a sliding window), and its attention rows cover only those."
        )


def text_pieces(tok, display: Callable[[list[int]], list[str]], ids: list[int]) -> list[str]:
    """Each id's text in the generated-text box: the tokenizer's own decoding (spaces and newlines as the
    model wrote them); an id the tokenizer cannot produce (a vocabulary padded past it, as nanoGPT pads
    GPT-2's to 50,304) by its shown name, where decoding gave nothing (or, for characters, failed)."""
    if tok is None:
        return [p + " " for p in display(ids)]
    return [tok.decode([i]) if i < tok.vocab_size else display([i])[0] for i in ids]


def prompt_text(tok, ids: list[int]) -> str:
    """The text "Use as prompt" puts in the sidebar: the ids the tokenizer can write (a padding id has no text)."""
    return tok.decode([i for i in ids if i < tok.vocab_size]) if tok is not None else ", ".join(map(str, ids))
