"""The step-by-step page's place in the URL (?step=3), so each step has a link for a slide.

The sidebar rewrites the URL from its own choices on the first run, which drops keys it does not
know; read_step_url runs before it (app.py) and keeps the step in the session."""

from __future__ import annotations

import re

import streamlit as st

STEP_KEY = "fp_step"  # session key of the step index
BLOCK_KEY = "fp_block"  # session key of the block opened up
_INT = re.compile(r"[0-9]{1,4}")


def read_step_url() -> None:
    """Copy ?step= and ?block= from the URL into the session, once per session."""
    if st.session_state.get("_step_url_read"):
        return
    st.session_state["_step_url_read"] = True
    for param, key in (("step", STEP_KEY), ("block", BLOCK_KEY)):
        value = st.query_params.get(param, "")
        if _INT.fullmatch(value):
            st.session_state[key] = int(value)


def write_step_url(step: int, block: int) -> None:
    """Show the current step and block in the URL (after the sidebar wrote its own keys)."""
    if st.query_params.get("step") != str(step):
        st.query_params["step"] = str(step)
    if st.query_params.get("block") != str(block):
        st.query_params["block"] = str(block)
