"""g.to_json writes circuit-tracer's graph JSON: the keys and types of its pydantic models
(circuit_tracer/frontend/graph_models.py: Metadata, QParams, Node, Link, Model), its node ids, and
links between nodes the file holds."""

from __future__ import annotations

import json

from test_attribution_graph import IDS, random_model, transcoders

from gptviz.circuits import attribution_graph

OPTIONAL_FLOAT = (float, type(None))
# circuit-tracer's Model, field by field (name: the types its pydantic model accepts)
METADATA = dict(
    slug=str,
    scan=str,
    transcoder_list=list,
    prompt_tokens=list,
    prompt=str,
    node_threshold=OPTIONAL_FLOAT,
    schema_version=(int, type(None)),
)
QPARAMS = dict(pinnedIds=list, supernodes=list, linkType=str, clickedId=str, sg_pos=str)
NODE = dict(
    node_id=str,
    feature=int,
    layer=str,
    ctx_idx=int,
    feature_type=str,
    token_prob=float,
    is_target_logit=bool,
    run_idx=int,
    reverse_ctx_idx=int,
    jsNodeId=str,
    clerp=str,
    influence=OPTIONAL_FLOAT,
    activation=OPTIONAL_FLOAT,
)
LINK = dict(source=str, target=str, weight=float)
FEATURE_TYPES = {"cross layer transcoder", "mlp reconstruction error", "embedding", "logit"}


def check(obj: dict, fields: dict) -> None:
    assert set(obj) == set(fields), set(obj) ^ set(fields)
    for key, types in fields.items():
        assert isinstance(obj[key], types) and not (types is int and isinstance(obj[key], bool)), (key, obj[key])


def test_graph_json_follows_circuit_tracers_schema(tmp_path):
    model = random_model()
    g = attribution_graph(model, transcoders(model), IDS)
    data = json.loads(g.to_json(tmp_path / "g.json").read_text(encoding="utf-8"))
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    check(data["metadata"], METADATA)
    check(data["qParams"], QPARAMS)
    assert data["metadata"]["prompt_tokens"] == [str(i) for i in IDS]
    ids = set()
    for node in data["nodes"]:
        check(node, NODE)
        assert node["feature_type"] in FEATURE_TYPES
        ids.add(node["node_id"])
    assert len(ids) == len(data["nodes"]) == len(g.nodes)
    for link in data["links"]:
        check(link, LINK)
        assert link["source"] in ids and link["target"] in ids
    by_type = {t: [n for n in data["nodes"] if n["feature_type"] == t] for t in FEATURE_TYPES}
    emb = by_type["embedding"][0]
    assert emb["layer"] == "E" and emb["node_id"] == f"E_{IDS[0]}_0" and emb["feature"] == 0
    logit = by_type["logit"][0]
    assert logit["layer"] == "4" and logit["node_id"] == f"4_{logit['feature']}_{len(IDS) - 1}"
    assert logit["is_target_logit"] and logit["clerp"].startswith("Output ")
    for f in by_type["cross layer transcoder"]:
        layer, feat, pos = map(int, f["node_id"].split("_"))
        assert f["feature"] == (layer + feat) * (layer + feat + 1) // 2 + feat and f["ctx_idx"] == pos
    for e in by_type["mlp reconstruction error"]:
        assert e["node_id"] == f"{e['layer']}_-1_{e['ctx_idx']}"
    scores = [n["influence"] for n in data["nodes"] if n["influence"] is not None]
    assert scores and all(0.0 <= s <= 1.0 + 1e-6 for s in scores)
