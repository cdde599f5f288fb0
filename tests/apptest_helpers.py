"""What every AppTest module shares: the app's path, the no-error check, and reading a Plotly
figure (and its base64-encoded arrays) back from the page."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import streamlit as st
from streamlit.testing.v1 import AppTest

from gptviz.dashboard import sources

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def serve(monkeypatch, root: Path, default: str) -> None:
    """Point the dashboard at a folder of checkpoints, opening on `default`, with cold caches:
    st.cache_resource is process-wide, shared by every AppTest in the run."""
    monkeypatch.setenv(sources.CHECKPOINTS_ENV, str(root))
    monkeypatch.setenv(sources.DEFAULT_ENV, default)
    st.cache_resource.clear()


def app_session(page: str | None = None, timeout: int = 60, **query) -> AppTest:
    """A new session of the app, opened with these query parameters and run, then switched to `page`
    (a script path) if given. Not checked: callers say what they expect (ok())."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params.update(query)
    at.run()
    return at.switch_page(page).run() if page else at


def ok(at: AppTest) -> AppTest:
    """No exception and no error message on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def figure(at: AppTest, key: str) -> dict:
    """The Plotly figure drawn under a widget key, as its JSON."""
    return json.loads(at.get_by_key(key).proto.spec)


def array(v) -> np.ndarray:
    """Plotly >= 6 writes NumPy data as base64 `bdata`; lists stay lists."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(s) for s in v["shape"].split(",")]) if "shape" in v else a
    return np.asarray(v)
