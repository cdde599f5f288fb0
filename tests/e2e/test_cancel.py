"""The Cancel on the first run's bar, in a real Chromium: a click made while the model runs stops it at
its next report (Streamlit reruns the page there), the page says so, and the run is not made again
until Run again. A random Llama written as the Hub ships one (bf16 shards), small on disk but slow to
run on a long prompt of token ids, so that the bar is drawn (after SHOW_AFTER_S) seconds before the
run ends. The load's bar is the same bar (tests/test_app_load_progress.py covers both in AppTest).
One server for the module."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run
from gptviz.bench.load import SHAPES, write_checkpoint
from gptviz.config import GPTConfig

# 3 blocks of C 1,024 over 1,500 positions: a second or more a block on 2 cores, 52 MB of weights on disk
SLOW = GPTConfig(**dict(SHAPES["tiny"], n_layer=3, n_embd=1024, n_head=8, n_kv_head=4, n_inner=4096, block_size=2048))
PROMPT = ",".join(str(1 + i % 500) for i in range(1500))


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    write_checkpoint(SLOW, root / "slow")
    with streamlit_server(root, "slow", ARTIFACTS / "streamlit-cancel.log") as u:
        yield u


def test_cancel_stops_the_first_run_until_run_again(url, page: Page):
    page.goto(f"{url}/?prompt={PROMPT}")
    cancel = page.get_by_role("button", name="Cancel")
    cancel.wait_for(timeout=120_000)  # drawn once the run has taken SHOW_AFTER_S
    expect(page.get_by_text("Running the model: ")).to_be_visible()
    cancel.click()
    expect(page.get_by_text("Running the model: cancelled.")).to_be_visible(timeout=120_000)
    wait_for_app_run(page)
    page.screenshot(path=str(ARTIFACTS / "cancelled-run.png"))
    expect(page.get_by_text("Overview", exact=True)).to_have_count(0)  # the page has no run to draw
    page.wait_for_timeout(1000)
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)  # not started again meanwhile
    page.get_by_role("button", name="Run again").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible(timeout=180_000)
    wait_for_app_run(page, timeout=180_000)
