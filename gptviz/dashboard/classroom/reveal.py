"""The reveal of a class-vs-model round (a predict slide with round = "probability"): the room's guesses
with the model's probability and log-probability of each, the room's score beside the model's own, and
where the logit lens first ranks the room's favourite and the model's answer, with one link to the
Logit lens page at the slide's prompt and its last position.

The numbers come from lessons.class_round, computed once per revealed poll for every session (the
tally is closed at the reveal, so its counts name the round)."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ...errors import GptvizError
from ...lessons import Lesson, Slide
from ...lessons.class_round import Round, check_guess, class_round, depth_line, round_table
from ...lessons.poll import GuessError
from ...tokenizers import encode_prompt
from .. import caches
from ..caches import ModelKey, RunKey, cached
from ..pages import page_file
from ..state import link_params
from ..widgets import plain
from . import live
from .lesson_check import model_key, slide_checkpoint, slide_prompt

Counts = tuple[tuple[str, int], ...]


def _run(slide: Slide, key: ModelKey):
    bundle = caches.bundle_for(key)
    if bundle.tokenizer is None:
        raise GptvizError(f"checkpoint {key.source!r} has no tokenizer: a lesson cannot give it a prompt")
    prompt = slide_prompt(slide, key.source)
    ids = encode_prompt(bundle.tokenizer, prompt, bundle.model.config.block_size, keep_last=True)
    return bundle, caches.run_trace(RunKey(key, tuple(ids)))


@cached(max_entries=64, show_spinner="Scoring the room's guesses…")
def scored(slide: Slide, key: ModelKey, counts: Counts) -> Round | str:
    """The round of a revealed poll, or the one line why it cannot be scored."""
    try:
        bundle, trace = _run(slide, key)
        with caches.FORWARD:
            return class_round(bundle.model, trace, bundle.tokenizer, counts)
    except GptvizError as e:
        return str(e).splitlines()[0][:300]


def guess_error(slide: Slide, key: ModelKey | None, text: str) -> str | None:
    """Why a student's guess is not one token of the slide's model (a character model's "ab"), or
    None when it is one (or the model cannot be had here: the poll still takes it)."""
    if key is None:
        return None
    try:
        bundle = caches.bundle_for(key)
    except GptvizError:
        return None
    if bundle.tokenizer is None:
        return None
    try:
        check_guess(bundle.tokenizer, bundle.model.config.vocab_size, text)
    except GuessError as e:
        return str(e)
    return None


def slide_key(slide: Slide) -> ModelKey | None:
    """The slide's model, as the slide's own content names it (lesson_check.model_key)."""
    return model_key(slide)


def room_rounds(lesson: Lesson, code: str | None, key_of: Callable[[Slide], ModelKey | None]) -> dict[int, Round]:
    """The room's guesses on each predict slide of a class (by slide index), scored: for the handout."""
    out: dict[int, Round] = {}
    if not code:
        return out
    for i, slide in enumerate(lesson.slides):
        if slide.page != "predict":
            continue
        snap = live.poll(code, live.poll_key(lesson, i))
        key = key_of(slide)
        r = scored(slide, key, snap.counts) if snap.answers and key is not None else None
        if isinstance(r, Round):
            out[i] = r
    return out


def lens_link(slide: Slide, r: Round) -> None:
    """One click to the Logit lens page at the slide's checkpoint, prompt and last position, following
    the room's favourite there (the lens page's own default is the model's answer)."""
    name = slide_checkpoint(slide)
    params = link_params(checkpoint=name, prompt=slide_prompt(slide, name), position=r.position)
    fav = next((d for d in r.depths if "favourite" in d.who and "answer" not in d.who), None)
    key = slide_key(slide)
    label = "Open the logit lens at this prompt ↗"
    if fav is not None and key is not None:
        tok = caches.bundle_for(key).tokenizer
        if tok is not None:
            params["target"] = tok.decode([fav.token_id])  # the text the lens page's box encodes to it
            label = f"Follow {fav.token!r} in the logit lens ↗"
    st.page_link(page_file("logit-lens"), label=label, query_params=params)


ROWS = 4  # the room's guesses a slide lists (the tally beside it shows up to ten)


def panel(slide: Slide, key: ModelKey | None, counts: Counts) -> Round | None:
    """The room's guesses with the model's numbers and the score, under the prompt; the Round (None
    when it cannot be scored: the line why is shown)."""
    if key is None:
        return None
    r = scored(slide, key, counts)
    if isinstance(r, str):
        st.caption(f"The round cannot be scored: {plain(r)}")
        return None
    with st.container(key="round_panel"):
        if r.guesses:
            st.table(round_table(r).head(ROWS).set_index("guess"))
        with st.container(key="round_score"):
            st.markdown(
                f"Room **{100 * r.score:.2f} %** · model **{100 * r.model_score:.2f} %**",
                help="The model's probability of each answer, averaged over the room's answers (a guess that "
                "is no token counts 0), beside the probability of the model's own top token",
            )
        more = len(r.guesses) - ROWS
        st.caption(
            "Score: the model's probability of each answer, averaged"
            + (f" ({more} more guess{'' if more == 1 else 'es'} on the chart)." if more > 0 else ".")
        )
    return r


def depths(slide: Slide, r: Round | None, link: bool = True) -> None:
    """Where the logit lens first ranks the favourite and the answer, and the link to see it there."""
    if r is None:
        return
    with st.container(key="round_depths"):
        for d in r.depths:
            st.markdown(plain(depth_line(d)))
        if link:
            lens_link(slide, r)
