"""Figure builders: pure functions from Trace slices (NumPy arrays, DataFrames) to Plotly figures.

Nothing here imports Streamlit, so every builder works in a notebook and is tested without a
server. Each figure names its axes with units, states the colour range it really uses, and stays
small enough to draw at T = 1024: large grids are averaged into blocks and the title says so.
"""

from .attention import (
    attention_heatmap,
    attention_heatmap_spec,
    attention_lines,
    head_grid,
    layer_head_grid,
    mark_tile,
    overview_cell,
    position_labels,
    token_labels,
)
from .attribution import attribution_bars, attribution_heads
from .features import activation_histogram, dose_response, feature_heatmap, logit_effect_bars
from .heads import clicked_head, head_score_grid
from .lens import lens_grid, site_label, target_depth
from .presentation import presentation
from .qkv import matrix_heatmap, query_scores, query_weighted_values
from .residual import contributions_bars, residual_heatmap, residual_lines
from .shapes import shape_flow
from .style import LOSS_AXIS, LOSS_UNIT, mean_loss, number, percent, style
from .tokens import loss_bars, token_chips_html, topk_bars

__all__ = [
    "activation_histogram",
    "dose_response",
    "feature_heatmap",
    "logit_effect_bars",
    "LOSS_AXIS",
    "LOSS_UNIT",
    "attention_heatmap",
    "attention_heatmap_spec",
    "attention_lines",
    "attribution_bars",
    "attribution_heads",
    "contributions_bars",
    "clicked_head",
    "head_grid",
    "head_score_grid",
    "layer_head_grid",
    "lens_grid",
    "loss_bars",
    "mark_tile",
    "mean_loss",
    "number",
    "percent",
    "matrix_heatmap",
    "overview_cell",
    "presentation",
    "query_scores",
    "query_weighted_values",
    "residual_heatmap",
    "residual_lines",
    "shape_flow",
    "site_label",
    "style",
    "target_depth",
    "token_chips_html",
    "position_labels",
    "token_labels",
    "topk_bars",
]
