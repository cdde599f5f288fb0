"""The Graph page through AppTest: shipped transcoders beside the checkpoint give the graph the library
gives for the same run; a feature edit shows the library's edited top tokens; transcoders that do not
fit the model, and odd upload files, are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import Upload, app_session, errors, figure, ok, serve

import gptviz
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard.state import PRESET_PROMPT
from gptviz.transcoders import Transcoder, TranscoderSet
from gptviz.transcoders.files import save_transcoders

PAGE = "views/graph.py"


def random_set(C: int, layers: int, seed: int = 0) -> TranscoderSet:
    g = torch.Generator().manual_seed(seed)
    out = []
    for l in range(layers):
        tc = Transcoder(C, 4 * C, l, "topk", k=4)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        out.append(tc)
    return TranscoderSet(out)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    cfg = gptviz.load(root / NAME).model.config
    save_transcoders(random_set(cfg.n_embd, cfg.n_layer), root / NAME / "transcoders")
    save_transcoders(random_set(cfg.n_embd + 8, cfg.n_layer), root / "wide-transcoders")
    return root


def test_graph_page_draws_the_librarys_graph_and_edits_a_feature(monkeypatch, root):
    serve(monkeypatch, root, NAME)
    at = ok(app_session(PAGE, timeout=240))
    assert at.title[0].value == "Attribution graph"
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PRESET_PROMPT, bundle.model.config.block_size)
    tcs = gptviz.load_transcoders(root / NAME / "transcoders")
    g = gptviz.attribution_graph(bundle.model, tcs, ids, tokenizer=bundle.tokenizer, max_feature_nodes=1024)
    fig = figure(at, "graph_chart")
    drawn = [n for trace in fig["data"] if trace.get("mode") == "markers" for n in trace["customdata"]]
    assert sorted(drawn) == sorted(g.nodes["node_id"])  # every kept node, nothing else
    assert at.selectbox(key="graph_node").value in set(g.nodes["node_id"])
    node = g.nodes.set_index("node_id").loc[at.selectbox(key="graph_node").value]
    assert node["kind"] == "feature"
    layer, feature, pos = int(node["layer"]), int(node["feature"]), int(node["pos"])
    edited = gptviz.trace(bundle.model, ids, interventions=[gptviz.edit_features(tcs[layer], [feature], "zero", [pos])])
    before, after = at.dataframe[-2].value, at.dataframe[-1].value  # AppTest keeps no key on a dataframe
    for shown, run in ((before, gptviz.trace(bundle.model, ids)), (after, edited)):
        probs = torch.softmax(torch.tensor(run["logits"][-1]).double(), -1).sort(descending=True)
        np.testing.assert_allclose(shown["p"], probs.values[: len(shown)].numpy(), rtol=1e-5)
        assert list(shown.iloc[:, 0]) == bundle.tokenizer.token_strings(probs.indices[: len(shown)].tolist())
    assert not np.allclose(before["p"], after["p"])  # the edit changed the prediction
    assert at.get_by_key("graph_json") is not None


def test_transcoders_that_do_not_fit_are_one_line(monkeypatch, root):
    serve(monkeypatch, root, NAME)
    at = app_session(PAGE, timeout=240)
    at.selectbox(key="graph_tcs").set_value("a transcoder folder…").run()
    at.text_input(key="graph_tcs_path").input(str(root / "wide-transcoders")).run()
    text = errors(at)
    assert text.startswith("Cannot use these transcoders:") and "values per token" in text
    at.selectbox(key="graph_tcs").set_value("upload transcoders…").run()
    at.get_by_key("graph_tcs_upload").set_value([("notes.txt", b"hello", "text/plain")]).run()
    assert "a transcoder set is config.yaml and layer_N.safetensors files" in errors(at)
    assert Upload  # the helper the uploader's files mimic
