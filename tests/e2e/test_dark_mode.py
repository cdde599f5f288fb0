"""Figures read in dark mode (issue 27): a laptop set to dark gets Streamlit's dark theme, which
coloured every figure text it left unset near-white, on the figures' white paper. Measured in
Chromium with color_scheme="dark": every title, axis title, tick label and colour bar label of the
figures on a page and on a lesson slide, against the paper, at WCAG's 4.5:1 for text."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
TEXT = ".gtitle, .g-gtitle text, .xtitle, .ytitle, .xtick text, .ytick text, .cbtitle text, .cbaxis text"

# each figure's text fills and its paper colour, as the browser computed them
READ = """(sel) => [...document.querySelectorAll('.js-plotly-plot')].map(p => ({
    paper: getComputedStyle(p.querySelector('.main-svg')).backgroundColor,
    texts: [...p.querySelectorAll(sel)].filter(t => t.textContent.trim())
        .map(t => [t.textContent.slice(0, 40), getComputedStyle(t).fill])}))"""


def luminance(css: str) -> float:
    r, g, b = (int(float(x)) / 255 for x in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-dark.log") as u:
        yield u


@pytest.mark.parametrize("path", ["attention", "?lesson=how-attention-works&slide=6&present=1"])
def test_figure_text_reads_in_dark_mode(browser: Browser, url, path):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    page.goto(f"{url}/{path}")
    expect(page.locator(".js-plotly-plot .gtitle").first).to_be_visible(timeout=120_000)
    wait_for_app_run(page)
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(255, 255, 255)", "dark theme"
    figures = page.evaluate(READ, TEXT)
    assert figures and all(f["texts"] for f in figures)
    low = [
        (text, fill, f["paper"], round(contrast(fill, f["paper"]), 2))
        for f in figures
        for text, fill in f["texts"]
        if contrast(fill, f["paper"]) < 4.5
    ]
    page.screenshot(path=str(ARTIFACTS / f"dark_{path.strip('?').split('&')[0].replace('=', '_')}.png"))
    page.close()
    assert not low, low[:8]
