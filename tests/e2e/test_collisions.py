"""Text that collides, measured in a real Chromium: on every page that draws a loss, a legend, a colour
bar or numbers in cells, at 1280 × 720 (and Mask leak at 1024 × 768), no chart's title runs into its
legend or its y-axis title, no x tick label into the x-axis title, no colour bar onto an axis title,
and numbers written in cells are readable. At 1440 × 900 the checkpoint picker is on screen without
scrolling (the pages are in the top bar). Screenshots: artifacts/e2e/collide-*.png."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import click_page_link, no_errors, wait_for_app_run, wait_until_drawn

PROMPT = "To be, or not to be: that is the question."
SLOW = 180_000

# Per visible chart: the boxes of its title lines, legend, axis titles, x tick labels and colour bars,
# and the font size of every number written in a heatmap's cells.
MEASURE = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')]
  .filter(c => c.offsetParent !== null).map(c => {
    const el = c.querySelector('.js-plotly-plot');
    const box = e => { const r = e.getBoundingClientRect();
                       return r.width && r.height ? {l: r.left, r: r.right, t: r.top, b: r.bottom} : null; };
    const all = sel => [...el.querySelectorAll(sel)].map(box).filter(Boolean);
    return {title: (el._fullLayout.title && el._fullLayout.title.text) || '',
            titles: all('.gtitle, .gtitle-subtitle'), legends: all('.legend .bg'),
            ytitles: all('.g-ytitle'), xtitles: all('.g-xtitle'), xticks: all('.xtick text'),
            colorbars: all('.colorbar'),
            cells: [...el.querySelectorAll('.heatmaplayer text')]
              .map(t => parseFloat(getComputedStyle(t).fontSize)).filter(s => s > 0)}; })"""


def overlaps(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] - 1 and b["l"] < a["r"] - 1 and a["t"] < b["b"] - 1 and b["t"] < a["b"] - 1


def collisions(page: Page, where: str) -> list[str]:
    found = []
    for m in page.evaluate(MEASURE):
        name = f"{where}: {m['title'][:50]!r}"
        pairs = (
            ("title", m["titles"], "legend", m["legends"]),
            ("title", m["titles"], "y-axis title", m["ytitles"]),
            ("x tick label", m["xticks"], "x-axis title", m["xtitles"]),
            ("colour bar", m["colorbars"], "axis title", m["ytitles"] + m["xtitles"]),
        )
        for a_name, a_boxes, b_name, b_boxes in pairs:
            if any(overlaps(a, b) for a in a_boxes for b in b_boxes):
                found.append(f"{name}: the {a_name} runs into the {b_name}")
        if m["cells"] and min(m["cells"]) < 10:
            found.append(f"{name}: numbers in the cells are {min(m['cells']):.0f} px")
    return found


def visit(page: Page, title: str) -> None:
    url = page.url
    click_page_link(page, title, SLOW)
    page.wait_for_url(lambda u: u != url, timeout=SLOW)  # a page's heading is not always its menu title
    wait_for_app_run(page, timeout=SLOW)


def settle(page: Page) -> None:
    wait_until_drawn(page, SLOW)
    page.wait_for_timeout(500)  # Plotly's automargin may redraw once more
    no_errors(page)


@pytest.fixture
def at_1280(page: Page) -> Page:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto("/?" + urlencode({"prompt": PROMPT}))
    wait_until_drawn(page, SLOW)
    return page


def test_no_text_collides_at_1280x720(at_1280: Page, shot):
    page, problems = at_1280, []
    for title in ("Overview", "Attention", "Residual stream", "Next token", "Compare", "Mask leak"):
        if title != "Overview":  # the page it opens on
            visit(page, title)
        settle(page)
        problems += collisions(page, title)
        shot(page, "collide-" + title.replace(" ", "-").lower())
    visit(page, "Interventions")
    box = page.get_by_role("combobox", name="Heads to ablate")
    box.click()
    page.get_by_role("option", name="L1H2").click()
    page.keyboard.press("Escape")
    settle(page)
    problems += collisions(page, "Interventions")
    shot(page, "collide-interventions")
    visit(page, "Patching")
    corrupt = page.get_by_label("Corrupt prompt (the same number of tokens)")
    corrupt.fill(PROMPT.replace("question", "questiom"))
    corrupt.press("Enter")
    settle(page)
    problems += collisions(page, "Patching")
    shot(page, "collide-patching")
    assert not problems, problems


def test_mask_leak_at_1024(page: Page, shot):
    page.set_viewport_size({"width": 1024, "height": 768})
    page.goto("/mask-leak?" + urlencode({"prompt": PROMPT}))
    settle(page)
    page.get_by_text("Causal mask on").click()  # the side by side heatmaps: with and without the mask
    settle(page)
    shot(page, "collide-mask-leak-1024")
    assert not collisions(page, "Mask leak at 1024"), collisions(page, "Mask leak at 1024")


def test_the_checkpoint_picker_is_on_screen_at_1440x900(page: Page, shot):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/")
    wait_until_drawn(page, SLOW)
    picker = page.get_by_test_id("stSidebar").get_by_role("combobox", name="Checkpoint")
    expect(picker).to_be_visible()
    top = picker.bounding_box()
    assert top is not None and top["y"] + top["height"] < 400  # first in the sidebar, no page list above it
    expect(page.get_by_test_id("stSidebarNav")).to_have_count(0)
    expect(page.get_by_test_id("stTopNavSection").first).to_be_visible()
    shot(page, "collide-topbar-1440")
