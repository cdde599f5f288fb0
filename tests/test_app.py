"""The dashboard as a whole, through Streamlit's AppTest: it opens on a result, every page renders
(on the fixture and on every shipped checkpoint), presentation mode, and an unexpected error is a
message. Each page's own tests are in test_app_<page>.py; the fixtures are in conftest.py."""

from __future__ import annotations

import pytest
import streamlit as st
from apptest_helpers import (
    PAGES,
    PROMPT,
    ROOT,
    app_session,
    errors,
    figure,
    ok,
    run_prompt,
)

from gptviz import analysis
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard import state
from gptviz.dashboard.sources import checkpoints


def test_first_open_shows_a_result_on_the_default_model(at):
    assert at.title[0].value == "Overview"
    assert {"overview_topk", "overview_heatmap"} <= {e.key for e in at.get("plotly_chart")}
    assert at.query_params["checkpoint"] == NAME
    assert at.query_params["prompt"] == state.PRESET_PROMPT


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders(at, path):
    run_prompt(at, PROMPT)
    ok(at.switch_page(path).run())
    assert at.title[0].value == PAGES[path]
    assert at.get("plotly_chart"), "every page draws at least one figure"


def test_presentation_mode_enlarges_fonts(at):
    small = figure(at, "overview_heatmap")["layout"]["font"]["size"]
    ok(at.toggle(key="presentation").set_value(True).run())
    assert figure(at, "overview_heatmap")["layout"]["font"]["size"] > small


def test_an_unexpected_error_is_a_message_not_a_traceback(at, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(analysis, "top_k", broken)
    at.run()
    assert not at.exception
    assert "Internal error while drawing this page (RuntimeError: boom)" in errors(at)


SHIPPED = sorted(p.name for p in (ROOT / "checkpoints").glob("*") if (p / "config.json").is_file())


@pytest.mark.skipif(not SHIPPED, reason="no shipped checkpoint in checkpoints/ yet")
@pytest.mark.parametrize("name", SHIPPED)
def test_every_page_renders_on_the_shipped_checkpoints(name, monkeypatch):
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(ROOT / "checkpoints"))
    monkeypatch.setenv(checkpoints.DEFAULT_ENV, name)
    st.cache_resource.clear()
    at = ok(app_session())
    for path, title in PAGES.items():
        ok(at.switch_page(path).run())
        assert at.title[0].value == title and at.get("plotly_chart")
