"""The classroom pages through AppTest: the worked examples show the seeds' numbers and the mask
switch's leak, and the step-by-step page walks every step with Next, with the Trace's shapes, a
step in the URL, and a block chooser. Fixture checkpoint: conftest.py's ckpt_root."""

from __future__ import annotations

import math
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.analysis import walkthrough, worked
from gptviz.bench.checkpoints import NAME

ROOT = Path(__file__).resolve().parents[1]
WORKED, FORWARD = "views/worked_examples.py", "views/forward_pass.py"


@pytest.fixture
def env(ckpt_root, monkeypatch):
    serve(monkeypatch, ckpt_root, NAME)
    return ckpt_root


def open_page(page: str, **query) -> AppTest:
    return ok(ok(app_session(**query)).switch_page(page).run())


def table(at: AppTest, label: str) -> np.ndarray:
    """The numbers of the table whose corner (index name) is `label`: full precision, as sent."""
    found = [d.value for d in at.dataframe if d.value.index.name == label]
    assert len(found) == 1, (label, [d.value.index.name for d in at.dataframe])
    return found[0].to_numpy()


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_worked_examples_show_the_seeds_numbers(env):
    at = open_page(WORKED)
    w = table(at, "weights = softmax(masked scores)")
    assert np.array_equal(np.round(w, 4), [[1, 0, 0], [0.4994, 0.5006, 0], [0.3334, 0.3332, 0.3334]])
    assert np.allclose(table(at, "output = weights·V")[1], [0.06001202, 0.05998798], atol=5e-8)
    assert metric(at, "Future attention mass (weights above the diagonal)") == "0.0000"
    assert np.array_equal(np.round(table(at, "x = table[ids] + positions")[-1], 2), [0.1, 0.3, 0.8, 1.1])
    assert np.array_equal(np.round(table(at, "q·kᵀ")[2], 2), [0.2, 1.28, 0.96])
    assert np.array_equal(np.round(table(at, "scaling")[2], 3), [0.499, 0.33, 0.17])
    assert np.array_equal(np.round(table(at, "masked weights")[3], 3), [0.213, 0.078, 0.129, 0.579])
    assert metric(at, "Future mass without the mask") == "1.9404"
    assert metric(at, "Future mass with the mask") == "0.0000"
    assert np.array_equal(np.round(table(at, "FFN output = hidden·w2")[-1], 3), [0.302, 0.468, 0.386, 0.469])
    assert metric(at, "Top token") == "hub" and metric(at, "Top probability") == "0.3598"
    # inputs are editable tables, each with its own key
    assert at.get_by_key("w0_X") is not None and at.get_by_key("w4_W") is not None


def test_mask_switch_shows_the_leak(env):
    at = open_page(WORKED)
    at.toggle(key="w0_mask").set_value(False).run()
    ok(at)
    # By hand, from the seed's Q and K: mask off, rows 0 and 1 spend this much on later keys.
    Q = [[0.01, 0.07], [0.11, 0.05], [-0.01, 0.01]]
    K = [[0.07, 0.07], [0.11, 0.05], [0.0, 0.01]]
    e = [[math.exp((Q[i][0] * K[j][0] + Q[i][1] * K[j][1]) / math.sqrt(2)) for j in range(3)] for i in range(3)]
    hand = (e[0][1] + e[0][2]) / sum(e[0]) + e[1][2] / sum(e[1])
    assert metric(at, "Future attention mass (weights above the diagonal)") == f"{hand:.4f}" == "0.9976"
    assert table(at, "weights = softmax(masked scores)")[0, 2] > 0.3
    assert at.warning, "mask off says what it means"
    # the 4-token example: with the mask off, each row's future share, by hand
    at.toggle(key="w4_mask").set_value(False).run()
    s = worked.MASK_SCORES
    hand4 = sum(sum(math.exp(x) for x in row[i + 1 :]) / sum(math.exp(x) for x in row) for i, row in enumerate(s))
    assert metric(ok(at), "Future attention mass") == f"{hand4:.4f}"
    at.toggle(key="w4_mask").set_value(True).run()
    assert metric(ok(at), "Future attention mass") == "0.0000"
    assert np.all(np.triu(table(at, "masked weights"), 1) == 0.0)


def test_block_stats_and_lesson_links(env, ckpt_root):
    at = open_page(WORKED)
    stats = table(at, "block stats")
    bundle = gptviz.load(ckpt_root / NAME)
    ids = bundle.tokenizer.encode(at.session_state["prompt"])
    t = gptviz.trace(bundle.model, ids)
    x0 = t["embed"].astype(np.float64)
    assert stats[0, 1] == pytest.approx(x0.mean(), abs=1e-9) and stats[0, 2] == pytest.approx(x0.std(), abs=1e-9)
    assert stats.shape[0] == 1 + t.n_layer
    links = {el.proto.label: parse_qs(el.proto.query_string) for el in at.get("page_link")}
    for lesson in worked.LESSONS:
        q = links[lesson["title"]]  # a page link: the same tab, the same session
        assert q["layer"] == [str(lesson["layer"])] and q["head"] == [str(lesson["head"])]
        assert q["checkpoint"] == [lesson["checkpoint"]] and q["prompt"] == [lesson["prompt"]]
        assert "present" not in q
    # the walk-through, on the model and prompt chosen now, from its first step (counted from 1)
    q = links["One forward pass, step by step"]
    assert q["step"] == ["1"] and q["prompt"] == [at.session_state["prompt"]] and q["checkpoint"] == [NAME]


def test_links_keep_presentation_mode(env):
    at = open_page(WORKED, present="1")
    assert at.session_state["presentation"] is True and at.query_params["present"] == "1"
    for el in at.get("page_link"):
        assert parse_qs(el.proto.query_string)["present"] == ["1"], el.proto.label


def test_forward_pass_walks_every_step_with_the_traces_shapes(env, ckpt_root):
    at = open_page(FORWARD)
    bundle = gptviz.load(ckpt_root / NAME)
    t = gptviz.trace(bundle.model, bundle.tokenizer.encode(at.session_state["prompt"]))
    steps = walkthrough.forward_steps(bundle.model, t, 0)
    assert at.button(key="fp_back").disabled
    for i, s in enumerate(steps):
        assert at.session_state["fp_step"] == i and at.query_params["step"] == str(i + 1)  # 1-based in the URL
        assert at.get("progress")[0].proto.text == f"Step {i + 1} of {len(steps)}"
        assert at.subheader[0].value == s.title
        shape = s.shape if s.point is None else ((1, *t[s.point].shape) if s.key != "mask" else t[s.point].shape)
        assert any(m.value.startswith(f"#### shape {s.notation} = {shape} · ") for m in at.markdown), s.key
        link = next(el.proto for el in at.get("page_link") if el.proto.label.startswith("Link to this step"))
        assert parse_qs(link.query_string)["step"] == [str(i + 1)]
        if s.key not in ("next", "ids"):
            shown = at.table[0].value.to_numpy()
            assert shown.shape[0] <= 6 and shown.shape[1] <= 8
            assert np.array_equal(shown, walkthrough.view_slice(s, head=0))  # real values, not a picture
        if i < len(steps) - 1:
            ok(at.button(key="fp_next").click().run())
    assert at.button(key="fp_next").disabled
    best = int(t["logits"][-1].argmax())
    assert metric(at, "The next token") == bundle.tokenizer.display([best])[0]
    ok(at.button(key="fp_back").click().run())
    assert at.session_state["fp_step"] == len(steps) - 2


def test_a_step_link_opens_that_step_and_block(env):
    at = open_page(FORWARD, step="9", block="1")  # ?step=9 is the step the page calls "Step 9 of N"
    assert at.session_state["fp_step"] == 8 and at.session_state["fp_block"] == 1
    assert at.get("progress")[0].proto.text.startswith("Step 9 of ")
    assert at.subheader[0].value.startswith("Block 1:")
    assert at.query_params["step"] == "9" and at.query_params["block"] == "1"
    at.selectbox(key="fp_block").set_value(0).run()
    assert ok(at).subheader[0].value.startswith("Block 0:")
    # a step past the end, or a bad one, opens the first step rather than failing
    for bad in ("99", "0", "-1", "x"):
        at = open_page(FORWARD, step=bad)
        assert at.session_state["fp_step"] == 0 and at.query_params["step"] == "1"


def test_presentation_puts_the_view_controls_on_the_page(env):
    at = open_page("views/attention.py", present="1")
    assert at.session_state["presentation"] is True
    main_keys = {r.key for r in at.main.radio}
    side_keys = {r.key for r in at.sidebar.radio}
    assert {"layer", "head"} <= main_keys and not {"layer", "head"} & side_keys
    at.toggle(key="presentation").set_value(False).run()
    assert {"layer", "head"} <= {r.key for r in ok(at).sidebar.radio}
    assert "present" not in at.query_params


def test_a_link_in_the_same_session_brings_its_choices(env):
    at = open_page("views/attention.py")
    assert at.session_state["layer"] == 0
    # what a page link does: the same session, a new URL (Streamlit passes it with the rerun)
    at.query_params.clear()
    at.query_params.update({"checkpoint": NAME, "prompt": "abc", "layer": "1", "head": "1", "present": "1"})
    ok(at.run())
    assert at.session_state["layer"] == 1 and at.session_state["head"] == 1
    assert at.session_state["prompt"] == "abc" and at.session_state["presentation"] is True
    # the session's own URL, read back on the next rerun, changes nothing the widgets chose
    at.radio(key="head").set_value(0).run()
    assert ok(at).session_state["head"] == 0 and at.query_params["head"] == "0"


def test_a_class_opening_a_page_builds_its_figures_once(env, monkeypatch):
    from gptviz import figures

    built = []
    for name in ("attention_heatmap", "topk_bars", "head_grid", "attention_lines"):
        real = getattr(figures, name)
        monkeypatch.setattr(figures, name, lambda *a, _real=real, _n=name, **k: built.append(_n) or _real(*a, **k))
    first = open_page("views/attention.py")
    after_first = len(built)
    assert after_first >= 3
    for _ in range(3):  # three more students open the same page on the same prompt
        again = open_page("views/attention.py")
        assert again.get_by_key("attn_heatmap").proto.spec == first.get_by_key("attn_heatmap").proto.spec
    assert len(built) == after_first, built[after_first:]  # served from the caches, not rebuilt
    at = open_page("views/overview.py")
    n = len(built)
    open_page("views/overview.py")
    assert len(built) == n and at.get_by_key("overview_heatmap") is not None


def test_worked_examples_a_class_can_follow(env):
    at = open_page(WORKED)
    # query and key labels on the matrices; the mask as True / False; −∞ written as a class writes it
    scores = next(d.value for d in at.dataframe if d.value.index.name == "scores = Q·Kᵀ ÷ √d_k")
    assert list(scores.index) == ["query t0", "query t1", "query t2"] and list(scores.columns)[0] == "key t0"
    mask = table(at, "mask")
    assert mask.dtype == bool and mask.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    masked = table(at, "masked scores")
    assert masked[0, 1] == "−∞" and "-Infinity" not in str(masked) and masked[0, 0] != "−0.0000"
    for d in at.dataframe:  # nothing that rounds to zero is sent as a negative number
        v = d.value.to_numpy()
        if v.dtype.kind == "f":
            assert not np.any((np.abs(v) < 5e-5) & np.signbit(v)), d.value.index.name
    # a heatmap beside each weights table, with the same numbers
    heat = figure(at, "heat_weights = softmax(masked scores)")
    z = array(heat["data"][0]["z"]).astype(float)
    assert np.allclose(np.nan_to_num(z), table(at, "weights = softmax(masked scores)"), atol=1e-6)
    for label in ("masked weights", "leak: without mask", "leak: with mask"):
        assert at.get_by_key(f"heat_{label}") is not None
    assert any("its own inputs" in i.value for i in at.info)  # the support reply says so
    # the sharper preset: attention visibly chooses; reset brings the textbook's numbers back
    at.segmented_control(key="w0_preset").set_value("sharp").run()
    w = table(ok(at), "weights = softmax(masked scores)")
    assert w[1, 0] > 0.99 and w[2, 1] > 0.99
    at.toggle(key="w0_mask").set_value(False).run()
    at.button(key="worked_reset").click().run()
    assert ok(at).session_state["w0_preset"] == "textbook" and at.toggle(key="w0_mask").value is True
    assert np.round(table(at, "weights = softmax(masked scores)"), 4)[1].tolist() == [0.4994, 0.5006, 0]


def test_block_stats_do_not_call_healthy_growth_drifting(env):
    at = open_page(WORKED)
    caption = next(c.value for c in at.caption if "population std" in c.value)
    stats = table(at, "block stats")
    assert "drifting" not in caption or "doubles in every block" in caption
    assert f"{stats[0, 2]:.4f}" in caption  # the numbers it speaks of are the table's
