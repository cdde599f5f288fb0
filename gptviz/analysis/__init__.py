"""Analyses: computations on a Trace that the views, the CLI and notebooks share.

Everything here takes a Trace (or plain arrays) and returns arrays or DataFrames; nothing
imports Streamlit or Plotly, and nothing re-runs the model unless its name says so.
"""

from .attention import (
    ATTENTION_KINDS,
    attention_matrix,
    before_rotation,
    layer_weights,
    query_computation,
    scale_step,
    score_rule,
)
from .attribution import component_labels, head_matrix, logit_attribution
from .blocks import block_labels, block_mean, block_reduce
from .circuits import HeadWeights, head_weights, ov_circuit, qk_circuit
from .heads import LABEL_THRESHOLDS, head_scores
from .health import THRESHOLDS, Finding, health
from .lens import LogitLens, lens_sites, logit_lens
from .map_blocks import MapBlocks, block_side, score_blocks, weight_blocks
from .next_token import nan_logits, nan_message, per_token_loss, softmax, token_rank, top_k
from .patching import patched_run, patching_sweep
from .residual import (
    GROWTH_LIMIT,
    NORM_LIMIT,
    residual_flags,
    residual_growth,
    residual_sites,
    residual_stat_grid,
    sublayer_contributions,
)
from .shapes import FLOW, dims, format_shapes, shape_flow, shape_table

__all__ = [
    "HeadWeights",
    "head_weights",
    "ov_circuit",
    "qk_circuit",
    "ATTENTION_KINDS",
    "FLOW",
    "Finding",
    "GROWTH_LIMIT",
    "LABEL_THRESHOLDS",
    "LogitLens",
    "MapBlocks",
    "NORM_LIMIT",
    "THRESHOLDS",
    "attention_matrix",
    "before_rotation",
    "block_labels",
    "block_mean",
    "block_reduce",
    "block_side",
    "component_labels",
    "dims",
    "format_shapes",
    "head_matrix",
    "head_scores",
    "health",
    "lens_sites",
    "logit_attribution",
    "logit_lens",
    "layer_weights",
    "patched_run",
    "patching_sweep",
    "nan_logits",
    "nan_message",
    "per_token_loss",
    "query_computation",
    "scale_step",
    "score_rule",
    "residual_flags",
    "residual_growth",
    "residual_sites",
    "residual_stat_grid",
    "score_blocks",
    "shape_flow",
    "shape_table",
    "softmax",
    "sublayer_contributions",
    "token_rank",
    "top_k",
    "weight_blocks",
]
