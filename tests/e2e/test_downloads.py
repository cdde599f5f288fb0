"""A download made only when its button is pressed (widgets.download_later), in a real server: Streamlit
calls its callable on another thread then, which finds the run in the caches by its key. The file a
person gets is the head's whole map, as the library computes it for the same prompt."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import Page

import gptviz
from gptviz.bench.browser import ARTIFACTS, open_on_prompt, streamlit_server
from gptviz.bench.checkpoints import NAME, make_checkpoints

PROMPT = "To be, or not to be"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    with streamlit_server(root, NAME, ARTIFACTS / "streamlit-downloads.log") as url:
        yield root, url


def test_the_overview_weights_are_made_when_the_button_is_pressed(page: Page, served, tmp_path):
    root, url = served
    open_on_prompt(page, url, PROMPT)
    with page.expect_download(timeout=60_000) as pressed:
        page.get_by_role("button", name="these weights (.npz)").click()
    path = tmp_path / "weights.npz"
    pressed.value.save_as(path)
    assert pressed.value.suggested_filename == "attention_L0_H0.npz"
    bundle = gptviz.load(root / NAME)
    ids = bundle.tokenizer.encode(PROMPT)
    t = gptviz.trace(bundle.model, ids)
    with np.load(path) as npz:
        np.testing.assert_array_equal(npz["weights"], gptviz.analysis.attention_matrix(t, 0, 0))
        assert npz["weights"].shape == (len(ids), len(ids))
        assert len(npz["tokens"]) == len(ids)
