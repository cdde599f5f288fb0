"""The Logit attribution page through Streamlit's AppTest: the numbers on screen against the library's,
every way of choosing a token, and bad typed tokens."""

from __future__ import annotations

import numpy as np
import pytest
import test_app_health as health
from apptest_helpers import array, figure, ok
from streamlit.testing.v1 import AppTest
from test_app_health import ATTRIBUTION, metrics, reference

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import CONFIG

at, root = health.at, health.root  # the Health page's tests' checkpoints and session


def assert_shows(at: AppTest, df) -> None:
    """The metrics, the bars and the head grid on the page are the library's numbers."""
    shown = metrics(at)
    logit = next(v for k, v in shown.items() if k.startswith("The model's logit"))
    assert logit == f"{df.attrs['logit']:.4f}" and shown["Sum of the parts"] == f"{df['value'].sum():.4f}"
    assert shown["Frozen scale σ of the final norm"] == f"{df.attrs['sigma']:.4g}"
    bars = figure(at, "attr_bars")["data"][0]
    np.testing.assert_allclose(sorted(array(bars["x"])), sorted(df["value"]), rtol=1e-12)
    assert set(bars["y"]) == set(analysis.component_labels(df))
    z = array(figure(at, "attr_heads")["data"][0]["z"]).astype(np.float64)
    np.testing.assert_allclose(z, analysis.head_matrix(df, CONFIG["n_layer"], CONFIG["n_head"]), rtol=1e-12)
    assert "scale frozen" in at.info[0].value and "σ" in at.info[0].value


def test_attribution_defaults_to_the_top_token_at_the_last_position(at, root):
    ok(at.switch_page(ATTRIBUTION).run())
    assert at.title[0].value == "Logit attribution"
    bundle, t = reference(root)
    top = int(np.argmax(t["logits"][-1]))
    assert at.selectbox(key="attr_target").value == top
    df = gptviz.logit_attribution(bundle.model, t, top, -1)
    assert_shows(at, df)
    assert abs(df["value"].sum() - df.attrs["logit"]) < 1e-4


def test_attribution_with_a_baseline_a_typed_token_and_another_position(at, root):
    ok(at.switch_page(ATTRIBUTION).run())
    bundle, t = reference(root)
    second = int(np.argsort(-t["logits"][-1].astype(np.float64), kind="stable")[1])
    ok(at.selectbox(key="attr_baseline").set_value(second).run())
    top = at.selectbox(key="attr_target").value
    assert_shows(at, gptviz.logit_attribution(bundle.model, t, top, -1, baseline=second))
    assert "difference" in " ".join(metrics(at))

    ok(at.text_input(key="attr_target_text").input("q").run())
    q = bundle.tokenizer.encode("q")[0]
    assert_shows(at, gptviz.logit_attribution(bundle.model, t, q, -1, baseline=second))

    ok(at.text_input(key="attr_baseline_text").input("z").run())  # typed choices outlive a new position
    z = bundle.tokenizer.encode("z")[0]
    ok(at.select_slider(key="position").set_value(5).run())
    assert_shows(at, gptviz.logit_attribution(bundle.model, t, q, 5, baseline=z))


@pytest.mark.parametrize(
    "text, words",
    [("~", "does not know 1 character"), ("ab", "that text is 2 tokens"), ("é", "does not know")],
)
def test_a_bad_typed_token_is_a_message(at, text, words):
    ok(at.switch_page(ATTRIBUTION).run())
    at.text_input(key="attr_target_text").input(text).run()
    assert not at.exception
    assert any(words in e.value for e in at.error), [e.value for e in at.error]
    assert not at.get("plotly_chart")
    ok(at.text_input(key="attr_target_text").input("").run())  # and the page recovers
    assert at.get("plotly_chart")
