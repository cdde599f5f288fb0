"""Graph: the prompt's attribution graph over transcoders (the local replacement model), drawn layer ×
position; a node's logit effect, and the prediction with one feature zeroed or clamped."""

import pandas as pd
import streamlit as st

from gptviz import figures
from gptviz.dashboard import progress, widgets
from gptviz.dashboard.panels import circuit
from gptviz.dashboard.panels import transcoder_card as card
from gptviz.figures.circuits import graph_figure

v = widgets.require_trace() or st.stop()
st.title("Attribution graph")
st.caption(
    "Every MLP is replaced by its transcoder (sparse features) plus an error node, and attention patterns and "
    "norm scales are frozen at this prompt: what is left is linear, so each edge is the direct effect of one "
    "node on another, and each node's incoming edges plus its bias add up to its real value. Pruned to the "
    "nodes and edges that carry most of the influence on the target tokens."
)
path, label = circuit.pick_transcoders(v.source)
if path is None:
    st.info("Pick transcoders for this checkpoint above: shipped ones, a folder, or an upload of their files.")
    st.stop()
tcs = circuit.transcoders_for(path, v.model_key)
if isinstance(tcs, str):
    st.error(f"Cannot use these transcoders: {widgets.plain(tcs)}")
    st.stop()
checkpoint = circuit.checkpoint_of(v.source)
card.show_fidelity(*card.fidelity(tcs, path, circuit.set_version(path), v.model_key, checkpoint))

last = v.trace.part("logits", -1)
top = [int(i) for i in last.argsort()[::-1][:10]]
names = dict(zip(top, v.display(top)))
c1, c2, c3, c4 = st.columns([3, 1, 1, 1])
chosen = c1.multiselect(
    "Target tokens",
    top,
    key="graph_targets",
    format_func=lambda i: names.get(i, str(i)),
    help="Empty: the top tokens reaching 95 % of the probability (at most 10)",
)
node_t = c2.slider("Node share", 0.5, 1.0, 0.8, 0.01, key="graph_node_t")
edge_t = c3.slider("Edge share", 0.5, 1.0, 0.98, 0.01, key="graph_edge_t")
rows = c4.number_input(
    "Feature rows",
    0,
    100_000,
    1024,
    256,
    key="graph_rows",
    help="Most influential features whose incoming edges are computed",
)
with progress.step("graph", "Computing the attribution graph") as report:
    if report is None:
        st.stop()
    g = circuit.graph(v.key, path, tuple(chosen) or None, node_t, edge_t, int(rows), report)
if isinstance(g, str):
    st.error(f"No graph: {widgets.plain(g)}")
    st.stop()

info = g.info
st.caption(
    f"{widgets.plain(label)}: {info['nodes_before']:,} nodes and {info['edges_before']:,} edges computed, "
    f"{info['nodes_after']:,} nodes and {info['edges_after']:,} edges kept."
)
selected = st.session_state.get("graph_node")
fig = graph_figure(g.nodes, g.edges, v.texts, g.logit_tokens, g.n_layer, selected, v.presentation)
widgets.figure_chart(
    fig, key="graph_chart", on_select=circuit.open_clicked_node("graph_chart"), selection_mode="points"
)
circuit.download_json(g, key="graph_json")

st.subheader("One node")
ranked = g.nodes.sort_values("influence", ascending=False)
ids = ranked["node_id"].tolist()
if st.session_state.get("graph_node") not in ids:
    st.session_state["graph_node"] = next((n for n, k in zip(ids, ranked["kind"]) if k == "feature"), ids[0])
node_id = st.selectbox("Node", ids, key="graph_node", help="Or click a node in the graph")
node = g.nodes.set_index("node_id").loc[node_id]
incoming = g.edges[g.edges["target"] == node_id].sort_values("weight", key=abs, ascending=False)
a, b, c = st.columns(3)
a.metric("Kind", f"{node['kind']} (layer {node['layer']})" if node["kind"] in ("feature", "error") else node["kind"])
b.metric("Input", figures.number(node["input"]))
c.metric("Influence", figures.number(node["influence"]))
if len(incoming):
    st.dataframe(incoming.head(12), hide_index=True, key="graph_incoming")
if node["kind"] != "feature":
    st.caption("Click a feature node to see its logit effect and edit it.")
    st.stop()

layer, feature, pos = int(node["layer"]), int(node["feature"]), int(node["pos"])
up, down = circuit.logit_effect(v.key, path, layer, feature)
left, right = st.columns(2)
left.dataframe(pd.DataFrame({"promotes": v.display([i for i, _ in up]), "by": [x for _, x in up]}), hide_index=True)
right.dataframe(
    pd.DataFrame({"suppresses": v.display([i for i, _ in down]), "by": [x for _, x in down]}), hide_index=True
)
st.caption("Its decoder row through the unembedding (the final norm left out).")

st.subheader(f"Where feature {feature} of layer {layer} fires most")
typed = st.text_input("Scan folder (one made with these transcoders; empty: found by itself)", key="graph_scan")
found = card.scan_for(tcs, typed.strip())
if isinstance(found, str):
    st.error(f"Scan not used: {widgets.plain(found)}")
elif found is None:
    card.how_to_scan(path, str(checkpoint), shipped=path in circuit.shipped_sets(v.source).values())
else:
    card.show_contexts(found, v.model_key, layer, feature, v.bundle.tokenizer)

st.subheader(f"Edit feature {feature} of layer {layer} at {widgets.plain(v.texts[pos])}")
h1, h2 = st.columns([1, 2])
how = h1.segmented_control("Set it to", ["zero", "a value"], key="graph_how", default="zero", required=True)
value = h2.number_input("Value (clamp)", value=float(round(2 * float(node["activation"]), 3)), key="graph_value")
before, after = circuit.edited_top(v.key, path, layer, feature, pos, "zero" if how == "zero" else float(value))
e1, e2 = st.columns(2)
e1.dataframe(
    pd.DataFrame({"before": v.display([i for i, _ in before]), "p": [p for _, p in before]}),
    hide_index=True,
    key="graph_before",
)
e2.dataframe(
    pd.DataFrame({"after": v.display([i for i, _ in after]), "p": [p for _, p in after]}),
    hide_index=True,
    key="graph_after",
)
st.caption("The edit keeps the transcoder's error term: mlp.out becomes mlp.out + decode(f′) − decode(f).")
