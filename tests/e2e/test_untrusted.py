"""Untrusted input in a real Chromium: Markdown in a URL is shown as text (no live link, no image
fetched from outside), and a prompt of several lines is typed and kept. (Uploads, autolinks, odd
file names and outside hosts: test_hostile.py.)"""

from __future__ import annotations

from urllib.parse import quote, urlparse

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import heatmap_drawn, no_errors, type_prompt, wait_for_app_run, wait_until_drawn

OUTSIDE = "example.invalid"
INJECTIONS = [
    "[Click here to repair your checkpoint](https://example.invalid/fix)",
    "![x](https://example.invalid/pixel.png)",
    "<img src=https://example.invalid/raw.png>",
]


def outside_requests(page: Page) -> list[str]:
    """Every request the page makes, from now on, to the host the injected Markdown names."""
    seen: list[str] = []
    page.on("request", lambda r: (urlparse(r.url).hostname or "").endswith(OUTSIDE) and seen.append(r.url))
    return seen


@pytest.mark.parametrize("text", INJECTIONS)
def test_markdown_in_the_url_is_shown_as_text(page: Page, streamlit_url, text):
    seen = outside_requests(page)
    page.goto(f"{streamlit_url}/?checkpoint={quote(text)}")
    wait_for_app_run(page, timeout=90_000)
    box = page.get_by_test_id("stAlertContentError").first
    expect(box).to_contain_text("Checkpoint not loaded")
    expect(box).to_contain_text(OUTSIDE)  # the characters as typed
    assert page.locator(f'a[href*="{OUTSIDE}"]').count() == 0
    assert page.locator(f'img[src*="{OUTSIDE}"]').count() == 0
    page.wait_for_timeout(500)
    assert seen == [], seen
    no_errors(page)


def test_a_prompt_of_several_lines(page: Page, streamlit_url):
    page.goto(streamlit_url)
    expect(heatmap_drawn(page)).to_be_attached(timeout=90_000)
    wait_until_drawn(page)
    box = page.get_by_label("Prompt", exact=True)
    box.fill("First Citizen:")
    box.press("End")
    box.press("Enter")  # in the box, Enter is a new line, not a submit
    box.type("B")
    box.press("Control+Enter")
    wait_until_drawn(page)
    expect(page.get_by_text("16 tokens")).to_be_visible()
    expect(page.locator("b", has_text="↵")).to_have_count(1)  # the chip of the line break
    assert "First+Citizen%3A%0AB" in page.url or "First%20Citizen%3A%0AB" in page.url, page.url
    page.reload()  # the URL brings both lines back into the box
    wait_until_drawn(page)
    expect(page.get_by_label("Prompt", exact=True)).to_have_value("First Citizen:\nB")
    type_prompt(page, "ab\ncd")
    wait_until_drawn(page)
    expect(page.get_by_text("5 tokens")).to_be_visible()
    no_errors(page)
