"""What a slide shows, built once: its input on the left (a small table and a few numbers), its
result on the right (one Plotly figure). Pure: the dashboard caches it per slide for every session
and follower, and the handout writes the same record into one HTML file.

Slides of the worked examples need nothing loaded; slides of a real model get its Bundle and the
Trace of the slide's prompt from the caller (the dashboard's caches, or gptviz.load in a script).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import analysis, figures
from ..analysis import leak, worked
from ..analysis.attention import attention_mask
from ..analysis.heads import LABEL_NAMES, LABEL_THRESHOLDS
from ..features import SAE, SAEError
from ..features.activations import feature_activations
from ..features.reading import logit_effect
from ..figures.style import BLUE, MASKED, ORANGE, plotly_text, style
from ..formats import Bundle
from ..record import Trace
from . import Slide, chain, zoom
from .drawing import FIGURE_HEIGHT, MARK_WIDTH, Content, mark, mass_label, num, shown, small_heatmap

TOY_TOKENS = ["t0", "t1", "t2"]
HEAD_THRESHOLD = max(LABEL_THRESHOLDS.values())  # the score that names a head's kind (the same for every kind)


def real_model(slide: Slide) -> bool:
    """Whether the slide needs a checkpoint and its run of the slide's prompt."""
    return slide.page in ("attention", "heads", "mask-leak", "predict", "features")


def _tiny_head(slide: Slide) -> Content:
    if slide.step is not None:
        return chain.build(slide)
    r = chain.run(slide)
    toks = chain.tokens(slide)
    T = len(toks)
    mask = np.tril(np.ones((T, T), bool)) if slide.mask else np.ones((T, T), bool)
    title = "weights = softmax(Q·Kᵀ ÷ √d_k)" + ("" if slide.mask else " · mask OFF")
    fig = mark(small_heatmap(r["weights"], toks, title, mask), slide.highlight, T)
    facts = ((mass_label(T), num(r["future_mass"])), ("d_k", str(r["Q"].shape[1])))
    whose = "your own" if slide.numbers is not None else slide.preset
    return Content(
        fig,
        f"input X ({whose} numbers), one row per token",
        shown(r["X"], toks, [f"c{i}" for i in range(r["X"].shape[1])]),
        facts,
        "Q = X·Wq, K = X·Wk; each row of weights is one query's softmax over the keys, and sums to 1.",
    )


def _mask(slide: Slide) -> Content:
    four = [*worked.SUPPORT_TOKENS, "hub"]
    m = worked.masked_softmax(worked.MASK_SCORES, causal=slide.mask)
    title = "weights after the causal mask" if slide.mask else "weights with the mask OFF"
    mask = np.tril(np.ones((4, 4), bool)) if slide.mask else np.ones((4, 4), bool)
    fig = mark(small_heatmap(m["weights"], four, title, mask), slide.highlight, 4)
    masked = m["masked"]
    return Content(
        fig,
        "scores after the mask (query rows, key columns)" if slide.mask else "scores (nothing hidden)",
        shown(masked, four, four),
        ((mass_label(4), num(m["future_mass"])), ("causal mask", "on" if slide.mask else "off")),
        "A key after its query gets −∞ before the softmax, so its weight is exactly 0.",
    )


def _softmax(slide: Slide) -> Content:
    s = worked.scaling(worked.SCALING_SCORES, worked.SCALING_HEAD_DIM)
    keys = [f"key {i}" for i in range(len(s["scores"]))]
    d = worked.SCALING_HEAD_DIM
    fig = go.Figure(
        [
            go.Bar(name="softmax(scores)", x=keys, y=s["unscaled_weights"], marker_color="#999999"),
            go.Bar(name=f"softmax(scores ÷ √{d})", x=keys, y=s["scaled_weights"], marker_color=BLUE),
        ]
    )
    style(fig, "One query's weights, unscaled and scaled", height=FIGURE_HEIGHT)
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.15))
    fig.update_yaxes(title_text="weight", range=[0, 1])
    # one row per key (a class reads a key's four numbers across), so four short columns fit half a
    # 1024 px screen at 24 px; the other way round the long row names pushed two keys off the slide
    table = shown(
        np.stack([s["scores"], s["scaled_scores"], s["unscaled_weights"], s["scaled_weights"]]).T,
        [k.replace(" ", "\u00a0") for k in keys],  # "key 0" on one line, never "key" over "0"
        ["score", f"score ÷ √{d}", "softmax of score", f"softmax of score ÷ √{d}"],
    )
    top = float(s["unscaled_weights"].max())
    return Content(
        fig,
        f"one query's scores in a head of d_k = {d}",
        table,
        (("largest weight, unscaled", num(top)), ("largest weight, scaled", num(float(s["scaled_weights"].max())))),
        f"q·k sums {d} products, so its spread grows like √d_k; dividing by √d_k = {np.sqrt(d):g} brings it back "
        "and the softmax still weighs several keys.",
    )


def _labels(bundle: Bundle, trace: Trace, for_plotly: bool = True) -> list[str]:
    """'position token' labels: escaped for Plotly (which reads tags in ticks), or as plain text for
    a table or a title, where an escape would show as itself (`&gt;`)."""
    ids = [int(i) for i in trace.token_ids]
    tok = bundle.tokenizer
    tokens = tok.display(ids) if tok is not None else [str(i) for i in ids]
    return figures.token_labels(tokens) if for_plotly else [f"{i} {t}" for i, t in enumerate(tokens)]


def _row(slide: Slide, T: int) -> int:
    if slide.highlight is not None:
        return min(slide.highlight.at[0], T - 1)
    return T - 1 if slide.position is None else min(slide.position, T - 1)


def _where_it_looks(w: np.ndarray, labels: list[str], row: int, k: int = 5) -> pd.DataFrame:
    """The k keys the row weighs most; a masked key (no weight at all, NaN in the matrix) is never one."""
    readable = np.flatnonzero(np.isfinite(w[row]))
    order = readable[np.argsort(-w[row, readable], kind="stable")][:k]
    return pd.DataFrame({"key": [labels[j] for j in order], "weight": [num(float(w[row, j])) for j in order]})


def _attention(slide: Slide, bundle: Bundle, trace: Trace) -> Content:
    layer, head = _clamp(slide, bundle, trace)
    labels = _labels(bundle, trace)
    w = analysis.attention_matrix(trace, layer, head)
    T = len(labels)
    row = _row(slide, T)
    z = zoom.window(T, slide.highlight, row)
    title = f"{slide.checkpoint} · layer {layer}, head {head}: weights"
    fig = figures.attention_heatmap(
        z.square(w), labels[z.lo : z.hi], title=title, height=FIGURE_HEIGHT, mask=z.square(attention_mask(trace, layer))
    )
    mark(fig, z.highlight(slide.highlight), z.hi - z.lo)
    words = _labels(bundle, trace, for_plotly=False)
    scores = analysis.head_scores(trace)
    mine = scores[(scores["layer"] == layer) & (scores["head"] == head)].iloc[0]
    facts = (
        ("tokens", str(T)),
        ("previous-token score", num(mine["previous_token"])),
        ("induction score", num(mine["induction"])),
    )
    return Content(
        fig,
        f"where query {words[row]} looks (top 5 keys)",
        _where_it_looks(w, words, row),
        facts,
        f"Grey: masked. Score: the head's share of attention on its pattern ({HEAD_THRESHOLD:g} or more names it)."
        + z.note(),
    )


def heads_tiles(weights: np.ndarray, mask: np.ndarray, labels: list[str], head: int, title: str) -> go.Figure:
    """One layer's heads side by side (two rows of tiles when there are more than three), each its
    [T, T] weights ([H, T, T]; mask [T, T], True where a query reads a key: the rest is grey), the
    chosen head outlined."""
    H = len(weights)
    rows = 1 if H <= 3 else 2
    cols = -(-H // rows)
    fig = make_subplots(
        rows, cols, subplot_titles=[f"head {h}" for h in range(H)], shared_xaxes=True, shared_yaxes=True,
        horizontal_spacing=0.03, vertical_spacing=0.14,
    )  # fmt: skip
    for h in range(H):
        z = np.where(mask, weights[h], np.nan)
        trace = go.Heatmap(z=z, x=labels, y=labels, coloraxis="coloraxis", hovertemplate="%{y} → %{x}: %{z:.4f}")
        fig.add_trace(trace, h // cols + 1, h % cols + 1)
    style(fig, title, height=FIGURE_HEIGHT)
    fig.update_layout(
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1, showscale=False), plot_bgcolor=MASKED, margin_r=10
    )
    fig.update_xaxes(type="category", showgrid=False, tickangle=-90)
    fig.update_yaxes(type="category", showgrid=False, autorange="reversed")
    n = head + 1  # the chosen head's axes: x, x2, x3, ...
    ref = "" if n == 1 else str(n)
    fig.add_shape(
        type="rect", xref=f"x{ref} domain", yref=f"y{ref} domain", x0=0, x1=1, y0=0, y1=1,
        line=dict(color=ORANGE, width=MARK_WIDTH),
    )  # fmt: skip
    return fig


def _heads(slide: Slide, bundle: Bundle, trace: Trace) -> Content:
    layer, head = _clamp(slide, bundle, trace)
    labels = _labels(bundle, trace)
    T = len(labels)
    z = zoom.window(T, None, _row(slide, T), zoom.HEAD_TOKENS)
    w = analysis.layer_weights(trace, layer)  # [H, T, T]
    tiles = heads_tiles(
        np.stack([z.square(x) for x in w]), z.square(attention_mask(trace, layer)), labels[z.lo : z.hi], head,
        f"{slide.checkpoint}: layer {layer}, every head",
    )  # fmt: skip
    scores = analysis.head_scores(trace)
    named = scores[scores.label != ""]
    table = pd.DataFrame(
        {
            "head": [f"layer {r.layer}, head {r.head}" for r in named.itertuples()],
            "kind": [LABEL_NAMES.get(r.label, r.label) for r in named.itertuples()],
            "score": [num(float(getattr(r, r.label))) for r in named.itertuples()],
        }
    )
    return Content(
        tiles,
        f"heads with a clear kind on this prompt (score ≥ {HEAD_THRESHOLD:g})",
        table,
        (("layers", str(trace.n_layer)), ("heads per layer", str(bundle.model.config.n_head))),
        f"Each tile is one head of layer {layer} (grey: masked); the outlined one is head {head}." + z.note(),
    )


def _mask_leak(slide: Slide, bundle: Bundle, trace: Trace) -> Content:
    layer, head = _clamp(slide, bundle, trace)
    labels = _labels(bundle, trace)
    lk = leak.mask_leak(bundle.model, [int(i) for i in trace.token_ids], bundle.tokenizer)
    T = len(labels)
    z = zoom.window(T, slide.highlight, _row(slide, T))
    side = lk.masked if slide.mask else lk.unmasked
    title = f"layer {layer}, head {head}: " + ("with the mask" if slide.mask else "without the mask")
    fig = figures.attention_heatmap(
        z.square(side.weights(layer, head)),
        labels[z.lo : z.hi],
        title=title,
        height=FIGURE_HEIGHT,
        mask=z.square(np.tril(np.ones((T, T), bool)) if slide.mask else np.ones((T, T), bool)),
    )
    mark(fig, z.highlight(slide.highlight), z.hi - z.lo)
    table = pd.DataFrame(
        {
            "": [mass_label(T), "mean loss (nats per token)"],
            "with the mask": [num(lk.masked.future_mass[layer, head]), num(lk.masked.mean_loss)],
            "without": [num(lk.unmasked.future_mass[layer, head]), num(lk.unmasked.mean_loss)],
        }
    )
    return Content(
        fig,
        f"the same prompt with and without the causal mask (layer {layer}, head {head})",
        table,
        (("loss change without the mask", num(lk.unmasked.mean_loss - lk.masked.mean_loss)),),
        "Without the mask every position also reads the tokens after it, the one it must predict included." + z.note(),
    )


PREDICT_K = 8  # the model's most likely next tokens a predict slide shows
PROMPT_TOKENS = 6  # the prompt's last tokens a predict slide lists (with their positions): fits 1024 px


def predict_top(bundle: Bundle, trace: Trace, k: int = PREDICT_K) -> pd.DataFrame:
    """The model's k most likely next tokens after the prompt's last one (analysis.top_k)."""
    tok = bundle.tokenizer
    display = tok.display if tok is not None else None
    return analysis.top_k(trace.part("logits", -1), k, display=display)


def _predict(slide: Slide, bundle: Bundle, trace: Trace) -> Content:
    """The model's answer to a predict slide: what the teacher reveals beside the class's tally
    (and what the handout shows)."""
    top = predict_top(bundle, trace)
    words = _labels(bundle, trace, for_plotly=False)
    fig = go.Figure(go.Bar(x=[plotly_text(t) for t in top["token"]], y=100 * top["probability"], marker_color=ORANGE))
    style(fig, f"{slide.checkpoint or 'the model'}: its next token after the prompt", height=FIGURE_HEIGHT)
    fig.update_yaxes(title_text="probability (%)", range=[0, 100])
    fig.update_xaxes(type="category")
    table = pd.DataFrame({"token": list(top["token"]), "probability": [num(float(p)) for p in top["probability"]]})
    last = words[-PROMPT_TOKENS:]
    tail = pd.DataFrame(
        [[w.split(" ", 1)[1] for w in last]], index=["token"], columns=[w.split(" ", 1)[0] for w in last]
    )
    return Content(
        fig,
        f"the model's {len(top)} most likely next tokens",
        table,
        (("last token of the prompt", words[-1].split(" ", 1)[-1]), ("tokens", str(len(words)))),
        "Probabilities from the softmax of the logits at the prompt's last position.",
        prompt_tail=tail,
    )


def slide_feature(slide: Slide, acts: np.ndarray) -> int:
    """The feature a features slide shows: its own, else the strongest at its position (the last token)."""
    if slide.feature is not None:
        return slide.feature
    return int(np.argmax(acts[_row(slide, len(acts))]))


def _features(slide: Slide, bundle: Bundle, trace: Trace, sae: SAE) -> Content:
    acts = feature_activations(trace, sae)  # [T, d_sae]
    f = slide_feature(slide, acts)
    a = acts[:, f]  # [T]
    T, row = len(a), _row(slide, len(a))
    z = zoom.window(T, None, row, zoom.BAR_TOKENS)  # bars a class can tell apart, the slide's among them
    shown_at = range(z.lo, z.hi)
    labels = _labels(bundle, trace)
    ids = [int(i) for i in trace.token_ids]
    chars = [plotly_text(t) for t in (bundle.tokenizer.display(ids) if bundle.tokenizer else map(str, ids))]
    colours = [ORANGE if i == row else BLUE for i in shown_at]
    fig = go.Figure(
        go.Bar(
            x=list(shown_at), y=a[z.lo : z.hi], marker_color=colours, hovertext=labels[z.lo : z.hi], hoverinfo="text+y"
        )
    )
    style(fig, f"feature {f} at {sae.site}", height=FIGURE_HEIGHT)
    fig.update_layout(bargap=0.15)
    # the tokens alone, upright: 'index token' labels turned on their side could not be read
    fig.update_xaxes(
        tickvals=list(shown_at), ticktext=chars[z.lo : z.hi], tickangle=0, tickfont=dict(size=14), title_text="token"
    )
    fig.update_yaxes(title_text="activation")
    words = _labels(bundle, trace, for_plotly=False)
    order = np.argsort(-a, kind="stable")[:5]
    order = order[a[order] > 0]
    table = pd.DataFrame({"token": [words[i] for i in order], "activation": [num(float(a[i])) for i in order]})
    facts = [("feature", f"{f} of {sae.d_sae:,}"), ("fires on", f"{int((a > 0).sum())} of {T} tokens")]
    try:
        up, _ = logit_effect(bundle.model, sae, f, k=3)
        tok = bundle.tokenizer
        shown = (tok.display([i])[0] if tok is not None else str(i) for i, _ in up)
        facts.append(("it promotes", ", ".join(repr(t) for t in shown)))
    except SAEError:  # an SAE off the residual stream writes no direct logit effect
        pass
    steered = f" The run is steered: {slide.steer.text}." if slide.steer is not None else ""
    return Content(
        fig,
        "where it fires most on this prompt",
        table,
        tuple(facts),
        "Each bar is the feature's activation at one token (0: it does not fire); the orange bar is the "
        f"slide's position.{steered}" + z.note(keys=False),
    )


def _clamp(slide: Slide, bundle: Bundle, trace: Trace) -> tuple[int, int]:
    return min(slide.layer, trace.n_layer - 1), min(slide.head, bundle.model.config.n_head - 1)


def build(slide: Slide, bundle: Bundle | None = None, trace: Trace | None = None, sae: SAE | None = None) -> Content:
    """The slide's content. A real-model slide (real_model) needs the bundle and the Trace of its
    prompt (steered, when the slide steers); a features slide its SAE too; a layer or head past the
    model's last is shown as its last one."""
    if slide.page == "tiny-head":
        return _tiny_head(slide)
    if slide.page == "mask":
        return _mask(slide)
    if slide.page == "softmax":
        return _softmax(slide)
    if bundle is None or trace is None:
        raise ValueError(f"a {slide.page!r} slide needs a model and its run")
    if slide.page == "features":
        if sae is None:
            raise ValueError("a features slide needs its SAE")
        return _features(slide, bundle, trace, sae)
    pages = {"attention": _attention, "heads": _heads, "mask-leak": _mask_leak, "predict": _predict}
    return pages[slide.page](slide, bundle, trace)
