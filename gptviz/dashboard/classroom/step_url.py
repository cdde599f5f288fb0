"""The step-by-step page's place in the URL (?step=3), so each step has a link for a slide.

Steps are counted from 1 on screen and in the URL alike: ?step=9 opens the step the page calls
"Step 9 of N" (session state keeps the 0-based index the code uses). Blocks are counted from 0,
as layers are everywhere else.

The sidebar rewrites the URL from its own choices on the first run, which drops keys it does not
know; read_step_url runs before it (app.py) and keeps the step in the session."""

from __future__ import annotations

import re

import streamlit as st

from .. import keys

STEP_KEY = "fp_step"  # session key of the step index (0-based)
BLOCK_KEY = "fp_block"  # session key of the block opened up
_INT = re.compile(r"[0-9]{1,4}")


def read_step_url() -> None:
    """Copy ?step= (1-based) and ?block= from the URL into the session: on the session's first run,
    and when a link (same tab, same session) brings a step other than the one this session wrote."""
    step, block = st.query_params.get("step"), st.query_params.get("block")
    if st.session_state.get(keys.STEP_URL_READ) and (step, block) in (
        (None, None),
        st.session_state.get(keys.STEP_WRITTEN),
    ):
        return
    st.session_state[keys.STEP_URL_READ] = True
    step, block = step or "", block or ""
    if _INT.fullmatch(step) and int(step) >= 1:
        st.session_state[STEP_KEY] = int(step) - 1
    if _INT.fullmatch(block):
        st.session_state[BLOCK_KEY] = int(block)


def write_step_url(step: int, block: int) -> None:
    """Show the current step (0-based index, written 1-based) and block in the URL."""
    if st.query_params.get("step") != str(step + 1):
        st.query_params["step"] = str(step + 1)
    if st.query_params.get("block") != str(block):
        st.query_params["block"] = str(block)
    st.session_state[keys.STEP_WRITTEN] = (str(step + 1), str(block))
