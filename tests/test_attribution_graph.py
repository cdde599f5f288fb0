"""Attribution graphs (docs/architecture.md, "Circuits"): with prune=False every node's incoming edges
plus its bias add up to its input, and that input is the real model's number (a feature's
pre-activation on the true mlp.in, a logit minus the mean logit), in every family the model file
covers; the frozen layers equal the real ones at the prompt, their transpose is their adjoint, and
one edge is what its source alone carries forward; pruning as circuit-tracer prunes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hf_helpers import FAMILIES, hf_random_decoder
from test_hf_families import FAMILY_CONFIGS

import gptviz
from gptviz.circuits import attribution_graph
from gptviz.circuits.frozen import freeze_attention, v_slice
from gptviz.transcoders import Transcoder, TranscoderError, TranscoderSet

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5]


def random_model(seed: int = 0, **fields) -> gptviz.GPT:
    """A random model whose norm gains and biases are not 1 and 0, so a slip in either shows."""
    torch.manual_seed(seed)
    config = gptviz.GPTConfig(vocab_size=13, block_size=9, n_layer=3, n_head=4, n_embd=16, **fields)
    model = gptviz.GPT(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif "ln" in name or "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def transcoders(model, layers=None, activation="topk", skip=False, d_tc=24, seed=0) -> TranscoderSet:
    g = torch.Generator().manual_seed(seed)
    C = model.config.n_embd
    out = []
    for l in layers if layers is not None else range(model.config.n_layer):
        tc = Transcoder(C, d_tc, l, activation, k=4 if activation == "topk" else None, skip=skip)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            if activation == "jumprelu":
                tc.threshold.copy_(torch.rand(d_tc, generator=g) * 0.3)
        out.append(tc.to(model.device).requires_grad_(False))
    return TranscoderSet(out)


def assert_exact(g: gptviz.circuits.Graph) -> None:
    """sum(incoming) + bias == input for every node, to float32 rounding of the terms added."""
    n, e = g.nodes, g.edges
    incoming = n["node_id"].map(e.groupby("target")["weight"].sum()).fillna(0.0)
    size = n["node_id"].map(e.assign(w=e["weight"].abs()).groupby("target")["w"].sum()).fillna(0.0)
    tol = 1e-5 * (size + n["bias"].abs() + n["input"].abs()) + 1e-6
    err = (incoming + n["bias"] - n["input"]).abs()
    assert (err <= tol).all(), n.assign(err=err)[err > tol].head()


def real_inputs(model, tcs, ids, g) -> None:
    """Each feature's input is its pre-activation on the real mlp.in, each logit's the real logit minus the mean."""
    t = gptviz.trace(model, ids)
    feats = g.nodes[g.nodes["kind"] == "feature"]
    for l, rows in feats.groupby("layer"):
        pre = tcs[int(l)].pre(t.tensor(f"blocks.{l}.mlp.in")).numpy()
        np.testing.assert_allclose(rows["input"], pre[rows["pos"], rows["feature"]], rtol=1e-6, atol=1e-6)
        acts = tcs[int(l)].encode(t.tensor(f"blocks.{l}.mlp.in")).numpy()
        assert set(zip(rows["pos"], rows["feature"])) == set(zip(*np.nonzero(acts)))  # every active feature, no other
    logits = t["logits"][-1].astype(np.float64)
    rows = g.nodes[g.nodes["kind"] == "logit"]
    np.testing.assert_allclose(rows["input"], logits[rows["feature"]] - logits.mean(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", ["gpt2", *FAMILY_CONFIGS])
def test_every_node_sums_to_its_real_input_in_every_family(variant):
    fields = {} if variant == "gpt2" else dict(FAMILY_CONFIGS[variant])
    if "qkv_clip" in fields:
        fields["qkv_clip"] = 0.05  # small enough that the clip holds some values at ±clip
    model = random_model(**fields)
    for tcs in (transcoders(model), transcoders(model, [0, 2], "jumprelu", skip=True)):
        g = attribution_graph(model, tcs, IDS, prune=False)
        assert_exact(g)
        real_inputs(model, tcs, IDS, g)
        kinds = g.nodes["kind"].value_counts()
        assert kinds["error"] == 3 * len(IDS) and kinds["embedding"] == len(IDS) and kinds["feature"] > 0
        assert g.edges["weight"].ne(0).all()


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt_neox", "olmo", "olmo2", "gemma3_text"])
def test_hugging_face_families_loaded_from_disk_sum_exactly(kind, tmp_path):
    hf = hf_random_decoder(kind)
    hf.save_pretrained(tmp_path)
    model = gptviz.load(tmp_path).model
    ids = torch.randint(0, FAMILIES["llama"]["vocab_size"], (12,), generator=torch.Generator().manual_seed(1))
    tcs = transcoders(model, d_tc=64)
    g = attribution_graph(model, tcs, ids, prune=False, targets=[5, 7, 11])
    assert_exact(g)
    real_inputs(model, tcs, ids, g)


@pytest.mark.parametrize("variant", ["gemma-like", "olmo-like", "neox-like"])
def test_frozen_attention_is_the_real_layer_and_its_transpose_its_adjoint(variant):
    model = random_model(**FAMILY_CONFIGS[variant])
    t = gptviz.trace(model, IDS)
    for l, block in enumerate(model.transformer.h):
        pre = t.tensor(f"blocks.{l}.resid_pre")
        frozen = freeze_attention(
            block, pre, t.tensor(f"blocks.{l}.attn.weights"), t.tensor(f"blocks.{l}.attn.z"), v_slice(model)
        )
        real = frozen.linear(pre[None])[0] + frozen.constant
        np.testing.assert_allclose(real.numpy(), t[f"blocks.{l}.attn.out"], atol=1e-5)
        x, g = torch.randn(2, len(IDS), 16), torch.randn(2, len(IDS), 16)
        lhs = (g * frozen.linear(x)).sum((1, 2))
        rhs = (frozen.transpose(g) * x).sum((1, 2))
        np.testing.assert_allclose(lhs.numpy(), rhs.numpy(), rtol=1e-5, atol=1e-5)


def test_an_edge_is_what_its_source_alone_carries_forward():
    """Embedding p's edge to a layer-2 feature: its vector pushed forward through the frozen attention
    layers 0, 1 and 2 (linear parts; the MLPs are nodes, so no path through them) and read by the encoder."""
    model = random_model()
    tcs = transcoders(model)
    g = attribution_graph(model, tcs, IDS, prune=False)
    t = gptviz.trace(model, IDS)
    frozen = [
        freeze_attention(
            b,
            t.tensor(f"blocks.{l}.resid_pre"),
            t.tensor(f"blocks.{l}.attn.weights"),
            t.tensor(f"blocks.{l}.attn.z"),
            v_slice(model),
        )
        for l, b in enumerate(model.transformer.h)
    ]
    target = g.nodes[(g.nodes["kind"] == "feature") & (g.nodes["layer"] == 2)].iloc[-1]
    mid = t.tensor("blocks.2.resid_mid")
    ln = model.transformer.h[2].ln_2
    sigma = (mid[target["pos"]].var(correction=0) + ln.eps).sqrt()
    w_enc = tcs[2].W_enc[target["feature"]]
    for p in range(target["pos"] + 1):
        x = torch.zeros(1, len(IDS), 16)
        x[0, p] = t.tensor("embed")[p]
        for layer in frozen:
            x = x + layer.linear(x)
        read = x[0, target["pos"]]
        expected = float(w_enc @ (ln.weight.detach() * (read - read.mean()) / sigma))
        edge = g.edges[(g.edges["source"] == f"E_{IDS[p]}_{p}") & (g.edges["target"] == target["node_id"])]
        assert float(edge["weight"].iloc[0]) == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_default_targets_reach_95_percent_at_most_10_and_pruning_keeps_a_subgraph():
    model = random_model()
    tcs = transcoders(model)
    full = attribution_graph(model, tcs, IDS, prune=False)
    probs = torch.softmax(torch.tensor(gptviz.trace(model, IDS)["logits"][-1]).double(), -1)
    logits = full.nodes[full.nodes["kind"] == "logit"]
    top = probs.sort(descending=True)
    n = len(logits)
    assert n <= 10 and list(logits["feature"]) == top.indices[:n].tolist()
    assert top.values[:n].sum() >= 0.95 or n == 10
    assert n == 10 or top.values[: n - 1].sum() < 0.95
    pruned = attribution_graph(model, tcs, IDS, node_threshold=0.5, edge_threshold=0.8)
    assert set(pruned.nodes["node_id"]) <= set(full.nodes["node_id"])
    assert (pruned.nodes["kind"] == "embedding").sum() == len(IDS)
    assert (pruned.nodes["kind"] == "logit").sum() == n
    assert len(pruned.edges) < len(full.edges)
    kept = set(pruned.nodes["node_id"])
    assert set(pruned.edges["source"]) <= kept and set(pruned.edges["target"]) <= kept
    merged = pruned.edges.merge(full.edges, on=["source", "target"], suffixes=("", "_full"))
    assert len(merged) == len(pruned.edges) and (merged["weight"] == merged["weight_full"]).all()
    inner = pruned.nodes[pruned.nodes["kind"].isin(["feature", "error"])]
    assert inner["node_id"].isin(pruned.edges["source"]).all()  # every kept feature or error feeds something
    assert pruned.info["nodes_before"] == len(full.nodes) and pruned.info["nodes_after"] == len(pruned.nodes)


def test_a_feature_budget_visits_the_most_influential_features_first():
    model = random_model()
    tcs = transcoders(model)
    full = attribution_graph(model, tcs, IDS, prune=False)
    n_feat = int((full.nodes["kind"] == "feature").sum())
    budget = attribution_graph(model, tcs, IDS, max_feature_nodes=10, node_threshold=1.0, edge_threshold=1.0)
    assert budget.info["rows"] <= 10 + (full.nodes["kind"] == "logit").sum() and budget.info["nodes_before"] == len(
        full.nodes
    )
    feats = budget.nodes[budget.nodes["kind"] == "feature"]
    assert 0 < len(feats) <= 10 < n_feat and feats["bias"].notna().all()  # only features whose edges were computed
    top_direct = full.edges[
        full.edges["target"].str.endswith(f"_{len(IDS) - 1}") & full.edges["source"].isin(feats["node_id"])
    ]
    assert len(top_direct)  # what it keeps reaches the logits
    merged = budget.edges.merge(full.edges, on=["source", "target"], suffixes=("", "_full"))
    assert len(merged) == len(budget.edges) and np.allclose(
        merged["weight"], merged["weight_full"], rtol=1e-5, atol=1e-7
    )


def test_influence_by_hand_on_a_chain():
    """A chain embedding -> feature -> logit with weights 2 and -3: |normalised| weights 1 and 1."""
    from gptviz.circuits.prune import node_influence

    M = torch.zeros(2, 3)  # nodes: feature 0, embedding 1, logit 2; rows: the feature's, the logit's
    M[0, 1], M[1, 0] = 2.0, -3.0
    w = torch.tensor([0.0, 0.0, 0.5])
    assert node_influence(M, torch.tensor([0, 2]), w).tolist() == [0.5, 0.5, 0.0]


def test_transcoders_that_do_not_fit_and_bad_arguments_are_one_line():
    model = random_model()
    wide = TranscoderSet([Transcoder(20, 8, 0, "relu")])
    with pytest.raises(TranscoderError, match="read 20 values per token"):
        attribution_graph(model, wide, IDS)
    with pytest.raises(gptviz.PromptError, match="node_threshold"):
        attribution_graph(model, transcoders(model), IDS, node_threshold=2)
    with pytest.raises(gptviz.PromptError, match="targets"):
        attribution_graph(model, transcoders(model), IDS, targets=[99])


def test_nodes_table_has_the_contract_columns():
    g = attribution_graph(random_model(), transcoders(random_model()), IDS)
    assert list(g.nodes.columns) == [
        "node_id",
        "kind",
        "layer",
        "pos",
        "feature",
        "token",
        "activation",
        "input",
        "bias",
        "influence",
    ]
    assert list(g.edges.columns) == ["source", "target", "weight"]
    assert isinstance(g.nodes, pd.DataFrame) and g.nodes["node_id"].is_unique
