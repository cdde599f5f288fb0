"""The what-if pages (Interventions, Patching) through Streamlit's AppTest: the numbers on screen
against the library run directly, bad inputs as one-line messages, and the presets' claims on the
shipped shakespeare-char checkpoint measured."""

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
from gptviz.dashboard import whatif
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
    monkeypatch.setattr(whatif.st, "session_state", state)
    whatif.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0", "L1H2"]
    whatif.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0"]
    state["grid"] = SimpleNamespace(selection={"points": []})
    whatif.toggle_head("grid", "heads")
    assert state["heads"] == ["L0H0"]
    # a short prompt draws smaller tiles: the figure's pitch (here 22) maps the click
    state["grid"] = SimpleNamespace(selection={"points": [{"x": 2 * 22 + 10, "y": 1 * 22 + 3}]})
    whatif.toggle_head("grid", "heads", 22)
    assert state["heads"] == ["L0H0", "L1H2"]


def test_patching_page_sweeps_and_opens_a_cell(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, NAME, "views/patching.py")
    assert at.title[0].value == "Patching"
    at.text_input(key="pt_clean").input(CLEAN)
    ok(at.run())
    assert any("Type a corrupt prompt" in i.value for i in at.info)
    # make the corrupt prompt by changing the last token: 'e' -> 'o'
    at.selectbox(key="pt_pos").set_value(len(CLEAN) - 1)
    at.text_input(key="pt_new").input("o")
    ok(at.button(key="pt_make").click().run())
    assert at.text_input(key="pt_corrupt").value == CORRUPT
    at.text_input(key="pt_answer").input(" ")
    at.text_input(key="pt_wrong").input("x")
    ok(at.run())
    bundle = gptviz.load(ckpt_root / NAME)
    tok = bundle.tokenizer
    for site in ("resid_pre", "attn.z", "mlp.out"):
        z = array(figure(at, f"pt_map_{site}")["data"][0]["z"])
        want = gptviz.patching_sweep(
            bundle.model, tok.encode(CLEAN), tok.encode(CORRUPT), tok.encode(" ")[0], tok.encode("x")[0], site=site
        )
        np.testing.assert_allclose(z, want, atol=1e-9)
    # a click on a cell (set as the heatmap's on_select would) shows that patched run
    at.session_state["pt_cell"] = ("attn.z", 1, 3)
    ok(at.run())
    table = at.dataframe[-1].value
    clean = gptviz.trace(bundle.model, tok.encode(CLEAN))
    run = gptviz.trace(
        bundle.model, tok.encode(CORRUPT), interventions=[gptviz.patch("blocks.1.attn.z", clean, heads=[3])]
    )
    np.testing.assert_allclose(table["patched"], analysis.softmax(run["logits"][-1])[table["id"]], rtol=1e-6)


BAD = [
    (dict(pt_clean=CLEAN, pt_corrupt="To be, or not"), "same length"),
    (dict(pt_clean=CLEAN, pt_corrupt=CORRUPT, pt_answer="ab"), "exactly one"),
    (dict(pt_clean=CLEAN, pt_corrupt=CORRUPT, pt_answer="~"), "does not know"),
    (dict(pt_clean=CLEAN, pt_corrupt="To be, or not to b~"), "does not know"),
    (dict(pt_clean=CLEAN, pt_corrupt=CLEAN, pt_answer="e", pt_wrong="o"), "nothing for a patch to restore"),
    (dict(pt_clean=CLEAN, pt_corrupt=CORRUPT, pt_answer="e", pt_wrong="e"), "the same"),
    (dict(pt_clean="x" * 65), "at most 64"),
]


@pytest.mark.parametrize("inputs,message", BAD, ids=[m for _, m in BAD])
def test_patching_page_bad_input_is_one_message(monkeypatch, ckpt_root, inputs, message):
    at = open_page(monkeypatch, ckpt_root, NAME, "views/patching.py")
    for key, value in inputs.items():  # the answer and wrong fields appear once both prompts are there
        if key not in {w.key for w in at.text_input}:
            at.run()
        at.text_input(key=key).input(value)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and message in at.error[0].value.replace("\\", ""), [e.value for e in at.error]
    assert "Traceback" not in at.error[0].value


def test_change_one_token_refuses_two_tokens(monkeypatch):
    tok = gptviz.CharTokenizer(list("abc"))
    state = {"pt_pos": 1, "pt_new": "ab"}
    monkeypatch.setattr(whatif.st, "session_state", state)
    whatif.change_one((0, 1, 2), tok, 3)
    assert "exactly one" in state["pt_change_error"] and "pt_corrupt" not in state
    state["pt_new"] = "c"
    whatif.change_one((0, 1, 2), tok, 3)
    assert state["pt_corrupt"] == "acc" and state["pt_change_error"] == ""


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


@needs_shipped
def test_agreement_presets_say_what_they_measure():
    bundle = gptviz.load(SHIPPED / "shakespeare-char")
    m, tok = bundle.model, bundle.tokenizer
    sweep = lambda c, r, a, w, site: gptviz.patching_sweep(  # noqa: E731
        m, tok.encode(c), tok.encode(r), tok.encode(a)[0], tok.encode(w)[0], site=site
    )
    s = sweep("I know thou ar", "I know they ar", "t", "e", "resid_pre")
    assert (s[:3, 9] > 0.5).all() and s[3, 9] < 0.2 and s[3, -1] > 0.8  # subject position, then the last
    z = sweep("I know thou ar", "I know they ar", "t", "e", "attn.z")
    assert np.unravel_index(z.argmax(), z.shape) == (2, 0)
    s = sweep("I pray thee, thou ha", "I pray thee, they ha", "s", "v", "resid_pre")
    assert (s[:3, 15] > 0.5).all() and s[1, 17] > 0.3 and (s[2:, -1] > 0.3).all() and s[1, -1] < 0.1
    o = sweep("I pray thee, thou ha", "I pray thee, they ha", "s", "v", "mlp.out")
    assert o[3, -1] > 0.5


@needs_shipped
def test_patching_presets_on_the_page(monkeypatch):
    at = open_page(monkeypatch, SHIPPED, "shakespeare-char", "views/patching.py")
    ok(at.button(key="pt_preset_thou art / they are").click().run())
    assert "The subject decides the verb" in at.info[0].value
    z = array(figure(at, "pt_map_resid_pre")["data"][0]["z"])
    assert z.shape == (4, 14) and z[3, -1] > 0.8
    at = ok(at.switch_page("views/interventions.py").run())
    ok(at.button(key="iv_preset").click().run())
    assert at.multiselect(key="iv_heads").value == ["L0H3"]
    assert "previous character" in at.info[0].value


def test_patching_shows_the_answer_and_wrong_tokens_it_uses(monkeypatch, ckpt_root):
    """Empty Answer / Wrong boxes mean the model's own choices: the boxes show them (greyed) and the
    caption names them, so the page never computes with a token it does not show."""
    at = open_page(monkeypatch, ckpt_root, NAME, "views/patching.py")
    at.text_input(key="pt_clean").input(CLEAN)
    at.text_input(key="pt_corrupt").input(CORRUPT)
    ok(at.run())
    bundle = gptviz.load(ckpt_root / NAME)
    tok = bundle.tokenizer
    clean = gptviz.trace(bundle.model, tok.encode(CLEAN))["logits"][-1]
    corrupt = gptviz.trace(bundle.model, tok.encode(CORRUPT))["logits"][-1].astype(np.float64)
    answer = int(clean.argmax())
    corrupt[answer] = -np.inf
    wrong = int(corrupt.argmax())
    a_name, w_name = tok.display([answer])[0], tok.display([wrong])[0]
    assert at.text_input(key="pt_answer").value == "" and at.text_input(key="pt_answer").placeholder == a_name
    assert at.text_input(key="pt_wrong").placeholder == w_name
    used = next(c.value for c in at.caption if c.value.startswith("Answer")).replace("\\", "")
    assert f"Answer **{a_name}** (the clean prompt’s top prediction)" in used
    assert f"wrong **{w_name}** (the corrupt prompt’s top prediction other than the answer)" in used
    at.text_input(key="pt_wrong").input("x")
    ok(at.run())
    assert "wrong **x** (typed)" in next(c.value for c in at.caption if c.value.startswith("Answer")).replace("\\", "")
