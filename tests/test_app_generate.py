"""The Generate page through AppTest: the steps on screen against gptviz.generate, the attention
row against a Trace, scrubbing, block_size, "use as prompt" and the plain-list session state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz import figures
from gptviz.bench.checkpoints import CONFIG, NAME

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "To be, or not to be"


@pytest.fixture
def at(ckpt_root, monkeypatch) -> AppTest:
    serve(monkeypatch, ckpt_root, NAME)
    return ok(app_session("views/generate.py", prompt=PROMPT))


def reference(root: Path, n: int, **kw) -> tuple[gptviz.Bundle, list[int], gptviz.Generation]:
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PROMPT, bundle.model.config.block_size)
    return bundle, ids, gptviz.generate(bundle.model, ids, n, **kw)


def test_the_page_starts_empty_and_says_what_to_do(at):
    assert at.title[0].value == "Generate"
    assert any("Next token" in i.value for i in at.info)
    assert at.session_state["gen"]["ids"] == []


def test_greedy_steps_equal_the_library_and_the_attention_row_a_trace(at, ckpt_root):
    at.slider(key="gen_temperature").set_value(0.0)
    at.number_input(key="gen_n").set_value(6)
    ok(at.button(key="gen_run").click().run())
    bundle, ids, g = reference(ckpt_root, 6, temperature=0)
    gen = at.session_state["gen"]
    assert gen["ids"] == g.new_ids
    np.testing.assert_allclose(gen["probs"], [s.prob for s in g.steps], rtol=1e-6)
    # plain lists of Python numbers, never tensors or arrays
    for name in ("ids", "probs", "top_ids", "top_probs"):
        assert type(gen[name]) is list
    assert all(type(i) is int for i in gen["ids"]) and all(type(p) is float for p in gen["probs"])
    assert all(type(x) is list and all(type(p) is float for p in x) for x in gen["top_probs"])
    assert at.metric[0].value == "6 of 6"
    assert at.metric[2].value == figures.percent(g.steps[-1].prob) == f"{g.steps[-1].prob:.1%}"
    # the last step's attention in layer 1, head 2 (chosen in the sidebar) equals the step's own row
    at.radio(key="layer").set_value(1)
    at.radio(key="head").set_value(2)
    ok(at.run())
    bars = array(figure(at, "gen_step_attention")["data"][0]["y"])
    np.testing.assert_allclose(bars, g.steps[-1].attention[1, 2], atol=1e-6)
    alts = figure(at, "gen_alternatives")["data"][0]
    np.testing.assert_allclose(array(alts["x"]), [p for _, p in g.steps[-1].top], rtol=1e-6)


def test_one_at_a_time_equals_n_at_once_and_scrubbing_shows_each_step(at, ckpt_root):
    at.slider(key="gen_temperature").set_value(1.0)
    at.number_input(key="gen_seed").set_value(42)
    for _ in range(4):
        ok(at.button(key="gen_step").click().run())
    _, ids, g = reference(ckpt_root, 4, temperature=1.0, seed=42)
    assert at.session_state["gen"]["ids"] == g.new_ids
    at.select_slider(key="gen_view").set_value(2)
    ok(at.run())
    assert at.metric[0].value == "2 of 4"
    bars = array(figure(at, "gen_step_attention")["data"][0]["y"])
    np.testing.assert_allclose(bars, g.steps[1].attention[0, 0], atol=1e-6)
    assert len(bars) == len(ids) + 2
    ok(at.button(key="gen_clear").click().run())
    assert at.session_state["gen"]["ids"] == []


def test_use_as_prompt_carries_the_text_to_every_page(at, ckpt_root):
    at.slider(key="gen_temperature").set_value(0.0)
    at.number_input(key="gen_n").set_value(5)
    ok(at.button(key="gen_run").click().run())
    bundle, ids, g = reference(ckpt_root, 5, temperature=0)
    ok(at.button(key="gen_use").click().run())
    text = bundle.tokenizer.decode(g.ids)
    assert at.session_state["prompt"] == text and at.query_params["prompt"] == text
    assert at.session_state["gen"]["ids"] == [], "a new prompt starts a new generation"
    ok(at.switch_page("views/next_token.py").run())
    assert at.title[0].value == "Next token"
    assert at.text_area(key="prompt").value == text


def test_generation_stops_at_block_size_and_says_so(at):
    at.checkbox(key="gen_slide").uncheck()
    at.slider(key="gen_temperature").set_value(0.0)
    at.number_input(key="gen_n").set_value(CONFIG["block_size"])
    ok(at.button(key="gen_run").click().run())
    room = CONFIG["block_size"] - len(PROMPT)
    assert len(at.session_state["gen"]["ids"]) == room
    assert any(f"block_size={CONFIG['block_size']}" in w.value for w in at.warning)
    assert any("block_size" in i.value for i in at.info)
    ok(at.run())  # the buttons drawn before the click ran were live; from the next run on they are off
    assert at.button(key="gen_step").disabled and at.button(key="gen_run").disabled
    assert any("block_size" in i.value for i in at.info)


def test_the_sliding_window_goes_past_block_size_and_shows_the_window_row(at, ckpt_root):
    """On by default, as nanoGPT's sample.py: the steps equal gptviz.generate(crop_context=True), and
    the attention row of a step past block_size covers the block_size tokens before it."""
    block = CONFIG["block_size"]
    assert at.checkbox(key="gen_slide").value
    at.slider(key="gen_temperature").set_value(0.0)
    at.number_input(key="gen_n").set_value(block)
    ok(at.button(key="gen_run").click().run())
    _, ids, g = reference(ckpt_root, block, temperature=0, crop_context=True)
    assert len(ids) > 10  # prompt + block_size new tokens: more than 10 steps slide
    assert at.session_state["gen"]["ids"] == g.new_ids and not at.warning
    assert any("sliding window" in i.value for i in at.info)
    bars = figure(at, "gen_step_attention")
    assert len(array(bars["data"][0]["y"])) == block
    np.testing.assert_allclose(array(bars["data"][0]["y"]), g.steps[-1].attention[0, 0], atol=1e-6)
    assert not at.button(key="gen_run").disabled


def test_generation_takes_the_forward_lock_step_by_step(at, monkeypatch):
    """Generate's forward passes run under caches.FORWARD, one pass at a time across sessions, and it
    is let go between steps (gptviz.generate's step_lock): 30 students pressing Generate 20 at once
    finished at p95 4.0-4.4 s side by side, 2.2-2.7 s this way (gptviz bench --classroom -- --generate)."""
    from gptviz.dashboard import caches

    locks, real = [], gptviz.generate
    monkeypatch.setattr(gptviz, "generate", lambda *a, **k: locks.append(k.get("step_lock")) or real(*a, **k))
    ok(at.button(key="gen_step").click().run())
    ok(at.button(key="gen_run").click().run())
    assert locks == [caches.FORWARD, caches.FORWARD]
