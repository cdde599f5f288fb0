"""Progress and Cancel on the Attribution, Timeline and Corpus (scan) pages, through AppTest.

A click on Cancel arrives while the step runs; here it is made to arrive at the step's first report: the
library's own progress callback is wrapped so that the page's cancel flag is set just before the report,
as the button's callback sets it. The page must then say the step was cancelled, keep no result, and
run it afresh on Run again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit as st
from apptest_helpers import app_session, ok, serve
from streamlit.testing.v1 import AppTest

from gptviz import analysis
from gptviz.bench.checkpoints import NAME, make_overtime_checkpoints
from gptviz.dashboard.corpus import scan_form
from gptviz.dashboard.panels import comparisons
from gptviz.scanning import jobs as scan_jobs


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return make_overtime_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def at(root, monkeypatch) -> AppTest:
    serve(monkeypatch, root, NAME)
    return ok(app_session(timeout=90, prompt="To be, or not to be"))


def cancel_once(monkeypatch, module, name: str, step: str) -> list:
    """Wrap module.name (a library step taking progress=) so that its first call is cancelled at its first
    report, as a click on the page's Cancel would; later calls run. Returns the reports each call saw."""
    real, calls = getattr(module, name), []

    def wrapped(*a, progress=None, **k):
        seen: list = []
        calls.append(seen)

        def report(p):
            seen.append(p)
            if len(calls) == 1:
                st.session_state[f"_cancelled_{step}"] = True  # what the Cancel button's callback does
            progress(p)

        return real(*a, progress=report, **k)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def infos(at: AppTest) -> list[str]:
    return [i.value for i in at.info]


def test_attribution_cancelled_then_run_again(at, monkeypatch):
    calls = cancel_once(monkeypatch, analysis, "logit_attribution", "attr")
    at = ok(at.switch_page("views/attribution.py").run())
    assert any("Adding up what every component writes: cancelled" in i for i in infos(at))
    assert not at.get("plotly_chart") and len(calls[0]) == 1  # stopped at its first report: nothing drawn
    ok(at.button(key="again_attr").click().run())
    assert {"attr_bars", "attr_heads"} <= {e.key for e in at.get("plotly_chart")}
    n_layer = 2
    assert [p.done for p in calls[1]] == list(range(n_layer + 1))  # a bar from 0 to every layer
    assert not any("cancelled" in i for i in infos(at))


def test_timeline_cancelled_then_run_again(at, monkeypatch):
    calls = cancel_once(monkeypatch, comparisons, "timeline", "timeline")
    at = ok(at.switch_page("views/timeline.py").run())
    assert at.selectbox(key="tl_run").value == "tiny-run"
    assert any("Running the prompt through 3 checkpoints: cancelled" in i for i in infos(at))
    assert "tl_loss" not in {e.key for e in at.get("plotly_chart")}
    ok(at.button(key="again_timeline").click().run())
    assert {"tl_loss", "tl_heads"} <= {e.key for e in at.get("plotly_chart")}
    assert calls[1][-1].done == calls[1][-1].total == 3


def test_a_running_scan_shows_its_progress_and_cancel_stops_its_process(at, monkeypatch, tmp_path):
    """The scan is a real process that sleeps instead of scanning, with the progress file a scan writes."""
    monkeypatch.setenv(scan_jobs.SCANS_ENV, str(tmp_path / "scans"))
    monkeypatch.setattr(scan_jobs, "_JOBS", {})
    real = subprocess.Popen

    def sleeper(cmd, **kw):
        progress = Path(cmd[cmd.index("--progress-file") + 1])
        progress.write_text(json.dumps(dict(state="running", done=3, total=12)))  # as the scan reports
        return real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)

    monkeypatch.setattr(scan_jobs.subprocess, "Popen", sleeper)
    at = ok(at.switch_page("views/corpus.py").run())
    ok(at.radio(key="corpus_mode").set_value("run a new scan").run())
    ok(at.button(key="corpus_run").click().run())
    job = scan_jobs.Job(**at.session_state[scan_form.JOB])
    proc = scan_jobs._JOBS[job.id]
    try:
        at = ok(at.run())
        bar = at.get("progress")[0]
        assert "Scanning: 3 of 12 windows" in bar.proto.text and bar.proto.value == 25
        ok(at.button(key="corpus_cancel").click().run())
        assert proc.poll() is not None  # the process is gone
        assert any("Scan cancelled" in i for i in infos(at))
        assert scan_form.JOB not in at.session_state and not at.get("progress")
    finally:
        scan_jobs.stop_scan(job)
