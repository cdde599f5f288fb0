"""circuit-tracer's graph JSON (circuit_tracer/frontend/graph_models.py: Model = metadata, qParams,
nodes, links), the file its local viewer and Neuronpedia's graph viewer open.

Node ids are circuit-tracer's: a feature `{layer}_{feature}_{pos}`, an error `{layer}_-1_{pos}`, an
embedding `E_{token id}_{pos}`, a logit `{n_layer + 1}_{token id}_{pos}`. A feature's `feature` number
is the Cantor pairing of (layer, feature), unique over the set; `influence` is circuit-tracer's
cumulative score (the share of all influence held by the nodes at least as influential as this one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Graph

SCHEMA_VERSION = 1
FEATURE_TYPES = {
    "feature": "cross layer transcoder",
    "error": "mlp reconstruction error",
    "embedding": "embedding",
    "logit": "logit",
}


def shown(token: str) -> str:
    """A token as circuit-tracer's viewer shows it: newlines, tabs and returns as visible marks."""
    return token.replace("\n", "⏎").replace("\t", "→").replace("\r", "↵")


def _number(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _node(row, graph: Graph) -> dict:
    kind, layer, pos, feature = row.kind, int(row.layer), int(row.pos), int(row.feature)
    node = dict(
        node_id=row.node_id,
        feature=-1,
        layer=str(layer),
        ctx_idx=pos,
        feature_type=FEATURE_TYPES[kind],
        token_prob=0.0,
        is_target_logit=False,
        run_idx=0,
        reverse_ctx_idx=0,
        jsNodeId=row.node_id,
        clerp="",
        influence=_number(graph.cumulative.get(row.node_id, float("nan"))),
        activation=None,
    )
    if kind == "feature":
        node.update(
            feature=(layer + feature) * (layer + feature + 1) // 2 + feature,  # Cantor pairing
            jsNodeId=f"{layer}_{feature}-0",
            activation=_number(row.activation),
        )
    elif kind == "error":
        node.update(jsNodeId=f"{layer}_{pos}-0")
    elif kind == "embedding":
        node.update(feature=pos, layer="E", jsNodeId=f"E_{int(row.token)}-{pos}")
    else:
        prob = float(graph.probs.get(feature, 0.0))
        token = shown(graph.logit_tokens.get(feature, str(feature)))
        node.update(
            feature=feature,
            layer=str(graph.n_layer + 1),
            token_prob=prob,
            is_target_logit=feature == graph.info["targets"][0],
            jsNodeId=f"L_{feature}-{pos}",
            clerp=f'Output "{token}" (p={prob:.3f})',
            influence=None,
        )
    return node


def graph_json(graph: Graph, slug: str, scan: str) -> dict:
    return dict(
        metadata=dict(
            slug=slug,
            scan=scan,
            transcoder_list=[],
            prompt_tokens=[shown(t) for t in graph.tokens],
            prompt=graph.prompt,
            node_threshold=graph.node_threshold,
            schema_version=SCHEMA_VERSION,
        ),
        qParams=dict(pinnedIds=[], supernodes=[], linkType="both", clickedId="", sg_pos=""),
        nodes=[_node(row, graph) for row in graph.nodes.itertuples(index=False)],
        links=[
            dict(source=s, target=t, weight=float(w))
            for s, t, w in zip(graph.edges["source"], graph.edges["target"], graph.edges["weight"])
        ],
    )


def write_json(graph: Graph, path: str | Path, slug: str, scan: str) -> Path:
    path = Path(path)
    path.write_text(json.dumps(graph_json(graph, slug, scan), ensure_ascii=False), encoding="utf-8")
    return path
