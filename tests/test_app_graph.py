"""The Graph page through AppTest: shipped transcoders beside the checkpoint give the graph the library
gives for the same run; a feature edit shows the library's edited top tokens; transcoders that do not
fit the model, and odd upload files, are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import Upload, app_session, errors, figure, ok, serve, shipped_room

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


def test_fidelity_comes_first_and_a_feature_shows_its_contexts_from_a_scan(monkeypatch, root, tmp_path):
    """Before the graph: the set's fidelity as the library measures it on the sample corpus's start, with
    the library's own warning. For the chosen feature node: no scan yet -> how to make one; a scan made
    with these transcoders in the page's scans folder -> found by itself, its contexts in rank order."""
    from gptviz.dashboard.panels import transcoder_card as card
    from gptviz.scanning import jobs as scan_jobs
    from gptviz.scanning import queries

    serve(monkeypatch, root, NAME)
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    at = ok(app_session(PAGE, timeout=240))
    bundle = gptviz.load(root / NAME)
    tcs = gptviz.load_transcoders(root / NAME / "transcoders")
    first = sorted((Path(__file__).resolve().parents[1] / "samples" / "shakespeare").glob("*.txt"))[0]
    text = first.read_text(encoding="utf-8")[: card.SAMPLE_CHARS]
    want = tcs.fidelity(bundle.model, [text], tokenizer=bundle.tokenizer, max_tokens=card.FIDELITY_TOKENS)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Top-1 agreement"] == f"{100 * want['top1_agreement']:.1f} %"
    assert metrics["KL (nats / token)"] == f"{want['kl']:.3f}"
    assert metrics["NMSE (worst layer)"] == f"{max(want['nmse'].values()):.3f}"
    assert want["warning"] and any(w.value.startswith("Poor fidelity") for w in at.warning)  # random: poor
    assert any("No corpus scan with these transcoders yet" in i.value for i in at.info)
    assert any("--transcoders" in c.value for c in at.code)

    ids = gptviz.encode_prompt(bundle.tokenizer, PRESET_PROMPT, bundle.model.config.block_size)
    g = gptviz.attribution_graph(bundle.model, tcs, ids, tokenizer=bundle.tokenizer, max_feature_nodes=1024)
    chosen = at.selectbox(key="graph_node").value
    node = g.nodes.set_index("node_id").loc[chosen]
    layer, feature = int(node["layer"]), int(node["feature"])
    # the prompt is a document of the scan: the node's own activation is among the feature's contexts
    folder = tmp_path / "scans" / "0123456789ab" / "scan"
    docs = [PRESET_PROMPT, "Speak, speak. We are resolved rather to die than to famish?", text[:2000]]
    s = gptviz.scan(bundle.model, docs, bundle.tokenizer, window=64, k=4, transcoders=tcs, out=folder)
    ok(at.run())
    assert at.selectbox(key="graph_node").value == chosen
    shown = [h.proto.body for h in at.get("html") if "window " in h.proto.body and "activation" in h.proto.body]
    rows = queries.transcoder_contexts(s, layer, feature)
    assert len(rows) >= 1 and len(shown) == min(len(rows), card.CONTEXTS)
    for body, r in zip(shown, rows.itertuples()):
        assert body.startswith(f"<b>#{r.rank}</b> · {r.value:.3f} · window {r.window} · ")
    assert rows["value"].iloc[0] >= float(node["activation"]) - 1e-4

    # a folder typed that is a scan without these transcoders: one line
    gptviz.scan(bundle.model, docs, bundle.tokenizer, window=64, k=2, out=tmp_path / "plain")
    at.text_input(key="graph_scan").input(str(tmp_path / "plain")).run()
    assert "not a scan made with these transcoders" in errors(at)


def test_the_shipped_set_shows_its_stored_fidelity_and_the_shipped_scans_contexts(monkeypatch, tmp_path):
    """The shipped transcoders carry their held-out fidelity (config.yaml, written by training on this
    checkpoint): shown as stored, nothing measured. The shipped scan was made with them: a feature's
    contexts come from it without any scan run here."""
    import re

    import yaml

    from gptviz.scanning import jobs as scan_jobs
    from gptviz.scanning import queries

    shipped_room(monkeypatch)
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))  # none of the page's own
    at = ok(app_session(PAGE, timeout=240))
    root = Path(__file__).resolve().parents[1]
    card = yaml.safe_load((root / "checkpoints/shakespeare-char/transcoders/config.yaml").read_text())
    stored = card["gptviz_training"]["held_out_fidelity"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Top-1 agreement"] == f"{100 * stored['top1_agreement']:.1f} %"
    assert metrics["KL (nats / token)"] == f"{stored['kl']:.3f}"
    assert any("measured when they were trained" in c.value for c in at.caption)
    title = next(h.value for h in at.subheader if h.value.startswith("Where feature"))
    feature, layer = (int(x) for x in re.findall(r"\d+", title))
    rows = queries.transcoder_contexts(gptviz.load_scan(root / "samples/scans/shakespeare-char"), layer, feature)
    shown = [h.proto.body for h in at.get("html") if "window " in h.proto.body and "activation" in h.proto.body]
    assert len(rows) and len(shown) == min(len(rows), 8)
    assert shown[0].startswith(f"<b>#0</b> · {rows['value'].iloc[0]:.3f} · window {rows['window'].iloc[0]} · ")


def test_a_stored_fidelity_card_is_read_only_for_this_checkpoint_and_plain_numbers():
    """config.yaml is someone else's file: its held-out fidelity is shown only when it was measured on a
    checkpoint of this name and holds finite, non-negative numbers; otherwise the page measures."""
    from gptviz.dashboard.panels.transcoder_card import _stored

    card = {"top1_agreement": 0.9, "kl": 0.1, "nmse": {0: 0.05, 1: 0.1}, "dead": {0: 0.0, 1: 0.2}, "tokens": 512}
    meta = {"model_name": "checkpoints/tiny", "gptviz_training": {"held_out_fidelity": card}}
    assert _stored(meta, Path("/anywhere/tiny")) == card
    assert _stored(meta, Path("/anywhere/other")) is None  # trained on another checkpoint
    for bad in ({"kl": float("nan")}, {"kl": -1.0}, {"nmse": "all"}, {"nmse": {}}, {"top1_agreement": "high"}):
        assert _stored({**meta, "gptviz_training": {"held_out_fidelity": {**card, **bad}}}, Path("tiny")) is None
    assert _stored({"model_name": "tiny", "gptviz_training": ["x"]}, Path("tiny")) is None


def test_a_class_server_shows_no_other_sessions_scan(monkeypatch, root, tmp_path):
    """On a class server the page's own scans of other sessions are other students' corpora: a scan made
    with these transcoders there is not searched (the Corpus page's scan B list keeps the same rule)."""
    from gptviz.dashboard.sources import classmode
    from gptviz.scanning import jobs as scan_jobs

    serve(monkeypatch, root, NAME)
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    bundle = gptviz.load(root / NAME)
    tcs = gptviz.load_transcoders(root / NAME / "transcoders")
    texts = [PRESET_PROMPT, "Speak, speak. We are resolved rather to die than to famish?"]
    gptviz.scan(bundle.model, texts, bundle.tokenizer, window=64, k=2, transcoders=tcs,
                out=tmp_path / "scans" / "0123456789ab" / "scan")  # fmt: skip
    monkeypatch.setenv(classmode.CLASS_ENV, "1")
    at = ok(app_session(PAGE, timeout=240))
    assert any("No corpus scan with these transcoders yet" in i.value for i in at.info)
    monkeypatch.setenv(classmode.CLASS_ENV, "0")
    at = ok(app_session(PAGE, timeout=240))
    assert any(c.value.startswith("From the scan") for c in at.caption)
