"""The Logit attribution and Health pages through Streamlit's AppTest: the numbers on screen against
the library's, every way of choosing a token, bad typed tokens, and a NaN-weight checkpoint that
shows its failure. Runs on fixture checkpoints built in a temp folder."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME, make_checkpoints
from gptviz.cli import main

PROMPT = "To be, or not to be: that is the question."
NAN_NAME = "nan-char"
ATTRIBUTION, HEALTH = "views/attribution.py", "views/health.py"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    torch.manual_seed(7)
    broken = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    with torch.no_grad():
        broken.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
    gptviz.save(broken, root / NAN_NAME, gptviz.CharTokenizer(CHARS))
    return root


@pytest.fixture
def at(root, monkeypatch) -> AppTest:
    serve(monkeypatch, root, NAME)
    return ok(app_session(prompt=PROMPT))


def reference(root: Path, name: str = NAME):
    bundle = gptviz.load(root / name)
    ids = gptviz.encode_prompt(bundle.tokenizer, PROMPT, bundle.model.config.block_size)
    return bundle, gptviz.trace(bundle.model, ids, bundle.tokenizer)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


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


def shown_table(at: AppTest):
    df = at.dataframe[0].value
    return df.data if hasattr(df, "data") else df  # a Styler keeps its frame in .data


def test_health_page_shows_the_librarys_findings_and_the_command(at, root):
    ok(at.switch_page(HEALTH).run())
    assert at.title[0].value == "Health"
    bundle, t = reference(root)
    expected = gptviz.health(bundle.model, t, bundle.tokenizer)
    table = shown_table(at)
    assert list(table["name"]) == [f.name for f in expected]
    assert list(table["status"]) == [f.status for f in expected]
    for row, f in zip(table.itertuples(), expected):
        assert row.message == f.message
        assert (row.value is None or np.isnan(row.value)) if f.value is None else row.value == pytest.approx(f.value)
    assert "fail" not in set(table["status"])
    assert at.warning and "Health: warn" in at.warning[0].value  # random weights: every head is uniform
    code = at.code[0].value
    assert code.startswith("gptviz check --checkpoint ") and str(root / NAME) in code
    # the command shown runs the same checks, here, with the same verdicts
    args = shlex.split(code)[1:] + ["--json"]
    assert main(args) == 0


def test_health_command_runs_the_same_checks(at, root, capsys):
    ok(at.switch_page(HEALTH).run())
    statuses = list(shown_table(at)["status"])
    assert main(shlex.split(at.code[0].value)[1:] + ["--json"]) == 0
    assert [f["status"] for f in json.loads(capsys.readouterr().out)] == statuses


def test_a_nan_weight_checkpoint_shows_the_failure(at):
    at.selectbox(key="ckpt_choice").set_value(NAN_NAME).run()
    at.switch_page(HEALTH).run()
    assert not at.exception, [e.value for e in at.exception]
    table = shown_table(at)
    status = dict(zip(table["name"], table["status"]))
    assert status["nonfinite_weights"] == "fail" and status["nonfinite_activations"] == "fail"
    errors = " ".join(e.value for e in at.error).replace("\\", "")  # the page escapes Markdown
    assert "Health: fail" in errors and "fail · nonfinite_weights" in errors
    assert "transformer.h.1.mlp.c_fc.weight" in errors
    at.switch_page(ATTRIBUTION).run()
    assert not at.exception and "NaN or Inf" in at.warning[-1].value  # said, not drawn as if it added up
    assert not at.get("plotly_chart")
