"""The process-wide caches. One model per checkpoint version and device, one Trace per run, each
shared by every browser session: all of them are read-only (a Trace's arrays refuse writes), so
one object serves every session without the pickle round trip st.cache_data would pay per rerun.

A RunKey names a run: the checkpoint (source, device, version) and the token ids. Widgets that
only change the view (layer, head, position, temperature, page) never change the key, so they
never re-run the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from .. import analysis, figures
from ..capture import trace
from ..formats import Bundle, load
from ..formats.demo import demo_bundle
from ..record import Trace
from .sources import DEMO, checkpoint_path


@dataclass(frozen=True)
class ModelKey:
    source: str  # a shipped name, "demo", or a path
    device: str
    version: str = ""  # sources.version: the files' times, so a rewritten checkpoint loads again


@dataclass(frozen=True)
class RunKey:
    model: ModelKey
    ids: tuple[int, ...]


@st.cache_resource(max_entries=4, show_spinner="Loading the checkpoint…")
def load_bundle(key: ModelKey) -> Bundle:
    """One model per (checkpoint, device, version) per process, shared by every session: read-only."""
    if key.source == DEMO:
        return demo_bundle(key.device)
    return load(checkpoint_path(key.source), key.device)


@st.cache_resource(max_entries=4, show_spinner="Running the model…")
def run_trace(key: RunKey) -> Trace:
    """The Trace of one run. It holds the activations (attention maps are rebuilt from q and k
    when a view asks), so a few entries stay small."""
    bundle = load_bundle(key.model)
    return trace(bundle.model, list(key.ids), bundle.tokenizer)


@st.cache_resource(max_entries=4, show_spinner="Summarising every head…")
def layer_head_grid(key: RunKey) -> go.Figure:
    """The layer × head overview of one run, built once: it needs every layer's attention maps,
    which the Trace rebuilds from q and k on each request (seconds at T = 1024)."""
    t = run_trace(key)
    return figures.layer_head_grid(analysis.layer_weights(t, l) for l in range(t.n_layer))


@st.cache_resource(max_entries=4, show_spinner=False)
def prompt_loss(key: RunKey) -> pd.DataFrame:
    """The per-token loss of one run, built once: a pass over all T × V logits (0.4 s at T = 1024
    with GPT-2's vocabulary) that a temperature or top-k change must not repeat. Read-only."""
    t = run_trace(key)
    return analysis.per_token_loss(t.tensor("logits"), t.token_ids)
