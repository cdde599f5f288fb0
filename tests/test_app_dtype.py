"""The sidebar's compute dtype: a bf16 checkpoint opens with no problem banner (its exact upcast is
a note), and computing in bfloat16 loads a second model (the cache is keyed by dtype) whose pages draw."""

from __future__ import annotations

import pytest
import torch
from apptest_helpers import app_session, ok, serve
from conftest import tiny_model

import gptviz

NAME = "tiny-bf16"


@pytest.fixture
def at(tmp_path, monkeypatch):
    model = tiny_model(vocab_size=len(list("abcdefghij ")))
    gptviz.save(model.to(torch.bfloat16), tmp_path / NAME, gptviz.CharTokenizer(list("abcdefghij ")))
    serve(monkeypatch, tmp_path, NAME)
    return ok(app_session(prompt="abc abc"))


def report_rows(at) -> dict[str, str]:
    """The load report's table on the Overview page: field -> value."""
    tables = [t.value for t in at.dataframe if "field" in t.value.columns]
    table = next(t for t in tables if "stored dtype" in set(t["field"]))
    return dict(zip(table["field"], table["value"]))


def test_a_bf16_checkpoint_has_no_banner_and_computes_in_the_dtype_chosen(at):
    assert not any("loaded with problems" in w.value for w in at.warning)
    assert at.selectbox(key="dtype").value == "auto"
    ok(at.switch_page("views/overview.py").run())
    rows = report_rows(at)
    assert rows["dtype"] == "float32" and rows["stored dtype"] == "bfloat16" and "exact" in rows["notes"]
    ok(at.selectbox(key="dtype").set_value("bfloat16").run())
    assert at.query_params["dtype"] == "bfloat16"
    assert report_rows(at)["dtype"] == "bfloat16"  # another model: the cache is keyed by dtype
    assert not any("loaded with problems" in w.value for w in at.warning)
    for page in ("views/shapes.py", "views/attention.py", "views/logit_lens.py", "views/next_token.py"):
        ok(at.switch_page(page).run())
