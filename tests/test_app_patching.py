"""The Patching page through Streamlit's AppTest: the sweep on screen against the library run directly,
bad inputs as one-line messages, and the presets' claims on the shipped shakespeare-char checkpoint measured."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import array, figure, ok
from test_app_interventions import CLEAN, CORRUPT, SHIPPED, needs_shipped, open_page

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard.panels import edited_runs


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
    monkeypatch.setattr(edited_runs.st, "session_state", state)
    edited_runs.change_one((0, 1, 2), tok, 3)
    assert "exactly one" in state["pt_change_error"] and "pt_corrupt" not in state
    state["pt_new"] = "c"
    edited_runs.change_one((0, 1, 2), tok, 3)
    assert state["pt_corrupt"] == "acc" and state["pt_change_error"] == ""


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
