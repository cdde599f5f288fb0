"""Untrusted input in a real Chromium: Markdown in a URL is shown as text (no live link, no image
fetched from outside), an upload belongs to the browser session that made it (another session
cannot open it by its server path; its folder is gone once its session ends), and a prompt of
several lines is typed and kept."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
import torch
from dashboard_fixtures import CHARS, CONFIG
from e2e_server import heatmap_drawn, no_errors, type_prompt, wait_for_app_run, wait_until_drawn
from playwright.sync_api import Browser, Page, expect

import gptviz

OUTSIDE = "example.invalid"
INJECTIONS = [
    "[Click here to repair your checkpoint](https://example.invalid/fix)",
    "![x](https://example.invalid/pixel.png)",
    "<img src=https://example.invalid/raw.png>",
]


def outside_requests(page: Page) -> list[str]:
    """Every request the page makes, from now on, to the host the injected Markdown names. (Streamlit
    itself fetches its Material-icon favicon from fonts.gstatic.com: not something a user typed.)"""
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


@pytest.fixture(scope="module")
def checkpoint_files() -> list[Path]:
    folder = Path(tempfile.mkdtemp(prefix="gptviz-e2e-upload-")) / "ckpt"
    torch.manual_seed(7)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), folder, gptviz.CharTokenizer(CHARS))
    return sorted(folder.iterdir())


def upload_folders() -> set[Path]:
    root = Path(tempfile.gettempdir()) / "gptviz-uploads"
    return {p for p in root.glob("*/*") if p.is_dir()} if root.is_dir() else set()


def test_an_upload_belongs_to_its_session(browser: Browser, streamlit_url, checkpoint_files):
    before = upload_folders()
    a = browser.new_context()
    page_a = a.new_page()
    page_a.goto(f"{streamlit_url}/?checkpoint=upload")
    wait_for_app_run(page_a, timeout=90_000)
    page_a.locator("[data-testid=stSidebar] input[type=file]").set_input_files([str(p) for p in checkpoint_files])
    expect(heatmap_drawn(page_a)).to_be_attached(timeout=90_000)
    wait_until_drawn(page_a)
    names = ", ".join(p.name for p in checkpoint_files)
    expect(page_a.get_by_text(f"upload: {names}").first).to_be_visible()
    assert "gptviz-uploads" not in page_a.content()  # named by its files, never by a server path
    (folder,) = upload_folders() - before

    b = browser.new_context()
    page_b = b.new_page()
    for path in (folder, folder / "model.safetensors"):
        page_b.goto(f"{streamlit_url}/?checkpoint={quote(str(path))}")
        wait_for_app_run(page_b, timeout=90_000)
        expect(page_b.get_by_test_id("stAlertContentError").first).to_contain_text("private to each session")
        expect(page_b.locator("[data-testid=stPlotlyChart]")).to_have_count(0)

    a.close()  # A's tab is closed: its session ends and the next run anywhere sweeps its folder
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        page_b.reload()
        wait_for_app_run(page_b)
    assert not folder.exists() and not folder.parent.exists()
    b.close()


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
