"""The Health page through Streamlit's AppTest: the library's findings on screen, the same checks from
the command line, and a NaN-weight checkpoint that shows its failure. Runs on fixture checkpoints built
in a temp folder (the Logit attribution page's tests share them)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import app_session, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
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
