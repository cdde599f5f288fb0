"""The Interventions page through Streamlit's AppTest: the edited run on screen against the library run
directly, a grid click that toggles a head, and the previous-character preset's claim on the shipped
shakespeare-char checkpoint measured (the Patching page's tests share open_page)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard.panels import edited_runs
from gptviz.dashboard.state import PRESET_PROMPT

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints"
CLEAN, CORRUPT = "To be, or not to be", "To be, or not to bo"


def open_page(monkeypatch, root: Path, default: str, page: str) -> AppTest:
    serve(monkeypatch, root, default)
    return ok(app_session(page, timeout=120))


def test_interventions_page_shows_the_edited_run(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, NAME, "views/interventions.py")
    assert at.title[0].value == "Interventions"
    assert "Choose heads or MLPs" in at.info[0].value and at.get_by_key("iv_grid") is not None
    at.multiselect(key="iv_heads").set_value(["L1H2", "L0H0"])
    at.multiselect(key="iv_mlps").set_value([1])
    ok(at.run())
    bundle = gptviz.load(ckpt_root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PRESET_PROMPT, bundle.model.config.block_size)
    edits = [
        gptviz.ablate("blocks.0.attn.z", heads=[0]),
        gptviz.ablate("blocks.1.attn.z", heads=[2]),
        gptviz.ablate("blocks.1.mlp.out"),
    ]
    plain, edited = gptviz.trace(bundle.model, ids), gptviz.trace(bundle.model, ids, interventions=edits)
    pos = at.session_state["position"]  # the sidebar's position
    after = figure(at, "iv_top_after")["data"][0]
    expected = analysis.top_k(edited["logits"][pos], len(array(after["x"])))
    np.testing.assert_allclose(array(after["x"]), expected["probability"], rtol=1e-6)
    before = figure(at, "iv_top_before")["data"][0]
    np.testing.assert_allclose(array(before["x"]), analysis.top_k(plain["logits"][pos], len(expected))["probability"])
    change = at.dataframe[0].value
    np.testing.assert_allclose(change["after"], analysis.softmax(edited["logits"][pos])[change["id"]], rtol=1e-6)
    np.testing.assert_allclose(change["change"], change["after"] - change["before"], atol=1e-12)
    loss = figure(at, "iv_loss")["data"]
    want = analysis.per_token_loss(edited["logits"], ids)["loss_nats"].to_numpy()
    np.testing.assert_allclose(array(loss[1]["y"]), want, rtol=1e-6)
    assert "ablate blocks.1.attn.z heads 2 (zero)" in at.caption[1].value.replace("\\", "")
    at.segmented_control(key="iv_how").set_value("mean")
    ok(at.run())
    mean = gptviz.trace(bundle.model, ids, interventions=[gptviz.ablate(e.name, e.heads, how="mean") for e in edits])
    after = figure(at, "iv_top_after")["data"][0]
    np.testing.assert_allclose(array(after["x"]), analysis.top_k(mean["logits"][pos], len(expected))["probability"])


def test_a_click_on_the_grid_toggles_that_head(monkeypatch):
    x, y = None, None
    from gptviz import figures

    for px in range(0, 4000, 7):  # find the point of the grid's tile (1, 2)
        for py in range(0, 2000, 7):
            if figures.overview_cell(px, py) == (1, 2):
                x, y = px, py
                break
        if x is not None:
            break
    state = {"grid": SimpleNamespace(selection={"points": [{"x": x, "y": y}]}), "heads": ["L0H0"]}
    monkeypatch.setattr(edited_runs.st, "session_state", state)
    edited_runs.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0", "L1H2"]
    edited_runs.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0"]
    state["grid"] = SimpleNamespace(selection={"points": []})
    edited_runs.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0"]
    # a short prompt draws smaller tiles: the figure's pitch (here 22) maps the click
    state["grid"] = SimpleNamespace(selection={"points": [{"x": 2 * 22 + 10, "y": 1 * 22 + 3}]})
    edited_runs.toggle_head("grid", "heads", 22)
    assert state["heads"] == ["L0H0", "L1H2"]


# --- the presets on the shipped checkpoint: what the pages say they show, measured ---------------
needs_shipped = pytest.mark.skipif(
    not (SHIPPED / "shakespeare-char").exists(), reason="checkpoints/shakespeare-char is not in this checkout"
)


@needs_shipped
def test_previous_character_head_preset_says_what_it_measures():
    bundle = gptviz.load(SHIPPED / "shakespeare-char")
    m, tok = bundle.model, bundle.tokenizer
    ids = tok.encode(PRESET_PROMPT)
    t = gptviz.trace(m, ids)
    scores = gptviz.head_scores(t).set_index(["layer", "head"])
    assert scores.loc[(0, 3), "previous_token"] == pytest.approx(0.84, abs=0.005)
    base = analysis.per_token_loss(t.tensor("logits"), ids)["loss_nats"].mean()
    assert base == pytest.approx(1.44, abs=0.005)
    rise = {}
    for l in range(m.config.n_layer):
        for h in range(m.config.n_head):
            e = gptviz.trace(m, ids, interventions=[gptviz.ablate(gptviz.point("attn.z", l), heads=[h])])
            rise[l, h] = analysis.per_token_loss(e.tensor("logits"), ids)["loss_nats"].mean() - base
    assert base + rise[0, 3] == pytest.approx(2.91, abs=0.005)
    assert max(v for k, v in rise.items() if k != (0, 3)) < 0.4
