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
from collections.abc import Iterator

import streamlit as st

from ..progress import Cancelled, Progress, ProgressFn


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


def describe(p: Progress) -> str:
    """'12 of 24 sites · about 8 s left' for a bar's text."""
    left = p.seconds_left
    eta = "" if left is None else f" · about {left:.0f} s left" if left >= 1 else " · under a second left"
    return f"{p.done:,} of {p.total:,} {p.what}{eta}"


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


SHOW_AFTER_S = 0.5  # a step quicker than this (a small model's load, its run) draws no bar at all


@contextlib.contextmanager
def bar(what: str, name: str, key: object, again: str) -> Iterator[ProgressFn]:
    """Yield a progress callback that draws a bar with the time left and a Cancel button, for a step done
    inside a cached function the whole app waits on (loading the checkpoint, its first run). Its place is
    taken here, before the step's own spinner (a bar placed after it is drawn over by it); the bar
    appears only once the step has run SHOW_AFTER_S (a cached value makes no report, a small model's
    load ends first: neither draws anything) and goes when it ends.

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
    shown = None

    def report(p: Progress) -> None:
        nonlocal shown
        if flag in st.session_state:  # set by this bar's Cancel (a rerun not acted on yet, AppTest)
            raise Cancelled(f"{what}: cancelled")
        if shown is None and p.seconds < SHOW_AFTER_S:
            return
        text = f"{what}: {describe(p)}"
        with _not_recorded():
            if shown is None:
                with box.container():
                    shown = st.progress(min(1.0, p.fraction), text=text)
                    st.button("Cancel", key=f"cancel_{name}", on_click=_cancel, args=(name, key))
            else:
                shown.progress(min(1.0, p.fraction), text=text)

    try:
        yield report
    except Cancelled:
        box.empty()
        _cancelled_note(what, name, again)
        raise
    except Exception:
        box.empty()
        raise
    box.empty()
