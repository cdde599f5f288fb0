"""Browser fixtures: a dashboard server on a fixture checkpoint, Debian's Chromium via
pytest-playwright. Screenshots go to artifacts/e2e (pytest-playwright wipes test-results/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gptviz.bench.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT, streamlit_server
from gptviz.bench.checkpoints import NAME, make_checkpoints

expect.set_options(timeout=30_000)  # the first Plotly chart takes seconds on 2 cores


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:  # every test in this folder drives a real server in Chromium
        if here in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def streamlit_url(tmp_path_factory):
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    with streamlit_server(root, NAME, ARTIFACTS / "streamlit.log") as url:
        yield url


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": VIEWPORT}


@pytest.fixture(scope="session")
def base_url(streamlit_url):
    return streamlit_url


@pytest.fixture
def shot():
    """Save a screenshot of the page as a test artifact: shot(page, "name")."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(page, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path))
        return path

    return save
