"""Health: gptviz.health on this checkpoint and prompt, each finding with what it measured, its
threshold and what to do, and the command line that runs the same checks in a pipeline."""

import shlex

import pandas as pd
import streamlit as st

from gptviz import analysis
from gptviz.analysis.health import THRESHOLDS, worst
from gptviz.dashboard import caches, progress, widgets
from gptviz.dashboard.caches import RunKey
from gptviz.dashboard.sources.checkpoints import DEMO, checkpoint_path
from gptviz.dashboard.state import Pick

COLOURS = {"ok": "#d4edda", "warn": "#fff3cd", "fail": "#f8d7da"}  # green, amber, red backgrounds
BOXES = {"fail": st.error, "warn": st.warning}


@caches.cached(max_entries=caches.RUN_ENTRIES, show_spinner=False)  # progress.waited's bar says more
def findings(key: RunKey, _model, _trace, _tokenizer, _progress=None) -> tuple:
    """The findings of one run, once per RunKey (every layer's attention maps are rebuilt for them)."""
    return tuple(analysis.health(_model, _trace, _tokenizer, progress=_progress))


def command(v) -> str:
    """The `gptviz check` line for this checkpoint and these token ids."""
    if v.source == DEMO or st.session_state.get("ckpt_choice") is Pick.UPLOAD:  # in memory; a server path
        where = "PATH/TO/YOUR/CHECKPOINT"
    else:
        where = str(checkpoint_path(v.source))
    ids = v.trace.token_ids.tolist()
    tok = v.bundle.tokenizer
    same = tok is not None and v.prompt and tok.encode(v.prompt, unknown="drop") == ids
    source = f"--prompt {shlex.quote(v.prompt)}" if same else "--token-ids " + ",".join(map(str, ids))
    return f"gptviz check --checkpoint {shlex.quote(where)} {source}"


v = widgets.require_trace() or st.stop()
st.title("Health")
found = progress.waited(
    "Checking the checkpoint",
    "health",
    v.key,
    lambda report: findings(v.key, v.bundle.model, v.trace, v.bundle.tokenizer, report),
)
counts = {s: sum(f.status == s for f in found) for s in ("fail", "warn", "ok")}
overall = worst(list(found))
summary = f"{counts['fail']} failed, {counts['warn']} to look at, {counts['ok']} ok"
{"fail": st.error, "warn": st.warning, "ok": st.success}[overall](
    f"**Health: {overall}**: {summary}, on this prompt ({v.trace.n_tokens} tokens)."
)
st.caption(
    "**fail**: the numbers this model computes cannot be trusted (NaN or Inf, attention rows that are not "
    "distributions, a tokenizer that produces ids the model cannot read). **warn**: something to look at. "
    "Weight checks cover the whole checkpoint; activation and attention checks this prompt's run."
)

table = pd.DataFrame([f.to_dict() for f in found], columns=["status", "name", "value", "message"])
st.dataframe(
    table.style.map(lambda s: f"background-color: {COLOURS[s]}", subset=["status"]),
    key="health_table",
    hide_index=True,
    width="stretch",
    column_config={
        "value": st.column_config.NumberColumn("value", format="%.4g"),
        "message": st.column_config.TextColumn("what was measured, the threshold, what to do", width="large"),
    },
)
widgets.download("findings (CSV)", lambda: table, "health.csv", key="health_dl")


def line(f) -> str:
    return f"**{f.status} · {widgets.plain(f.name)}**: {widgets.plain(f.message)}"


st.subheader("Findings")
for f in found:
    if f.status in BOXES:
        BOXES[f.status](line(f))
passed = [f for f in found if f.status == "ok"]
with st.expander(f"The {len(passed)} checks that passed", expanded=len(passed) == len(found)):
    for f in passed:
        st.markdown(line(f))

st.subheader("The same check in a pipeline")
st.code(command(v), language="bash", wrap_lines=True)
st.caption(
    "One line per finding (`--json` for JSON). The exit status is 1 when any finding fails, 2 for a bad "
    "input, 0 otherwise, so a training script can stop on a broken checkpoint."
)
with st.expander("Thresholds"):
    st.dataframe(
        pd.DataFrame(list(THRESHOLDS.items()), columns=["constant", "value"]),
        key="health_thresholds",
        hide_index=True,
    )
    st.caption("Named constants in gptviz/analysis/health.py (GROWTH_LIMIT and NORM_LIMIT in analysis/residual.py).")
