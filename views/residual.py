"""Residual stream: mean, std and norm along the depth and per position; what each sub-layer adds."""

import streamlit as st

from gptviz import analysis, figures
from gptviz.dashboard import widgets

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Residual stream")

flags = analysis.residual_flags(t)
for flag in flags:
    st.warning(f"Runaway growth: {flag}")
if not flags:
    st.success(
        f"No runaway growth: no NaN or Inf, no block after the first multiplies the norm by more than "
        f"{analysis.GROWTH_LIMIT:g}×, every norm below {analysis.NORM_LIMIT:g}."
    )
st.caption(
    "From the embedding to the last block the mean norm grows "
    f"{figures.number(analysis.residual_growth(t), '.1f')}×; a steady growth over depth is normal in a trained GPT."
)

stat = st.segmented_control(
    "Statistic over C", ["norm", "mean", "std"], key="resid_stat", default="norm", required=True
)
sites, grid = analysis.residual_stat_grid(t, stat)
widgets.chart(
    figures.residual_lines(sites, grid, stat, position=v.position, position_label=v.labels[v.position]),
    key="resid_lines",
)
widgets.chart(figures.residual_heatmap(sites, grid, v.labels, stat), key="resid_heatmap")
widgets.download(
    "mean, std, norm per layer and position (CSV)", lambda: t.resid_stats, "resid_stats.csv", key="resid_dl"
)

contrib = analysis.sublayer_contributions(t)
widgets.chart(figures.contributions_bars(contrib), key="resid_contrib")
widgets.download("sub-layer contributions (CSV)", lambda: contrib, "sublayer_contributions.csv", key="resid_contrib_dl")
