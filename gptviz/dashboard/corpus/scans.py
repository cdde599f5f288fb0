"""The Corpus page's caches: a scan version read once and what the page shows of it, shared read-only by
every session. Running a scan (gptviz.scanning.jobs) and the queries over it (gptviz.scanning.queries)
live in the library, where a notebook can use them.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ...figures import corpus as cfig
from ...scanning import Scan, load_scan
from ...scanning.queries import head_distribution, neurons_for_token, token_texts, windows_by_loss
from .. import keys
from ..caches import ModelKey, bundle_for, cached


@cached(max_entries=4, show_spinner=False)
def scan_at(folder: str, stamp: float) -> Scan:
    """A scan folder, read once per version of its summary.json (scan_version names it; shared
    read-only by every session)."""
    return load_scan(folder)


# What the page shows of a scan version, worked out once for every session and view (read-only): on
# each view the page re-sorted every window, decoded each one's text and rebuilt two figures.
@cached(max_entries=4, show_spinner=False)
def max_token_id(folder: str, stamp: float) -> int:
    return max((max(ids) for ids in scan_at(folder, stamp).windows["token_ids"] if len(ids)), default=0)


@cached(max_entries=4, show_spinner=False)
def ranked_windows(folder: str, stamp: float, model: ModelKey) -> pd.DataFrame:
    """windows_by_loss, the text in the tokens of the sidebar's model."""
    tok = bundle_for(model).tokenizer
    return windows_by_loss(scan_at(folder, stamp), lambda ids: token_texts(tok, ids))


@cached(max_entries=16, show_spinner=False)
def loss_histogram(folder: str, stamp: float, window: int) -> go.Figure:
    windows = scan_at(folder, stamp).windows
    chosen = float(windows.set_index("window")["loss"].get(window, float("nan")))
    return cfig.window_loss_histogram(windows["loss"].to_numpy(), chosen)


@cached(max_entries=16, show_spinner=False)
def head_scores_figure(folder: str, stamp: float, score: str) -> go.Figure:
    scan = scan_at(folder, stamp)
    return cfig.head_score_distribution(head_distribution(scan, score), score)


def take_neuron_pick(state, scan: Scan, tok) -> None:
    """Open the neuron of the row clicked in the token's neuron table (its selection, from the last
    run): set the layer and neuron boxes before they are drawn. A selection is taken once."""
    sel = state.get("corpus_token_neurons")
    selection = getattr(sel, "selection", None) or (sel or {}).get("selection", {})
    rows = list(getattr(selection, "rows", None) or selection.get("rows", []))
    token = state.get("corpus_token") or ""
    if not rows or (token, rows[0]) == state.get(keys.CORPUS_PICK_TAKEN):
        return
    tid = tok.encode(token, unknown="drop") if tok is not None else []
    found = neurons_for_token(scan, tid[0]) if len(tid) == 1 else pd.DataFrame()
    if rows[0] < len(found):
        row = found.iloc[rows[0]]
        state["corpus_layer"], state["corpus_neuron"] = int(row["layer"]), int(row["neuron"])
    state[keys.CORPUS_PICK_TAKEN] = (token, rows[0])
