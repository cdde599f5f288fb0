"""Figures of features and steering: a token × feature heatmap, a feature's logit effect and
activation histogram, and the steering sweep's dose-response lines. Pure: arrays in, figures out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import plotly_text, style


def feature_heatmap(
    acts: np.ndarray, labels: Sequence[str], features: Sequence[int], first: int = 0, n_tokens: int | None = None
) -> go.Figure:
    """acts [T, n]: the activation of each chosen feature (columns, named by `features`) at each
    token (rows, `labels`); white is 0 (not firing). first, n_tokens: where the rows are a window of a
    longer prompt, the first row's position and the prompt's length (said in the title)."""
    T, n = acts.shape
    n_tokens = T if n_tokens is None else n_tokens
    top = float(acts.max()) if acts.size and acts.max() > 0 else 1.0
    fig = go.Figure(
        go.Heatmap(
            z=acts,
            x=[f"f{f}" for f in features],
            y=[plotly_text(s) for s in labels],
            colorscale="Blues",
            zmin=0,
            zmax=top,
            colorbar=dict(title="activation"),
            hovertemplate="token %{y}<br>feature %{x}<br>activation %{z:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", title="token", type="category")
    fig.update_xaxes(title="feature", type="category")
    return style(
        fig,
        f"The prompt's {n} strongest features at each of its {T} tokens"
        if n_tokens == T
        else f"The prompt's {n} strongest features at positions {first:,}–{first + T - 1:,} of its {n_tokens:,} tokens",
        height=min(720, max(320, 16 * T + 120)),
    )


def logit_effect_bars(
    promoted: Sequence[tuple[str, float]], suppressed: Sequence[tuple[str, float]], feature: int
) -> go.Figure:
    """Tokens a feature pushes up (right, positive) and down (left), per unit of activation."""
    items = list(reversed(list(suppressed))) + list(reversed(list(promoted)))
    names = [plotly_text(repr(t)[1:-1] if isinstance(t, str) else str(t)) for t, _ in items]
    values = [float(v) for _, v in items]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            marker_color=["#b2182b" if x > 0 else "#2166ac" for x in values],
            hovertemplate="%{y}: %{x:+.3f} logit per unit<extra></extra>",
        )
    )
    fig.update_xaxes(title="logit change per unit of activation, W_U · W_dec[f] (red: up, blue: down)")
    fig.update_yaxes(title="", showticklabels=True)
    return style(fig, f"Feature {feature}'s logit effect", height=460)


def activation_histogram(
    values: np.ndarray, feature: int, where: str = "this prompt's tokens", corpus: tuple[float, str] | None = None
) -> go.Figure:
    """The distribution of a feature's non-zero activations among `values` (the tokens `where` names);
    the title says how often it fires among those very tokens. corpus: (density, what it was measured
    on), e.g. a scan's share of corpus tokens, said below the title as the corpus's, not the bars'."""
    values = np.asarray(values)
    fired = values[values > 0]
    fig = go.Figure(go.Histogram(x=fired, nbinsx=40, marker_color="#4393c3", hovertemplate="%{x}: %{y}<extra></extra>"))
    fig.update_xaxes(title="activation (where it fires)")
    fig.update_yaxes(title="tokens")
    share = len(fired) / len(values) if len(values) else 0.0
    title = f"Feature {feature} fires on {len(fired):,} of {where} ({100 * share:.2f}%)"
    subtitle = f"in {corpus[1]} it fires on {100 * corpus[0]:.2f}%" if corpus is not None else ""
    return style(fig, title, height=320, subtitle=subtitle)


def dose_response(sweep: pd.DataFrame, value: str = "kl") -> go.Figure:
    """steering_sweep's result: one line per site, the coefficient against `value` (kl or
    target_logprob)."""
    names = {"kl": "KL(unsteered ‖ steered), nats", "target_logprob": "log-probability of the target"}
    fig = go.Figure()
    for site, rows in sweep.groupby("site", sort=False):
        rows = rows.sort_values("coeff")
        fig.add_trace(
            go.Scatter(
                x=rows.coeff,
                y=rows[value],
                mode="lines+markers",
                name=str(site),
                hovertemplate=f"{site}<br>coeff %{{x:g}}<br>{value} %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title="steering coefficient")
    fig.update_yaxes(title=names.get(value, value))
    return style(fig, f"Dose-response: {names.get(value, value)} by coefficient and site", height=380)
