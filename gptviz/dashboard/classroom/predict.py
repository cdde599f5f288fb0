"""A "predict the next token" slide in a class: each follower sends a guess from their own page, the
teacher's screen shows the tally as it comes in, and the teacher reveals the model's distribution
beside it (the Reveal button, or the key r), which closes the poll and shows the answer to the class.

The tally lives with the class code (live.vote / live.poll / live.reveal); the teacher's screen reads
it from a small fragment every TALLY_POLL_S, so answers show up without anyone pressing anything and
without rerunning the slide. Guesses are anonymous: a voter is its browser (voters.browser_id, a hash
of Streamlit's cookie) or else a random token of its follower session (keys.POLL_VOTER), which no page
shows; one address gives at most voters.votes_per_address() answers to a poll.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd
import streamlit as st

from ... import figures
from ...lessons import Lesson, Slide
from ...lessons.content import FIGURE_HEIGHT, Content
from ...lessons.poll import MAX_GUESS_CHARS, GuessError, Snapshot, tally_figure, tally_table
from .. import keys
from ..sources.classmode import client_address
from ..widgets import CHART_CONFIG, plain
from . import live, reveal
from .lesson_check import slide_checkpoint, slide_prompt
from .voters import browser_id, votes_per_address

TALLY_CAPTION = "Blue: the share of the class's answers for each guess; orange, after Reveal: the model's probability."
TALLY_POLL_S = 0.5  # how often the teacher's tally looks for new answers: one small fragment of one session
REVEALED = "_poll_revealed"  # session key: polls this teacher revealed without a class (no code)
REVEALED_ROWS = 5  # the model's top tokens listed beside the tally (the chart shows PREDICT_K)
PROMPT_TAIL = 240  # characters of the prompt a slide shows: its end is what the class continues

# The prompt is what the class reads to guess: as large as a slide's numbers.
# Under a scored reveal it is smaller: the room's numbers need the place.
PROMPT_CSS = (
    "<style>.st-key-poll_prompt code { font-size: 1.5rem; line-height: 1.35; }"
    " .st-key-poll_prompt_small code { font-size: 1.1rem; line-height: 1.25; }"
    " .st-key-poll_prompt_small pre { padding: 0.4rem 0.8rem; }"
    " .st-key-round_score p { font-size: 1.3rem; margin-bottom: 0; }"
    " .st-key-round_depths p { font-size: 1rem; line-height: 1.25; margin-bottom: 0.15rem; }</style>"
)

# The key r presses Reveal on the teacher's page (as the clicker keys press Back / Next).
REVEAL_JS = """<script>
(() => {
  if (window.__gptvizReveal) return;
  window.__gptvizReveal = true;
  document.addEventListener("keydown", (e) => {
    if (e.key !== "r" || e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    const b = document.querySelector(".st-key-poll_reveal button");
    if (b && !b.disabled) { e.preventDefault(); b.click(); }
  }, true);
})();
</script>"""


@dataclass(frozen=True)
class At:
    """Where a predict slide is shown: the class code (None: nobody follows), the lesson and slide,
    and how to tell the followers (the teacher's side only)."""

    code: str | None
    lesson: Lesson
    index: int
    nudge: Callable[[str], None] | None = None

    @property
    def key(self) -> live.PollKey:
        return live.poll_key(self.lesson, self.index)


def model_top(table: pd.DataFrame | None) -> pd.DataFrame | None:
    """The slide content's table of the model's next tokens (content._predict) with numbers again."""
    if table is None:
        return None
    return pd.DataFrame({"token": table["token"], "probability": [float(p) for p in table["probability"]]})


def _prompt(slide: Slide, c: Content, tail: bool = True) -> None:
    """The prompt's end as text, and its last tokens as the model reads them (position: token; not
    under a scored round's reveal, whose numbers need the room)."""
    text = slide_prompt(slide, slide_checkpoint(slide))
    st.markdown("**What comes next?** The prompt ends:")
    st.html(PROMPT_CSS)
    with st.container(key="poll_prompt" if tail else "poll_prompt_small"):
        st.code(("…" if len(text) > PROMPT_TAIL else "") + text[-PROMPT_TAIL:], language=None, wrap_lines=True)
    if tail and c.prompt_tail is not None:
        st.table(c.prompt_tail)


NUDGE_AFTER = "_poll_nudge_after"  # session key: the followers are told once the teacher's reveal is drawn


def _reveal(at: At) -> None:
    if at.code:
        live.reveal(at.code, at.key)
        # the projector first: the followers' reruns, nudged now, would compete with the teacher's own
        st.session_state[NUDGE_AFTER] = True
    else:
        st.session_state.setdefault(REVEALED, set()).add(at.key)


def _revealed_here(at: At) -> bool:
    return at.key in st.session_state.get(REVEALED, set())


def teacher(slide: Slide, c: Content, at: At, presentation: bool) -> None:
    """The teacher's side: the prompt and Reveal (left), the class's tally, live (right)."""
    table = c.table
    snap = live.poll(at.code, at.key) if at.code else Snapshot((), 0, False, 0)
    revealed = snap.revealed or _revealed_here(at)
    scored = revealed and slide.round == "probability"
    left, right = st.columns([1, 1.3])
    with left:
        _prompt(slide, c, tail=not scored)
        if not at.code:
            st.caption("Start teaching and the class answers from their own pages; Reveal shows the model's answer.")
        if not scored:  # a scored round's reveal needs the room the button took
            st.button(
                "Reveal the model's answer (r)", key="poll_reveal", on_click=_reveal, args=(at,), disabled=revealed
            )
            st.html(REVEAL_JS, unsafe_allow_javascript=True)
        r = reveal.panel(slide, reveal.slide_key(slide), snap.counts) if scored else None
        if revealed and not scored and table is not None:
            st.table(table.head(REVEALED_ROWS).set_index("token"))
    with right:
        _tally(at, model_top(table), presentation, live_poll=bool(at.code) and not revealed)
        reveal.depths(slide, r)
        st.caption(TALLY_CAPTION)
    if st.session_state.pop(NUDGE_AFTER, False) and at.code and at.nudge is not None:
        at.nudge(at.code)


def _tally(at: At, top: pd.DataFrame | None, presentation: bool, live_poll: bool) -> None:
    @st.fragment(run_every=TALLY_POLL_S if live_poll else None)
    def tally() -> None:
        snap = live.poll(at.code, at.key) if at.code else Snapshot((), 0, False, 0)
        revealed = snap.revealed or _revealed_here(at)
        if live_poll and revealed:  # revealed from another of the teacher's tabs: stop polling
            st.rerun()
        draw_tally(snap, top if revealed else None, revealed, presentation)

    tally()


def draw_tally(
    snap: Snapshot, top: pd.DataFrame | None, revealed: bool, presentation: bool, key: str = "slide_figure"
) -> None:
    fig = figures.presentation(tally_figure(tally_table(snap, top), snap.answers, revealed), presentation)
    # on a projector the screen sets the height (slide_style's PRESENT_CSS); elsewhere beside the prompt
    fig.update_layout(height=None if presentation else FIGURE_HEIGHT)
    height: Literal["stretch", "content"] = "stretch" if presentation else "content"
    st.plotly_chart(fig, key=key, width="stretch", height=height, config=CHART_CONFIG)


def follower(slide: Slide, c: Content, at: At, presentation: bool) -> None:
    """A student's side: the prompt and their guess (picked or typed); once the teacher reveals,
    the class's tally beside the model's answer."""
    # one voter per browser (its tabs alike); a session of its own where the browser has no cookie
    voter = browser_id() or st.session_state.setdefault(keys.POLL_VOTER, secrets.token_urlsafe(12))
    snap = live.poll(at.code, at.key) if at.code else Snapshot((), 0, False, 0)
    mine = live.my_guess(at.code, at.key, voter) if at.code else None
    scored = snap.revealed and slide.round == "probability"
    left, right = st.columns([1, 1.3])
    with left:
        _prompt(slide, c, tail=not scored)
        if not snap.revealed and at.code:
            _guess_form(slide, at, voter)
            mine = live.my_guess(at.code, at.key, voter)
        if mine is not None:
            with st.container(key="poll_mine"):
                st.markdown(
                    f"Your guess: **{plain(mine)}**" + ("" if snap.revealed else " (send another to change it)")
                )
        if scored:  # a student's page has no tools row: the left column has the room
            reveal.depths(slide, reveal.panel(slide, reveal.slide_key(slide), snap.counts), link=False)
    with right:
        if snap.revealed:
            draw_tally(snap, model_top(c.table), True, presentation, key="follow_figure")
        else:
            st.info("Send your guess: the teacher's screen shows the class's answers, then the model's.")


def _guess_form(slide: Slide, at: At, voter: str) -> None:
    with st.form(f"poll_form_{at.index}", clear_on_submit=True, border=False):
        picked = None
        if slide.choices:
            picked = st.radio("Pick one", slide.choices, index=None, horizontal=True, key=f"poll_pick_{at.index}")
        typed = st.text_input(
            "…or type your guess" if slide.choices else "Your guess",
            key=f"poll_guess_{at.index}",
            max_chars=MAX_GUESS_CHARS,
            help="One token, as the model writes it (a space is ␣; a character model's token is one character)",
        )
        sent = st.form_submit_button("Send my guess", key=f"poll_send_{at.index}", type="primary")
    if sent and at.code:
        text = typed if typed.strip() or picked is None else picked
        wrong = reveal.guess_error(slide, reveal.slide_key(slide), text)
        if wrong is not None:  # a character model's "ab" names no token: it could never score
            st.error(plain(wrong))
            return
        try:
            live.vote(at.code, at.key, voter, text, client_address(), votes_per_address())
        except GuessError as e:
            st.error(plain(str(e)))
