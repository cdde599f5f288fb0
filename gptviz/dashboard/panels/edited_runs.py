"""The caches of the what-if pages (Interventions, Patching): edited runs, sweeps and patched runs,
each computed once per process for its arguments and shared read-only by every session, like the
runs in caches.py. Keys are plain tuples (a RunKey and numbers), never Traces or functions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from ...analysis import leak
from ...analysis.patching import patched_run, patching_sweep
from ...capture import trace
from ...errors import GptvizError, PromptError
from ...features.edits import edit_features
from ...figures import overview_cell
from ...figures.whatif import patching_heatmap
from ...interventions import Intervention, ablate
from ...names import point
from ...progress import ProgressFn
from ...record import Trace
from .. import window
from ..caches import FORWARD, RUN_ENTRIES, RunKey, SAEKey, bundle_for, cached, run_trace
from ..state import View
from ..widgets import chart, plain
from .features import sae_for

HeadPick = tuple[tuple[int, int], ...]  # (layer, head) pairs


def ablations(heads: HeadPick, mlps: tuple[int, ...], how: str) -> list[Intervention]:
    """One ablation of attn.z per layer with chosen heads, one of mlp.out per chosen MLP."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    edits: list[Intervention] = [
        ablate(point("attn.z", l), heads=sorted(hs), how=how) for l, hs in sorted(by_layer.items())
    ]
    return edits + [ablate(point("mlp.out", l), how=how) for l in sorted(mlps)]


@dataclass(frozen=True)
class FeaturePick:
    """SAE features to edit with the heads and MLPs: zeroed (how="zero") or clamped to a number."""

    sae: SAEKey
    features: tuple[int, ...]
    how: str | float = "zero"


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the edited model…")
def ablated_run(
    key: RunKey, heads: HeadPick, mlps: tuple[int, ...], how: str, features: FeaturePick | None = None
) -> Trace:
    """The run of `key` with the chosen heads and MLPs ablated, and the chosen SAE features zeroed or
    clamped (the SAE's error term kept: edit_features). Read-only, shared."""
    bundle = bundle_for(key.model)
    edits = ablations(heads, mlps, how)
    if features is not None and features.features:
        sae = sae_for(key.model, features.sae)
        if isinstance(sae, str):
            raise GptvizError(sae)
        edits.append(edit_features(sae, list(features.features), features.how))
    with FORWARD:
        return trace(bundle.model, list(key.ids), bundle.tokenizer, interventions=edits)


def feature_pick(v: View) -> FeaturePick | None:
    """The Interventions page's SAE features to edit: the sidebar's SAE, its features chosen in a box
    and zeroed or clamped; None when no SAE is picked (the page's caption says where) or none is chosen."""
    if v.sae is None or v.model_key is None:
        return None
    sae = sae_for(v.model_key, v.sae)
    if isinstance(sae, str):
        st.caption(f"The sidebar's SAE cannot be used here: {plain(sae)}")
        return None
    c1, c2, c3 = st.columns([3, 2, 1])
    picked = c1.multiselect(
        f"Features of the SAE at {sae.site} to edit",
        range(sae.d_sae),
        key="iv_features",
        help="The Features page shows which fire on this prompt. The SAE's error term is kept: "
        "x + decode(f′) − decode(f)",
    )
    how = c2.segmented_control("Set them to", ["zero", "a value"], key="iv_fhow", default="zero", required=True)
    value = c3.number_input("Value", value=0.0, key="iv_fvalue", disabled=how == "zero")
    if not picked:
        return None
    return FeaturePick(v.sae, tuple(int(f) for f in picked), "zero" if how == "zero" else float(value))


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the prompt without the mask…")
def leak_run(key: RunKey) -> leak.Leak:
    """The prompt with the mask and without it, once per run. Read-only, shared."""
    bundle = bundle_for(key.model)
    with FORWARD:
        return leak.mask_leak(bundle.model, list(key.ids), bundle.tokenizer)


def same_length(clean: list[int], corrupt: list[int]) -> list[int]:
    """The corrupt prompt's ids, or PromptError when its length differs from the clean prompt's."""
    if len(corrupt) != len(clean):
        raise PromptError(
            f"the clean prompt is {len(clean)} tokens and the corrupt one {len(corrupt)}: "
            "patching compares the same positions, so make them the same length"
        )
    return corrupt


SWEEP_WINDOW = 32  # positions a long prompt's sweep opens on: each is a run per layer


def sweep_choices(n_layer: int, texts: list[str]) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The Patching page's layers and positions to sweep (None: all of them), chosen in two boxes; a long
    prompt's positions in a window (dashboard/window.py), the last SWEEP_WINDOW when the page opens."""
    layers = st.multiselect("Layers (empty: all)", range(n_layer), key="pt_layers", help="Fewer layers: a faster sweep")
    if len(texts) > window.LONG:  # a box of 8,192 positions, a sweep of them all: neither fits
        return tuple(layers) or None, tuple(window.positions(len(texts), "pt", width=SWEEP_WINDOW))
    cells = st.multiselect(
        "Positions (empty: all; the heads' sweep runs every head)",
        range(len(texts)),
        format_func=lambda i: texts[i],
        key="pt_cells",
    )
    return tuple(layers) or None, tuple(cells) or None


@cached(max_entries=RUN_ENTRIES, show_spinner=False)  # the page's own progress bar says more
def sweep(
    clean: RunKey,
    corrupt_ids: tuple[int, ...],
    answer: int,
    wrong: int,
    site: str,
    layers: tuple[int, ...] | None = None,
    cells: tuple[int, ...] | None = None,
    _progress: ProgressFn | None = None,
) -> np.ndarray:
    """patching_sweep of one (clean, corrupt, answer, wrong, site), on the chosen layers and cells (None:
    all). Read-only, shared. _progress: reports each batch (not part of the cache key)."""
    model = bundle_for(clean.model).model
    out = patching_sweep(
        model,
        list(clean.ids),
        list(corrupt_ids),
        answer,
        wrong,
        site=site,
        layers=layers,
        cells=cells,
        progress=_progress,
    )
    out.flags.writeable = False
    return out


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the patched model…")
def patched(clean: RunKey, corrupt_ids: tuple[int, ...], site: str, layer: int, cell: int) -> Trace:
    """One cell of the sweep as a full Trace (the clean run's Trace comes from the run cache)."""
    bundle, clean_trace = bundle_for(clean.model), run_trace(clean)
    with FORWARD:
        return patched_run(bundle.model, clean_trace, list(corrupt_ids), site, layer, cell, bundle.tokenizer)


# --- callbacks: defined here, not in the pages, so what Streamlit keeps does not hold a page's Trace ---
def toggle_head(chart_key: str, heads_key: str, pitch: int | None = None) -> None:
    """on_select of the layer × head grid: add the clicked head to the picked ones, or take it out.
    pitch: the grid's tile pitch (its layout.meta), which depends on the prompt's length."""
    points = st.session_state[chart_key].selection.get("points") or []
    if points and "x" in points[0] and "y" in points[0]:
        layer, head = overview_cell(points[0]["x"], points[0]["y"], pitch=pitch)
        name = head_name(layer, head)
        chosen = list(st.session_state.get(heads_key, []))
        st.session_state[heads_key] = [h for h in chosen if h != name] if name in chosen else [*chosen, name]


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def parse_head(name: str) -> tuple[int, int]:
    layer, head = name.removeprefix("L").split("H")
    return int(layer), int(head)


def set_state(values: dict) -> None:
    """on_click of a preset button: put its values into the widgets."""
    st.session_state.update(values)


def sweep_chart(s: np.ndarray, site: str, labels: list[str], positions: tuple[int, ...] | None) -> None:
    """A sweep's heatmap; past window.LONG tokens only the window's columns, at their own positions, so
    a click opens the cell it shows (pt_cell)."""
    windowed = site != "attn.z" and positions is not None and len(labels) > window.LONG
    lo, hi = (positions[0], positions[-1] + 1) if windowed and positions else (0, s.shape[1])
    chart(
        patching_heatmap(s[:, lo:hi], site, labels[lo:hi] if windowed else labels, first=lo),
        key=f"pt_map_{site}",
        on_select=partial(open_cell, f"pt_map_{site}", site, "pt_cell"),
        selection_mode="points",
    )


def open_cell(chart_key: str, site: str, cell_key: str) -> None:
    """on_select of a sweep heatmap: remember (site, layer, cell) of the clicked cell."""
    points = st.session_state[chart_key].selection.get("points") or []
    if points and "x" in points[0] and "y" in points[0]:
        st.session_state[cell_key] = (site, int(points[0]["y"]), int(points[0]["x"]))


def change_one(clean: tuple[int, ...], tokenizer, vocab_size: int) -> None:
    """on_click of 'Make it': the corrupt prompt is the clean one with the chosen token replaced."""
    from ...analysis.patching import one_token
    from ...errors import GptvizError
    from ...tokenizers import parse_ids

    pos, new = st.session_state.get("pt_pos", 0), st.session_state.get("pt_new", "")
    ids = list(clean)
    try:
        if tokenizer is None:
            got = parse_ids(new, vocab_size, what="the new token")
            if len(got) != 1:
                raise GptvizError("the new token is one id")
            ids[pos] = got[0]
        else:
            ids[pos] = one_token(tokenizer, new, "new token")
    except GptvizError as e:
        st.session_state["pt_change_error"] = str(e)
        return
    st.session_state["pt_change_error"] = ""
    st.session_state["pt_corrupt"] = tokenizer.decode(ids) if tokenizer is not None else ",".join(map(str, ids))
    st.session_state["pt_cell"] = None
