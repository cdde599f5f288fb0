"""A long step on a page: a progress bar with the time left, and a Cancel button.

    with progress.step("patching", "Patching every layer and position") as report:
        if report is None:          # cancelled: the page says so and offers to run it again
            st.stop()
        sweep = whatif.sweep(..., _progress=report)

A click on Cancel reruns the page: Streamlit interrupts the running step at its next report (its
RerunException passes through the library untouched, as Cancelled does), the button's callback marks
the step cancelled, and the rerun shows "Cancelled" with a Run again button instead of starting the
step afresh. A report that finds the step marked raises gptviz.Cancelled itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner import add_script_run_ctx

from ..progress import Cancelled, Progress, ProgressFn

R = TypeVar("R")


def _flag(name: str) -> str:
    return f"_cancelled_{name}"


def _cancel(name: str, key: object = True) -> None:
    st.session_state[_flag(name)] = key  # a bar's Cancel holds for the checkpoint or run it was drawn for


def _again(name: str) -> None:
    st.session_state.pop(_flag(name), None)


def _cancelled_note(what: str, name: str, again: str) -> None:
    st.info(f"{what}: cancelled.")
    st.button(again, key=f"again_{name}", on_click=_again, args=(name,))


@contextlib.contextmanager
def _not_recorded() -> Iterator[None]:
    """Within this block an element update made inside a cached function (the step reports from inside
    one) is not recorded for the cache to replay: the bar belongs to this run of the page, and a replay
    of it into a block the cached function did not create fails (CacheReplayClosureError)."""
    try:
        from streamlit.runtime.caching.cached_message_replay import in_cached_function
    except ImportError:  # another Streamlit: its cache records as it does
        yield
        return
    token = in_cached_function.set(False)
    try:
        yield
    finally:
        in_cached_function.reset(token)


@contextlib.contextmanager
def step(name: str, what: str, fresh: bool = False) -> Iterator[ProgressFn | None]:
    """Yield a progress callback that draws a bar and a Cancel button (removed when the step ends), or
    None when the user cancelled this step: the page then shows why, with a Run again button.
    fresh: a new request (a button pressed again), which a past Cancel does not stop."""
    if fresh:
        _again(name)
    if st.session_state.get(_flag(name)):
        _cancelled_note(what, name, "Run again")
        yield None
        return
    box = st.empty()
    with box.container():
        bar = st.progress(0.0, text=f"{what}…")
        st.button("Cancel", key=f"cancel_{name}", on_click=_cancel, args=(name,))

    def report(p: Progress) -> None:
        if st.session_state.get(_flag(name)):
            raise Cancelled(f"{what}: cancelled")
        with _not_recorded():
            bar.progress(min(1.0, p.fraction), text=f"{what}: {describe(p)}")

    try:
        yield report
    except Cancelled:
        box.empty()
        _cancelled_note(what, name, "Run again")
        st.stop()
    box.empty()


SHOW_AFTER_S = 0.25  # a step quicker than this (a small model's load, its run) draws no bar at all


def describe(p: Progress) -> str:
    """'12 of 24 sites · about 8 s left' for a bar's text; a stage's note (Progress.counts False) is its
    stage: 'reading the tokenizer…'."""
    if not p.counts:
        return f"{p.stage}…" if p.stage else "starting…"
    left = p.seconds_left
    eta = "" if left is None else f" · about {left:.0f} s left" if left >= 1 else " · under a second left"
    return f"{p.done:,} of {p.total:,} {p.what}{eta}"


@contextlib.contextmanager
def bar(what: str, name: str, key: object, again: str) -> Iterator[ProgressFn]:
    """Yield a progress callback that draws a bar with the time left and a Cancel button, for a step done
    inside a cached function the whole app waits on (loading the checkpoint, its first run). Its place is
    taken here, before the step's own spinner (a bar placed after it is drawn over by it). The bar appears
    SHOW_AFTER_S after the step began, whether or not the step has reported yet (a timer draws it, as
    Streamlit's own spinner is drawn: a load reads its tokenizer before it counts a byte), with the latest
    report; a step over by then (a cached value, a small model's load) draws nothing. It goes when the
    step ends.

    A Cancel holds for this key only (the checkpoint, the prompt's run): the step then raises Cancelled,
    here on entry or at its next report, after leaving "cancelled" and an `again` button in the bar's
    place; picking another checkpoint or prompt runs as usual. Like every report, a drawn update lets
    Streamlit act on a click made meanwhile: Cancel's rerun stops the step there; another click's rerun
    starts it again (not cached, it runs afresh)."""
    flag = _flag(name)
    if flag in st.session_state and st.session_state[flag] != key:
        del st.session_state[flag]  # cancelled for another checkpoint or prompt: not this one
    if flag in st.session_state:
        _cancelled_note(what, name, again)
        raise Cancelled(f"{what}: cancelled")
    box = st.empty()
    drawn = _LateBar(box, what, name, key)

    def report(p: Progress) -> None:
        if flag in st.session_state:  # set by this bar's Cancel (a rerun not acted on yet, AppTest)
            raise Cancelled(f"{what}: cancelled")
        drawn.update(p)

    try:
        drawn.start()
        yield report
    except Cancelled:
        drawn.end()
        _cancelled_note(what, name, again)
        raise
    except Exception:
        drawn.end()
        raise
    except BaseException:  # Streamlit's rerun or stop: the page is drawn afresh anyway; only no timer may draw
        drawn.end(empty=False)
        raise
    drawn.end()


def waited(what: str, name: str, key: object, work: Callable[[ProgressFn], R]) -> R:
    """work(report) under a bar (see bar(): drawn once it has run SHOW_AFTER_S, nothing for a cached
    value), for a page's own long step (scoring every head, the health checks); a Cancel stops the page
    there, its place saying so with a Run again button."""
    try:
        with bar(what, name, key, "Run again") as report:
            return work(report)
    except Cancelled:
        st.stop()
        raise  # st.stop() raises; this keeps type checkers from expecting a return


class _LateBar:
    """A bar in `box`, drawn SHOW_AFTER_S after start() by whichever comes first: the step's next report, or
    a timer thread (with the script's context, as st.spinner's), then updated by each report; end() removes
    it and stops the timer. A lock keeps the two threads from drawing at once."""

    def __init__(self, box, what: str, name: str, key: object) -> None:
        self.box, self.what, self.name, self.key = box, what, name, key
        self.lock = threading.Lock()
        self.latest: Progress | None = None
        self.shown: DeltaGenerator | None = None
        self.drawn: Progress | None = None  # the report on the bar now (each is drawn once)
        self.over = False
        self.started = time.perf_counter()
        self.timer: threading.Timer | None = None

    def start(self) -> None:
        self.started = time.perf_counter()
        self.timer = threading.Timer(SHOW_AFTER_S, self._draw)
        self.timer.daemon = True
        add_script_run_ctx(self.timer)
        self.timer.start()

    def update(self, p: Progress) -> None:
        with self.lock:
            self.latest = p
        if self.shown is not None or time.perf_counter() - self.started >= SHOW_AFTER_S:
            self._draw()

    def _draw(self) -> None:
        with self.lock, _not_recorded():
            p = self.latest
            if self.over or (self.shown is not None and p is self.drawn):
                return
            self.drawn = p
            fraction = min(1.0, p.fraction) if p is not None and p.counts else 0.0
            text = f"{self.what}: {describe(p) if p is not None else 'starting…'}"
            if self.shown is None:
                with self.box.container():
                    self.shown = st.progress(fraction, text=text)
                    st.button("Cancel", key=f"cancel_{self.name}", on_click=_cancel, args=(self.name, self.key))
            else:
                self.shown.progress(fraction, text=text)

    def end(self, empty: bool = True) -> None:
        if self.timer is not None:
            self.timer.cancel()
        with self.lock:
            self.over = True
        if empty:
            self.box.empty()
