"""The Next token page: the top-k bars are the softmax of the logits, temperature re-softmaxes without
running the model, and the token lookup refuses what is not a token."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import (
    PROMPT,
    RUNS,
    array,
    errors,
    figure,
    ok,
    reference_trace,
    run_prompt,
)

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import CHARS, NAME


def test_topk_bars_equal_softmax_of_the_logits(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/next_token.py").run())
    bars = figure(at, "topk_bars")["data"][0]
    t = reference_trace(env, PROMPT)
    probs = torch.softmax(torch.tensor(t["logits"][-1], dtype=torch.float64), -1)
    top = torch.topk(probs, 10)
    np.testing.assert_allclose(array(bars["x"]), top.values.numpy(), rtol=1e-12)
    tok = gptviz.load(env / NAME).tokenizer
    assert [y.split(" ", 1)[1] for y in bars["y"]] == tok.display(top.indices.tolist())


def test_temperature_resoftmaxes_without_running_the_model(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/next_token.py").run())
    runs = len(RUNS)
    ok(at.slider(key="temperature").set_value(2.0).run())
    x = array(figure(at, "topk_bars")["data"][0]["x"])
    logits = reference_trace(env, PROMPT)["logits"][-1]
    np.testing.assert_allclose(x, np.sort(analysis.softmax(logits, 2.0))[::-1][:10], rtol=1e-12)
    assert len(RUNS) == runs


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("999999", "outside the vocabulary"),
        ("-1", "not one"),
        ("1.5", "not one"),
        ("99999999999999999999999", "outside the vocabulary"),
        ("True", "not one"),
        ("²", "not one"),
        (str(len(CHARS)), "outside the vocabulary"),
    ],
)
def test_token_lookup_refuses_bad_ids(ids_only, typed, expected):
    at = ok(ids_only.switch_page("views/next_token.py").run())
    at.text_input(key="lookup_token").input(typed).run()
    assert expected in errors(at) and "Internal error" not in errors(at)
    assert "Rank" not in {m.label for m in at.metric}
    ok(at.text_input(key="lookup_token").input(str(len(CHARS) - 1)).run())
    assert {m.label: m.value for m in at.metric}["Rank"].endswith(f"of {len(CHARS)}")
