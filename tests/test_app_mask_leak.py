"""The Mask leak page through AppTest: it runs without an exception, the switch turns the future mass
from exactly 0 to the value the library computes, and with the shipped leaky model beside the fixture
it states both losses (mask off far below mask on) and what the model writes. Fixture checkpoints are
built in a temp folder (conftest.py's make_checkpoints)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apptest_helpers import app_session, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.analysis import leak
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard.sources import checkpoints

ROOT = Path(__file__).resolve().parents[1]
PAGE = "views/mask_leak.py"
LEAKY = "shakespeare-char-leaky"
MASS = "Future attention mass, layer 0 head 0"


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory) -> Path:
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    shutil.copytree(ROOT / "checkpoints" / LEAKY, root / LEAKY)
    return root


@pytest.fixture
def env(ckpt_root, monkeypatch):
    serve(monkeypatch, ckpt_root, NAME)
    return ckpt_root


def open_page() -> AppTest:
    return ok(ok(app_session(timeout=120)).switch_page(PAGE).run())


def metric(at: AppTest, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert len(found) == 1, (label, [m.label for m in at.metric])
    return found[0]


def test_switch_shows_the_weights_reaching_into_the_future(env):
    at = open_page()
    assert metric(at, MASS) == "0.0000"
    assert len(at.get("plotly_chart")) >= 3  # both heatmaps and the loss bars
    ok(at.toggle(key="leak_mask").set_value(False).run())
    shown = float(metric(at, MASS))
    assert shown > 0
    # the number the library computes on the same model and prompt (the sidebar's default prompt)
    bundle = gptviz.load(env / NAME)
    ids = bundle.tokenizer.encode(at.text_area(key="prompt").value)
    want = leak.mask_leak(bundle.model, ids).unmasked.future_mass[0, 0]
    assert shown == pytest.approx(want, abs=6e-5)
    assert any("Mask off" in w.value for w in at.warning)
    # and back on: 0 again
    ok(at.toggle(key="leak_mask").set_value(True).run())
    assert metric(at, MASS) == "0.0000"


def test_leaky_model_losses_and_text(env):
    at = open_page()
    off = float(metric(at, "Loss without the mask (as it trained)"))
    on = float(metric(at, "Loss with the mask (as it is used)"))
    assert off < 0.5 * on, (off, on)
    written = [c.value for c in at.code]
    assert len(written) == 2 and all(w.startswith("ROMEO.\n") and len(w) > 20 for w in written)


def test_without_the_leaky_model_the_page_says_so(env, tmp_path, monkeypatch):
    root = make_checkpoints(tmp_path)
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, str(root))
    at = open_page()
    assert any(LEAKY in i.value for i in at.info)
