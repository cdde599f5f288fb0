"""A student following a teacher (?follow=CODE): the teacher's slide, read-only, redrawn when the
teacher moves (nudge: the server asks each follower's session to rerun; a small fragment also polls, a
safety net), blank while the teacher's screen is black."""

from __future__ import annotations

import logging

import streamlit as st
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from . import blackout, keys, live, predict
from .classmode import client_address
from .widgets import plain

log = logging.getLogger("gptviz.dashboard")


def _rerun_full(session, code: str) -> None:
    """On the server's event loop: rerun a session's whole script with its last client state (its
    URL: request_rerun(None) would run it without ?follow=), not the fragment it last ran."""
    state = ClientState()
    state.CopyFrom(session._client_state)
    state.fragment_id, state.is_auto_rerun = "", False
    if f"follow={code}" not in state.query_string:  # a state saved before its first run ended
        state.query_string = f"follow={code}"
    session.request_rerun(state)


def nudge(code: str, ids: list[str] | None = None) -> None:
    """Ask every follower's session (or those ids) to rerun now (it then draws the new slide). This
    reaches into Streamlit's runtime (Runtime._session_mgr, the event loop), which has no public call
    for it: if that ever fails, the followers' own poll (FOLLOW_POLL_S) still brings the change, later."""
    if not Runtime.exists():  # AppTest: no server, no other sessions
        return
    try:
        rt = Runtime.instance()
        loop = rt._get_async_objs().eventloop
        for sid in live.followers(code) if ids is None else ids:
            info = rt._session_mgr.get_active_session_info(sid)
            if info is None:  # the student closed the tab
                live.unfollow(code, sid)
                continue
            loop.call_soon_threadsafe(_rerun_full, info.session, code)
    except Exception:  # Streamlit's internals changed: polling is the fallback
        log.warning("could not nudge the followers of %s; they will poll", code, exc_info=True)


FOLLOW_POLL_S = 10.0  # the safety net behind the nudge: each poll is a rerun (30 at 4-5 s jammed 2 cores)


def follower(code: str, presentation: bool) -> None:
    """A student's page for ?follow=CODE: the teacher's current slide, read-only. The teacher's move
    nudges this session to rerun; a tiny fragment also asks the registry every FOLLOW_POLL_S whether
    the slide changed (a full rerun only when it did). No sidebar is built: a follower runs no prompt."""
    from .slides import draw, model_key, slide_content  # slides nudges through this module

    code = live.normal(code)
    ctx = get_script_run_ctx()
    if code and ctx is not None:
        live.follow(code, ctx.session_id)
    now = live.lookup(code) if code else None
    dark = bool(code) and now is not None and blackout.is_dark(code)
    shown_version = (now.version if now else None, dark)
    why = live.ended(code) if code and now is None else None

    @st.fragment(run_every=FOLLOW_POLL_S)
    def watch() -> None:
        cur = live.lookup(code) if code else None
        state = (cur.version if cur else None, bool(code) and cur is not None and blackout.is_dark(code))
        if state != st.session_state.get(keys.FOLLOW_VERSION):
            st.rerun()

    if now is None or now.lesson is None:
        shown = plain(code) if code else "that code"
        if why == live.ENDED:
            st.info(f"The teacher has ended the class {shown}. Thank you for following!")
            return
        if why == live.LEFT:
            st.warning(f"The teacher of {shown} has left: their page has been closed for a while. Ask for a new code.")
            return
        if now is not None:
            st.info(f"The teacher closed the lesson. The next one they open under {shown} comes up here.")
        elif code and not live.may_guess(client_address(), code):
            st.error("Too many class codes tried from this computer: wait a minute, then check the code.")
            return
        elif code and not live.taught(code):  # a mistyped code: no lesson will come under it
            st.info(f"No lesson is live under {shown}, and no class uses that code: check it with your teacher.")
        else:
            st.info(f"No lesson is live under {shown} yet. This page shows it as soon as the teacher opens one.")
        st.session_state[keys.FOLLOW_VERSION] = shown_version
        watch()
        return
    if dark:  # the teacher blacked the room out: nothing of the slide shows until it comes back
        blackout.blank()
        st.session_state[keys.FOLLOW_VERSION] = shown_version
        watch()
        return
    n = len(now.lesson.slides)
    slide_content(now.lesson.slides[now.slide], model_key(now.lesson.slides[now.slide]))  # before the bar: see draw
    with st.container(key="follow_bar"):
        st.markdown(f"Following **{code}** · **{plain(now.lesson.title)}** · slide {now.slide + 1} of {n}")
    draw(now.lesson.slides[now.slide], presentation, key="follow", at=predict.At(code, now.lesson, now.slide))
    # Only now, with the slide drawn: a run cut short (a poll arriving during it) must not leave the
    # version saying this page is up to date, or the next poll would see no change.
    st.session_state[keys.FOLLOW_VERSION] = shown_version
    watch()
