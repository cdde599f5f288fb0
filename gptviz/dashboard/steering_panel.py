"""The steering panel (Next token): a vector from prompt pairs, an SAE feature's decoder row or a
neuron's output direction, added at one site with a coefficient; the steered and unsteered
predictions and continuations side by side, and the dose-response sweep over every layer."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import analysis, figures
from ..errors import GptvizError
from ..model import GPT
from ..names import point
from ..steering import neuron_direction
from . import features as fc
from . import widgets
from .caches import ModelKey
from .state import View

SOURCES = ("prompt pairs", "an SAE feature", "a neuron")
COEFFS = (-16.0, -8.0, -4.0, -2.0, 2.0, 4.0, 8.0, 16.0)
EXAMPLE = "I love thee | I hate thee\nsweet joy | bitter grief"


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'positive | negative' per line; a line without '|' is an error naming it."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if "|" not in line:
            raise GptvizError(f"line {n} has no '|' between its positive and negative text")
        pos, neg = line.split("|", 1)
        out.append((pos.strip(" "), neg.strip(" ")))
    if not out:
        raise GptvizError("type at least one pair: positive | negative")
    return tuple(out)


def _vector(v: View, model: GPT, model_key: ModelKey, site: str, source: str) -> np.ndarray:
    cfg = model.config
    if source == "prompt pairs":
        text = st.text_area("Pairs: positive | negative, one per line", EXAMPLE, key="st_pairs", height=90)
        return fc.vector_from_pairs(model_key, _pairs(text), site)
    if source == "a neuron":
        c1, c2 = st.columns(2)
        layer = c1.number_input("Neuron's layer", 0, cfg.n_layer - 1, 0, key="st_nlayer")
        width = cfg.mlp_dim  # every block's mlp.c_proj is built as nn.Linear(mlp_dim, n_embd)
        neuron = c2.number_input("Neuron", 0, width - 1, 0, key="st_neuron")
        return neuron_direction(model, int(layer), int(neuron))
    if v.sae is None or v.model_key is None:
        raise GptvizError("no SAE is picked: choose one in the sidebar (SAE)")
    sae = fc.sae_for(v.model_key, v.sae)
    if isinstance(sae, str):
        raise GptvizError(sae)
    feature = st.number_input("Feature", 0, sae.d_sae - 1, 0, key="st_feature")
    return sae.W_dec[int(feature)].detach().numpy()


def render(v: View) -> None:
    """The panel, for the run and position of the sidebar; off until asked (it runs the model more)."""
    st.subheader("Steer the model")
    if not st.toggle("Steer: add a vector inside the model and compare", key="st_on"):
        return
    bundle, trace, key, model_key = v.bundle, v.trace, v.key, v.model_key
    if bundle is None or trace is None or key is None or model_key is None:
        st.info("Steering needs a run of the model: choose a checkpoint and a prompt in the sidebar.")
        return
    cfg = bundle.model.config
    sources = SOURCES if bundle.tokenizer is not None else SOURCES[1:]  # pairs are typed text
    c1, c2, c3 = st.columns([2, 1, 2])
    source = c1.segmented_control("Vector from", sources, key="st_source", default=sources[0], required=True)
    layer = c2.selectbox("Add it after block", range(cfg.n_layer), index=cfg.n_layer // 2, key="st_layer")
    coeff = c3.slider("Coefficient", -20.0, 20.0, 4.0, 0.5, key="st_coeff")
    site = point("resid_post", int(layer))
    try:
        vec = _vector(v, bundle.model, model_key, site, source)
    except GptvizError as e:
        st.error(f"Cannot build the vector: {widgets.plain(e)}")
        return
    vector = tuple(float(x) for x in vec)
    st.caption(f"Adds {coeff:g} × a vector of norm {float(np.linalg.norm(vec)):.3g} to {site} at every position.")
    last = trace.n_tokens - 1
    steered = fc.steered_run(key, vector, site, float(coeff))
    a, b = st.columns(2)
    for col, run, name in ((a, trace, "unsteered"), (b, steered, "steered")):
        with col:
            top = analysis.top_k(run.part("logits", last), 8, display=v.display)
            widgets.chart(figures.topk_bars(top, position_label=f"{v.labels[last]} ({name})"), key=f"st_top_{name}")
    plain, moved = fc.continuations(key, vector, site, float(coeff), 60)
    a, b = st.columns(2)
    a.markdown("**Unsteered continuation**")
    a.code("".join(v.display(plain)), language=None, wrap_lines=True)
    b.markdown("**Steered continuation**")
    b.code("".join(v.display(moved)), language=None, wrap_lines=True)
    st.markdown("**Where and how strongly to steer**")
    target_text = st.text_input(
        "Target token (optional)", key="st_target", help="One token whose log-probability to follow"
    )
    target = None
    if target_text and bundle.tokenizer is not None:
        ids = bundle.tokenizer.encode(target_text)
        if len(ids) == 1:
            target = ids[0]
        else:
            st.warning(f"That text is {len(ids)} tokens: type one token.")
    sweep = fc.sweep(key, vector, "resid_post", COEFFS, target)
    widgets.chart(figures.dose_response(sweep, "target_logprob" if target is not None else "kl"), key="st_sweep")
    st.caption(
        "Each line is one block's output (resid_post); each point the next-token distribution at the last "
        "position steered with that coefficient, against the unsteered one."
    )
