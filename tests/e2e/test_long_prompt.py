"""The dashboard at full context on a model of GPT-2 small's layout (12 layers, 12 heads, 50,257 ids,
1,024 positions; narrower, C = 192, so that CI's two cores run it in seconds: what reaches the
browser depends on layers, heads, T and V, not on C): 1,024-token prompts, every page drawn in a
real Chromium, and no chart larger than 3 MB on the wire.

How long each page takes is written to artifacts/e2e/long_prompt.json: a record, not a test
(`gptviz bench --dashboard -- --long` times the full-width model next to its forward pass)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import (
    ARTIFACTS,
    enter_prompt,
    long_prompt,
    open_on_prompt,
    record_frames,
    streamlit_server,
    tour,
)
from gptviz.bench.checkpoints import GPT2_SMALL_NAME, make_gpt2_small_checkpoint

T = 1024
MAX_FIGURE_BYTES = 3 * 2**20
SLOW = 300_000  # ms: a loaded machine's two cores, 1,024 tokens through 12 layers


@pytest.fixture(scope="module")
def gpt2_small_url(tmp_path_factory):
    root = make_gpt2_small_checkpoint(tmp_path_factory.mktemp("gpt2-small"), n_embd=192)
    with streamlit_server(root, GPT2_SMALL_NAME, ARTIFACTS / "streamlit-gpt2-small.log") as url:
        yield url


def test_every_page_at_full_context(page: Page, gpt2_small_url, shot):
    frames = record_frames(page)
    open_on_prompt(page, gpt2_small_url, long_prompt(T), timeout=SLOW)
    record = {"enter_to_overview_s": enter_prompt(page, long_prompt(T, salt="!"), timeout=SLOW)}
    expect(page.get_by_text(f"{T} tokens")).to_be_visible()
    record["page_s"] = tour(page, timeout=SLOW, shot=lambda p, name: shot(p, "long-" + name))
    expect(page.locator(".gtitle", has_text=f"each cell is the mean of a 4×4 block (T = {T})")).to_be_visible()
    record.update(largest_message_bytes=max(frames), messages=len(frames))
    (ARTIFACTS / "long_prompt.json").write_text(json.dumps(record, indent=2))
    assert max(frames) <= MAX_FIGURE_BYTES, f"a message of {max(frames) / 2**20:.2f} MiB reached the browser"
