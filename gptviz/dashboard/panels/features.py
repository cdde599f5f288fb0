"""The caches of the Features page and the steering panel: SAEs loaded once per process (and
checked against the model), feature-edited and steered runs, sweeps, and a scan of the sample
corpus with an SAE. Keys are plain values (paths, a RunKey, numbers), never tensors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from ... import analysis, figures
from ...capture import trace
from ...errors import GptvizError
from ...features import SAE, SAEError, load_sae
from ...features.activations import feature_activations
from ...features.edits import edit_features
from ...features.reading import logit_effect, top_features
from ...formats import MemoryPath
from ...generation import generate
from ...progress import ProgressFn
from ...record import Trace
from ...scanning import Scan, scan
from ...shipped import shipped_dir
from ...steering import steer, steering_sweep
from ...steering_spec import SteeringSpec
from ..caches import FIGURE_ENTRIES, FORWARD, RUN_ENTRIES, ModelKey, RunKey, SAEKey, bundle_for, cached, run_trace
from ..sources import uploads
from ..sources.classmode import allowed_path
from ..state import View
from ..widgets import plain

SAMPLE_CORPUS = "shakespeare"  # samples/<this>: the corpus a feature's contexts come from
NO_UPLOAD = "this session holds no such upload: choose 'upload an SAE…' in the sidebar and upload its files"


@cached(max_entries=8, show_spinner="Loading the SAE…")
def _load(model: ModelKey, sae: SAEKey) -> SAE | str:
    """The SAE, checked against the model (its site and width); or the one-line reason, remembered
    per version of its files like a checkpoint's."""
    try:
        if uploads.is_upload(sae.source):
            upload = uploads.owned(sae.owner, sae.source)
            if upload is None:
                return NO_UPLOAD
            path: str | Path | MemoryPath = upload.path
        else:
            path = allowed_path(sae.source)  # a class server opens only its data roots
        return load_sae(path, model=bundle_for(model).model, site=sae.site or None)
    except GptvizError as e:
        return str(e)


def sae_for(model: ModelKey, sae: SAEKey) -> SAE | str:
    """The SAE the sidebar picked, loaded once per process; or why it cannot be used, in one line."""
    if uploads.is_upload(sae.source) and uploads.owned(sae.owner, sae.source) is None:
        return NO_UPLOAD  # not remembered: the session may upload it next
    return _load(model, sae)


def _sae(model: ModelKey, key: SAEKey) -> SAE:
    got = sae_for(model, key)
    if isinstance(got, str):
        raise GptvizError(got)
    return got


def require_sae(v: View) -> SAE | None:
    """The sidebar's SAE for the View's model; otherwise say in the page why there is none."""
    if v.sae is None or v.model_key is None:
        st.info("Pick an SAE in the sidebar (SAE): a shipped one, a folder, or an upload of its files.")
        return None
    got = sae_for(v.model_key, v.sae)
    if isinstance(got, str):
        st.error(f"Cannot use that SAE: {plain(got)}")
        return None
    return got


@cached(max_entries=RUN_ENTRIES, show_spinner="Running with the features edited…")
def feature_edit_run(key: RunKey, sae_key: SAEKey, features: tuple[int, ...], how: str | float) -> Trace:
    bundle, sae = bundle_for(key.model), _sae(key.model, sae_key)
    with FORWARD:
        return trace(bundle.model, list(key.ids), bundle.tokenizer, [edit_features(sae, list(features), how)])


@cached(max_entries=2, show_spinner=False)  # the page's progress.waited bar says more
def sample_scan(model: ModelKey, sae: SAEKey, _progress: ProgressFn | None = None) -> Scan:
    """The shipped sample corpus scanned with the SAE: each feature's strongest contexts and density.
    _progress: each batch of windows (not part of the cache key)."""
    bundle = bundle_for(model)
    corpus = shipped_dir("samples") / SAMPLE_CORPUS
    return scan(bundle.model, corpus, bundle.tokenizer, k=8, saes=[_sae(model, sae)], progress=_progress)


@cached(max_entries=16, show_spinner="Building the steering vector…")
def _spec_vector(model: ModelKey, spec: SteeringSpec, sae: SAEKey | None) -> np.ndarray | str:
    bundle = bundle_for(model)
    try:
        loaded = _sae(model, sae) if sae is not None else None
        with FORWARD:  # prompt pairs run the model
            vec = spec.vector(bundle, sae=loaded)
    except GptvizError as e:
        return str(e)
    vec.flags.writeable = False  # shared by every session
    return vec


def spec_vector(model: ModelKey, spec: SteeringSpec, sae: SAEKey | None) -> np.ndarray:
    """The vector a steering spec names on this model (sae: the sidebar's, for an SAE feature), built
    once per process; GptvizError in one line when it cannot be."""
    if spec.kind == "feature" and sae is None:
        raise GptvizError("no SAE is picked: choose one in the sidebar (SAE)")
    if sae is not None and isinstance(sae_for(model, sae), str):
        raise GptvizError(str(sae_for(model, sae)))
    got = _spec_vector(model, spec, sae)
    if isinstance(got, str):
        raise GptvizError(got)
    return got


@cached(max_entries=RUN_ENTRIES, show_spinner="Steering every layer at every strength…")
def sweep(key: RunKey, vector: tuple[float, ...], site: str, coeffs: tuple[float, ...], target: int | None):
    bundle = bundle_for(key.model)
    with FORWARD:
        return steering_sweep(bundle.model, list(key.ids), np.asarray(vector, np.float32), site, coeffs, target)


def continuations(
    key: RunKey, vector: tuple[float, ...], site: str, coeff: float, n: int
) -> tuple[list[int], list[int]]:
    """(unsteered, steered) greedy continuations of the run's prompt, n tokens each."""
    bundle = bundle_for(key.model)
    iv = steer(site, np.asarray(vector, np.float32), coeff)
    # the lock per step, as Generate takes it
    run: dict[str, Any] = dict(temperature=0, crop_context=True, step_lock=FORWARD)
    plain = generate(bundle.model, list(key.ids), n, **run)
    steered = generate(bundle.model, list(key.ids), n, **run, interventions=[iv])
    return plain.new_ids, steered.new_ids


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the steered model…")
def steered_run(key: RunKey, vector: tuple[float, ...], site: str, coeff: float) -> Trace:
    bundle = bundle_for(key.model)
    with FORWARD:
        return trace(
            bundle.model, list(key.ids), bundle.tokenizer, [steer(site, np.asarray(vector, np.float32), coeff)]
        )


# --- the Features page's figures, built and styled once per process (as caches.py's: a class opens
# the page together, and building a Plotly figure costs tens of ms); read-only
@cached(max_entries=RUN_ENTRIES, show_spinner=False)
def activations(key: RunKey, sae: SAEKey) -> np.ndarray:
    """[T, d_sae]: the SAE's features on the run, read-only."""
    acts = feature_activations(run_trace(key), _sae(key.model, sae))
    acts.flags.writeable = False
    return acts


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def heatmap_figure(
    key: RunKey, sae: SAEKey, n: int, presentation: bool, _labels: Sequence[str], rows: tuple[int, int] | None = None
) -> go.Figure | None:
    """The prompt's n strongest features (over the whole prompt) at each token of `rows` (first, stop: a long
    prompt's window; None: every token); None when no feature fires. _labels: the run's (View.labels), not
    hashed, as caches.py's figures take them."""
    acts = activations(key, sae)
    shown = top_features(acts, n)
    if not len(shown):
        return None
    lo, hi = rows or (0, len(acts))
    heat = figures.feature_heatmap(acts[lo:hi, shown], list(_labels)[lo:hi], shown.tolist(), lo, len(acts))
    return figures.presentation(heat, presentation)


def _display(model: ModelKey):
    tok = bundle_for(model).tokenizer
    return tok.display if tok is not None else (lambda ids: [str(i) for i in ids])


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def effect_figure(model: ModelKey, sae: SAEKey, feature: int, presentation: bool) -> go.Figure | str:
    """A feature's logit effect; or why it has none (an SAE off the residual stream's width)."""
    try:
        up, down = logit_effect(bundle_for(model).model, _sae(model, sae), feature)
    except SAEError as e:
        return str(e)
    display = _display(model)
    promoted, suppressed = ([(display([i])[0], x) for i, x in pairs] for pairs in (up, down))
    return figures.presentation(figures.logit_effect_bars(promoted, suppressed, feature), presentation)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def histogram_figure(
    key: RunKey, sae: SAEKey, feature: int, corpus: tuple[float, str] | None, presentation: bool
) -> go.Figure:
    """A feature's activations on this prompt's tokens; corpus: its density in a scan, said apart."""
    acts = activations(key, sae)[:, feature]
    fig = figures.activation_histogram(acts, feature, f"this prompt's {len(acts):,} tokens", corpus)
    return figures.presentation(fig, presentation)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def edit_figures(
    key: RunKey, sae: SAEKey, feature: int, how: str | float, pos: int, presentation: bool, _labels: Sequence[str]
) -> tuple[go.Figure, go.Figure]:
    """The next-token bars at pos before and after the feature's edit."""
    display, label = _display(key.model), _labels[pos]
    out = []
    for run, name in ((run_trace(key), "before"), (feature_edit_run(key, sae, (feature,), how), "edited")):
        top = analysis.top_k(run.part("logits", pos), 8, display=display)
        out.append(figures.presentation(figures.topk_bars(top, position_label=f"{label} ({name})"), presentation))
    return out[0], out[1]
