"""Lessons in the dashboard: which lesson and slide a session is on (?lesson=NAME&slide=N, slides
counted from 1), the slide drawn to fit a projector (its input beside its result, the note large),
Back / Next and the keys a clicker sends, and the class code followers open.

What a slide shows, and the slide drawn, are slide_view.py's; the follower's page is follow.py's.
"""

from __future__ import annotations

import logging
import re

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ...lessons import Lesson, LessonError, handout, shipped_lesson
from .. import keys
from ..sources.classmode import client_address
from ..widgets import plain
from . import blackout, join, lesson_return, live, predict, reveal
from .follow import nudge
from .lesson_check import check_lesson, model_key
from .slide_style import CLICKER_JS, counter_html
from .slide_view import draw, prepare, slide_content
from .voters import browser_id, is_reserved

log = logging.getLogger("gptviz.dashboard")
LESSON_KEY = keys.LESSON  # session key of the open Lesson (a small frozen record, no tensors)
SLIDE_KEY = keys.SLIDE
CODE_KEY = keys.CLASS_CODE
TEACH_KEY = keys.TEACH_KEY
LIST_KEY = "slide_list"  # the slide list's container; its widget is list_key(i) on slide i (0-based)
HEARTBEAT_S = 60.0  # how often an idle teacher's page tells the registry it is still there
_INT = re.compile(r"[0-9]{1,3}")


def read_lesson_url() -> None:
    """Open ?lesson=NAME at ?slide=N (from 1) on the session's first run, from a link while no lesson
    is open, or when the browser's Back / Forward brings another lesson or slide than the one this
    session wrote.

    Otherwise a URL that differs from the one written is stale, not a link: Next pressed twice
    quickly sends its second press before the first one's new URL reaches the browser, with the URL
    of the slide before; read as a link, it sent the teacher back and both presses seemed lost."""
    _read_teacher_key()
    name, slide = st.query_params.get("lesson"), st.query_params.get("slide")
    written = st.session_state.get(keys.LESSON_WRITTEN)
    if name is None or (name, slide) == written or (written is not None and not _history_navigation()):
        return
    lesson = st.session_state.get(LESSON_KEY)
    if lesson is None or lesson.name != name or lesson.origin != "shipped":
        try:
            lesson = shipped_lesson(name)
            check_lesson(lesson)
        except LessonError as e:
            st.session_state[keys.LESSON_ERROR] = str(e)
            return
    st.session_state[LESSON_KEY] = lesson
    n = len(lesson.slides)
    st.session_state[SLIDE_KEY] = min(int(slide), n) - 1 if slide and _INT.fullmatch(slide) and int(slide) else 0


def _history_navigation() -> bool:
    """Whether this run comes from the browser's Back / Forward. Streamlit has no public call for it:
    if its run context ever lacks the flag, every URL is read as before (True)."""
    ctx = get_script_run_ctx()
    return ctx is None or bool(getattr(ctx, "is_history_navigation", True))


def _read_teacher_key() -> None:
    """A reloaded or reopened teacher's tab (?teach=KEY in its URL): take the class back, its code,
    and its lesson and slide as the class sees them (an uploaded lesson too: no file to open again).
    A key whose class has ended is dropped from the URL, with a word on the lesson page."""
    key = st.query_params.get("teach")
    if not key or key == st.session_state.get(TEACH_KEY):
        return
    found = live.resume(key[:64])
    if found is None and is_reserved(key):  # the server's teacher link: its class starts past every bound
        made = live.start(client_address(), browser_id(), key)
        found = made[0] if isinstance(made, tuple) else None
    if found is None:
        st.query_params.pop("teach", None)
        st.session_state[keys.LESSON_ERROR] = "the class of that teacher link has ended; start teaching again"
        return
    st.session_state[TEACH_KEY] = key
    if isinstance(found, str):  # the class is between lessons
        st.session_state[CODE_KEY] = found
        return
    st.session_state[CODE_KEY] = found.code
    if found.lesson is not None:
        st.session_state[LESSON_KEY], st.session_state[SLIDE_KEY] = found.lesson, found.slide
        st.session_state[keys.LESSON_WRITTEN] = (st.query_params.get("lesson"), st.query_params.get("slide"))


def write_lesson_url(lesson: Lesson, i: int) -> None:
    """The lesson and slide in the URL (an uploaded lesson has no name a link could open)."""
    if lesson.origin != "shipped":
        return
    wanted = (lesson.name, str(i + 1))
    if (st.query_params.get("lesson"), st.query_params.get("slide")) != wanted:
        st.query_params["lesson"], st.query_params["slide"] = wanted
    st.session_state[keys.LESSON_WRITTEN] = wanted


def open_lesson(lesson: Lesson) -> None:
    """Open a lesson in this session; LessonError (its line) if a slide asks for what its model lacks."""
    check_lesson(lesson)
    st.session_state[LESSON_KEY] = lesson
    st.session_state[SLIDE_KEY] = 0


def close_lesson() -> None:
    """Close the lesson; a class being taught keeps its code, and its followers wait for the next."""
    code = st.session_state.get(CODE_KEY)
    if code:
        live.pause(code)
        nudge(code)
    st.session_state.pop(LESSON_KEY, None)
    for k in ("lesson", "slide"):
        st.query_params.pop(k, None)
    st.session_state.pop(keys.LESSON_WRITTEN, None)


def _move(n: int, delta: int) -> None:
    """Back / Next; on a black screen they bring the slide back first (the class does not move on
    unseen)."""
    code = st.session_state.get(CODE_KEY)
    if blackout.is_dark(code):
        _toggle_dark()
        return
    _go(n, st.session_state.get(SLIDE_KEY, 0) + delta)


def _toggle_dark() -> None:
    """The black screen (`b`, `.`, Escape): on or off, for the class's followers too."""
    code = st.session_state.get(CODE_KEY)
    blackout.set_dark(code, not blackout.is_dark(code))
    if code:
        nudge(code)


def _go(n: int, i: int) -> None:
    """Show slide i (clamped to the lesson). Published to the followers here, in the button's
    callback, before the rest of the teacher's page runs: the class sees the new slide as soon as it can."""
    i = st.session_state[SLIDE_KEY] = min(max(i, 0), n - 1)
    lesson, code = st.session_state.get(LESSON_KEY), st.session_state.get(CODE_KEY)
    if lesson is not None and code:
        live.publish(code, lesson, i)
        nudge(code)


def list_key(i: int) -> str:
    """The slide list's widget on slide i. A new widget on every slide, made showing that slide and
    never set afterwards: a rerun requested before the last one reached the browser (a clicker's
    Next pressed twice quickly) carries the list's value as the browser last had it, and a list set
    to the slide on screen by the server would take that stale value for the teacher's choice and
    send the class back a slide. A widget the server never sets has no stale value. (Such a rerun
    also carries the list of the slide before, gone from the page: _picked ignores it.)"""
    return f"{LIST_KEY}_{i}"


def _picked(n: int, i: int) -> None:
    """The slide list's choice (it was made on slide i), taken only while slide i is the teacher's:
    a list the teacher has moved past can still change, on a stale copy of the browser's widgets.

    A run_every fragment (the predict slide's tally, the heartbeat) that ticks in the few ms between
    Next and the server's answer reaching the browser sends every widget as the page had them, this
    slide's list among them. Streamlit runs that tick after the Next, and a widget gone from the page
    keeps its on_change there (its old value is dropped, so the tick's value is a change): the list
    would send the teacher and the class back a slide, while the screen still showed the new one
    (the tick redraws only its fragment), and the clicker's next press would seem lost."""
    if st.session_state.get(SLIDE_KEY) != i:
        return
    _go(n, st.session_state[list_key(i)])


def start_teaching() -> None:
    """The "Start teaching" button: a code (and teacher key) for this teacher, kept in the URL."""
    made = live.start(client_address(), browser_id())  # a teacher already teaching gets that class back
    if isinstance(made, str):
        st.session_state[keys.TEACH_ERROR] = made
        return
    st.session_state[CODE_KEY], st.session_state[TEACH_KEY] = made
    st.query_params["teach"] = made[1]


def end_class() -> None:
    """The "End class" button: the code is freed and its followers are told."""
    code = st.session_state.pop(CODE_KEY, None)
    st.session_state.pop(TEACH_KEY, None)
    st.query_params.pop("teach", None)
    if code:
        blackout.forget(code)
        nudge(code, live.end(code))


def teaching() -> str | None:
    """This session's class code while its class lives (the teacher key still holds it), else None."""
    key = st.session_state.get(TEACH_KEY)
    found = live.resume(key) if key else None
    if found is None or not key:  # (found is None whenever key is empty)
        for k in (CODE_KEY, TEACH_KEY):
            st.session_state.pop(k, None)
        return None
    if st.query_params.get("teach") != key:  # the sidebar rewrote the URL, or a link dropped it
        st.query_params["teach"] = key
    return st.session_state[CODE_KEY]


@st.fragment(run_every=HEARTBEAT_S)
def _heartbeat(code: str) -> None:
    """An idle teacher's page still says it is there: the class is not left (live.TEACHER_GONE_S)."""
    live.seen(code)


def class_bar(lesson_open: bool = True) -> None:
    """The class code, Join and End class, or Start teaching (no code exists before it is pressed)."""
    code = teaching()
    if code is None:
        st.button("Start teaching", key="start_teaching", on_click=start_teaching, help="Students follow a code")
        err = st.session_state.pop(keys.TEACH_ERROR, None)
        if err:
            st.caption(plain(err))
        return
    with st.container(horizontal=True, vertical_alignment="center", key="class_bar"):
        st.markdown(f"Class code **{code}**", help=f"Students open this dashboard's address with ?follow={code}")
        join.join_button(code)
        st.button(
            "End class",
            key="end_class",
            on_click=end_class,
            help="Ends the class: its code is freed and the students are told",
        )
    if not lesson_open:
        st.caption("Your class waits for the next lesson you open: it comes up under the same code.")
    _heartbeat(code)


def teacher(lesson: Lesson, presentation: bool) -> None:
    """The teacher's slide: Back / Next (and the clicker keys), the class code, the slide."""
    n = len(lesson.slides)
    i = min(max(st.session_state.get(SLIDE_KEY, 0), 0), n - 1)
    st.session_state[SLIDE_KEY] = i
    code = teaching()
    if code is not None:
        shared = live.lookup(code)
        if shared is None or shared.slide != i or shared.lesson != lesson:
            live.publish(code, lesson, i)
            nudge(code)
    write_lesson_url(lesson, i)
    slide_content(lesson.slides[i], model_key(lesson.slides[i]))  # before the counter moves: see draw
    st.html(CLICKER_JS, unsafe_allow_javascript=True)
    # One row, not columns of fixed shares (their share of 1024 px wrapped the counter onto two
    # lines): each part is as wide as what it shows; SLIDE_CSS keeps the counter on one line.
    with st.container(horizontal=True, vertical_alignment="center", gap="xsmall", key="slide_bar"):
        st.button("◀ Back", key="slide_back", on_click=_move, args=(n, -1), disabled=i == 0)
        with st.container(key="slide_where"):  # drawn with the keys' script (slide_style.counter_html)
            st.html(counter_html(lesson.title, i, n))
        st.button("Next ▶", key="slide_next", on_click=_move, args=(n, 1), disabled=i == n - 1, type="primary")
        with st.container(key="slide_share", width="content"):
            class_bar()
    with st.container(key="slide_ends"):  # pressed by Home and End (CLICKER_JS), never seen
        st.button("First slide", key="slide_first", on_click=_go, args=(n, 0))
        st.button("Last slide", key="slide_last", on_click=_go, args=(n, n - 1))
        st.button("Black screen", key=blackout.BUTTON, on_click=_toggle_dark)
    if blackout.is_dark(code):
        blackout.blank()
    draw(lesson.slides[i], presentation, at=predict.At(code, lesson, i, nudge))
    if i + 1 < n:  # the next slide, computed while this one is on screen
        prepare(lesson.slides[i + 1])


def leave_presentation() -> None:
    """Presentation mode off (its toggle is in the sidebar, which presentation mode hides)."""
    st.session_state["presentation"] = False
    st.query_params.pop("present", None)


def tools(lesson: Lesson, presentation: bool) -> None:
    """The row under a slide: the slide list (jump to any slide by its title), the slide's full page,
    the handout, Close the lesson, and in presentation mode the way out of it."""
    n, i = len(lesson.slides), st.session_state[SLIDE_KEY]
    with st.container(horizontal=True, vertical_alignment="center", key="lesson_tools"):
        with st.container(key=LIST_KEY, width=210):
            st.selectbox(
                "Go to slide",
                range(n),
                index=i,
                key=list_key(i),
                format_func=lambda k: f"{k + 1}. {lesson.slides[k].title}",
                on_change=_picked,
                args=(n, i),
                label_visibility="collapsed",
            )
        lesson_return.full_page_link(lesson.slides[i], lesson, i)
        handout_button(lesson)
        st.button("Close the lesson", key="lesson_close", on_click=close_lesson)
        if presentation:
            st.button("Exit presentation", key="leave_presentation", on_click=leave_presentation)


def handout_html(lesson: Lesson) -> bytes:
    """The lesson as one HTML file (lessons.handout), from the same cached slides the class sees, with
    the room's guesses on each predict slide of the class being taught."""
    shown = [slide_content(s, model_key(s)) for s in lesson.slides]
    rounds = reveal.room_rounds(lesson, st.session_state.get(CODE_KEY), model_key)
    return handout.render(lesson, [x if isinstance(x, str) else x.content for x in shown], rounds).encode()


def handout_button(lesson: Lesson) -> None:
    """Download the handout; it is built only when the button is pressed (a few MB with plotly.js)."""
    st.download_button(
        "⬇ Handout (HTML)",
        lambda: handout_html(lesson),
        file_name=f"{lesson.name or 'lesson'}.html",
        mime="text/html",
        key="lesson_handout",
        on_click="ignore",
        help="Every slide with its numbers and interactive figures in one file that opens without a server",
    )
