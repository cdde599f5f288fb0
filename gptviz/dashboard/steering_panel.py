"""The steering panel (Next token): a vector from prompt pairs, an SAE feature's decoder row or a
neuron's output direction, added at one site with a coefficient; the steered and unsteered
predictions and continuations side by side, and the dose-response sweep over every layer."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import analysis, figures
from ..errors import GptvizError
from ..steering_spec import MAX_INDEX, SteeringSpec, parse_pairs
from . import features as fc
from . import keys, widgets
from .state import View, set_steer

SOURCES = ("prompt pairs", "an SAE feature", "a neuron")
KIND = dict(zip(SOURCES, ("pairs", "feature", "neuron")))
COEFFS = (-16.0, -8.0, -4.0, -2.0, 2.0, 4.0, 8.0, 16.0)
COEFF_RANGE = 20.0  # the slider's reach; a link's larger coefficient is shown at its end
EXAMPLE = "I love thee | I hate thee\nsweet joy | bitter grief"
WIDGETS = ("st_on", "st_source", "st_layer", "st_coeff", "st_pairs", "st_feature", "st_nlayer", "st_neuron")


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'positive | negative' per line, the spaces around the bar dropped; a line without '|' is an
    error naming it."""
    return tuple((pos.strip(" "), neg.strip(" ")) for pos, neg in parse_pairs(text))


def clamped(spec: SteeringSpec, cfg) -> list[str]:
    """What of a spec the panel cannot take as it is for this model, each as 'what X is read as Y'."""
    out = []
    if spec.layer > cfg.n_layer - 1:
        out.append(f"block {spec.layer} as {cfg.n_layer - 1} (the model has {cfg.n_layer})")
    if abs(spec.coeff) > COEFF_RANGE:
        out.append(
            f"coefficient {spec.coeff:g} as {max(-COEFF_RANGE, min(COEFF_RANGE, spec.coeff)):g} (the slider's reach)"
        )
    if spec.kind == "neuron" and spec.neuron[0] > cfg.n_layer - 1:
        out.append(f"the neuron's block {spec.neuron[0]} as {cfg.n_layer - 1}")
    if spec.kind == "neuron" and spec.neuron[1] > cfg.mlp_dim - 1:
        out.append(f"neuron {spec.neuron[1]} as {cfg.mlp_dim - 1} (the MLP has {cfg.mlp_dim})")
    return out


def _fill(spec: SteeringSpec | None, cfg, sources: tuple[str, ...]) -> list[str]:
    """Set the panel's widgets from the session's spec (a link's, or the one this panel made on another
    page) where they have no value: Streamlit forgets a widget's value on a page that does not draw it.
    Returns what of the spec was fitted to the model and the slider (clamped), when the widgets took it."""
    state = st.session_state
    defaults = {
        "st_on": spec is not None,
        "st_source": sources[0],
        "st_layer": cfg.n_layer // 2,
        "st_coeff": 4.0,
        "st_pairs": EXAMPLE,
        "st_feature": 0,
        "st_nlayer": 0,
        "st_neuron": 0,
    }
    if spec is not None:
        source = next(s for s, k in KIND.items() if k == spec.kind)
        defaults.update(
            st_source=source if source in sources else sources[0],
            st_layer=min(spec.layer, cfg.n_layer - 1),
            st_coeff=max(-COEFF_RANGE, min(COEFF_RANGE, spec.coeff)),
        )
        if spec.kind == "pairs":
            defaults["st_pairs"] = "\n".join(f"{p} | {n}" for p, n in spec.pairs)
        elif spec.kind == "feature":
            defaults["st_feature"] = spec.feature
        else:
            defaults.update(
                st_nlayer=min(spec.neuron[0], cfg.n_layer - 1), st_neuron=min(spec.neuron[1], cfg.mlp_dim - 1)
            )
    fresh = "st_layer" not in state  # the widgets take the spec now, not a value the person chose
    for key, value in defaults.items():
        # a widget of another page with this key is another widget: its value is handed on as the session's
        state[key] = state.get(key, value)
    return clamped(spec, cfg) if spec is not None and fresh else []


def _spec(cfg, source: str, layer: int, coeff: float) -> SteeringSpec:
    """The spec the panel's inputs name; the kind's own inputs are drawn here."""
    if source == "prompt pairs":
        text = st.text_area("Pairs: positive | negative, one per line", key="st_pairs", height=90)
        return SteeringSpec("pairs", layer, coeff, pairs=_pairs(text))
    if source == "a neuron":
        c1, c2 = st.columns(2)
        block = c1.number_input("Neuron's layer", 0, cfg.n_layer - 1, key="st_nlayer")
        # every block's mlp.c_proj is built as nn.Linear(mlp_dim, n_embd)
        neuron = c2.number_input("Neuron", 0, cfg.mlp_dim - 1, key="st_neuron")
        return SteeringSpec("neuron", layer, coeff, neuron=(int(block), int(neuron)))
    feature = st.number_input("Feature (of the SAE picked in the sidebar)", 0, MAX_INDEX, key="st_feature")
    return SteeringSpec("feature", layer, coeff, feature=int(feature))


def controls(v: View) -> tuple[SteeringSpec, np.ndarray] | None:
    """The steering toggle and the vector's inputs, shared by Next token and Generate: the spec
    (kept for the session and in the URL as ?steer=) and its vector; None when steering is off or
    the vector cannot be built (said in the page)."""
    bundle, model_key = v.bundle, v.model_key
    if bundle is None or model_key is None:
        return None
    cfg = bundle.model.config
    sources = SOURCES if bundle.tokenizer is not None else SOURCES[1:]  # pairs are typed text
    fitted = _fill(st.session_state.get(keys.STEER), cfg, sources)
    if fitted:
        st.warning(f"The link's steering did not fit this model and the panel: it reads {'; '.join(fitted)}.")
    if keys.STEER_ERROR in st.session_state:
        st.warning(f"The link's steering was not used: {widgets.plain(st.session_state.pop(keys.STEER_ERROR))}")
    if not st.toggle("Steer: add a vector inside the model", key="st_on"):
        set_steer(None)
        return None
    c1, c2, c3 = st.columns([2, 1, 2])
    source = c1.segmented_control("Vector from", sources, key="st_source", required=True)
    layer = c2.selectbox("Add it after block", range(cfg.n_layer), key="st_layer")
    coeff = c3.slider("Coefficient", -COEFF_RANGE, COEFF_RANGE, step=0.5, key="st_coeff")
    try:
        spec = _spec(cfg, source or sources[0], int(layer), float(coeff))  # required=True: never None
        vec = fc.spec_vector(model_key, spec, v.sae if spec.kind == "feature" else None)
    except GptvizError as e:
        st.error(f"Cannot build the vector: {widgets.plain(e)}")
        return None
    set_steer(spec)
    st.caption(
        f"Adds {spec.coeff:g} × a vector of norm {float(np.linalg.norm(vec)):.3g} to {spec.site} at every position."
    )
    return spec, vec


def render(v: View) -> None:
    """The panel, for the run and position of the sidebar; off until asked (it runs the model more)."""
    st.subheader("Steer the model")
    bundle, trace, key = v.bundle, v.trace, v.key
    if bundle is None or trace is None or key is None:
        st.info("Steering needs a run of the model: choose a checkpoint and a prompt in the sidebar.")
        return
    chosen = controls(v)
    if chosen is None:
        return
    spec, vec = chosen
    site, coeff = spec.site, spec.coeff
    vector = tuple(float(x) for x in vec)
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
