"""A large model's run keeps only what the open page reads (pages.PageSpec.reads). GPTVIZ_FULL_RUN_MB=0
makes the fixture model count as large: every page then shows the numbers a full run shows, a page switch
reuses a cached run that holds what the new page reads, and the runs hold less than a full one."""

from __future__ import annotations

import json

import pytest
import streamlit as st
from apptest_helpers import app_session, ok, serve

from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard import caches, pages

PROMPT = "To be, or not to be: that is the question."
PER_PAGE = [p for p in pages.PAGES if p.reads is not None]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def runs(root, monkeypatch) -> list:
    """Every run the model really does, as (names asked for, Trace), from a cold start."""
    serve(monkeypatch, root, NAME)
    caches.clear_runs()
    done: list = []
    real = caches.trace

    def counted(*a, **k):
        t = real(*a, **k)
        done.append((k.get("names"), t))
        return t

    monkeypatch.setattr(caches, "trace", counted)
    return done


def page_data(at) -> dict:
    """Every figure's data and every table's values on the page, by widget key or position."""
    figures = {e.key: json.loads(e.proto.spec)["data"] for e in at.get("plotly_chart")}
    tables = {i: t.value.to_json() for i, t in enumerate(at.dataframe)}
    return {"figures": figures, "tables": tables}


def test_a_small_models_one_run_keeps_every_name(runs):
    ok(app_session(prompt=PROMPT))
    assert [names for names, _ in runs] == [None]


def test_each_page_shows_from_its_own_run_what_a_full_run_shows(runs, monkeypatch):
    at = ok(app_session(prompt=PROMPT))
    full = {}
    for p in PER_PAGE:
        full[p.key] = page_data(ok(at.switch_page(p.file).run()))
    assert len(runs) == 1 and runs[0][0] is None
    full_bytes = runs[0][1].nbytes
    monkeypatch.setenv(caches.FULL_RUN_ENV, "0")
    st.cache_resource.clear()
    caches.clear_runs()
    runs.clear()
    at = ok(app_session(prompt=PROMPT))
    for p in PER_PAGE:
        assert page_data(ok(at.switch_page(p.file).run())) == full[p.key], p.key
    assert runs and all(names is not None for names, _ in runs)
    assert all(t.nbytes < full_bytes for _, t in runs)


def test_a_page_switch_reuses_a_cached_run_that_holds_what_the_page_reads(runs, monkeypatch):
    monkeypatch.setenv(caches.FULL_RUN_ENV, "0")
    at = ok(app_session(prompt=PROMPT))  # the Overview: the logits and the attention maps
    assert len(runs) == 1
    overview = runs[0][1]
    assert "blocks.0.attn.weights" in overview and "blocks.0.attn.v" not in overview
    assert "blocks.1.attn.scores" in overview  # held q, k and mask give the scores too: the Attention page's
    for page in ("views/attention.py", "views/next_token.py"):
        ok(at.switch_page(page).run())
    assert len(runs) == 1
    ok(at.switch_page("views/qkv.py").run())  # v is not held: a run of what this page reads
    assert len(runs) == 2 and "blocks.0.attn.v" in runs[1][1]
    for page in ("views/overview.py", "views/attention.py", "views/qkv.py"):
        ok(at.switch_page(page).run())
    assert len(runs) == 2
