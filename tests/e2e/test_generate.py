"""The Generate page in a real Chromium: one token, then twenty, scrub back one step with the
keyboard, and carry the text on as the prompt of every page. Screenshot: artifacts/e2e/generate.png."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from gptviz.bench.browser import click_page_link, nav, no_errors, open_on_prompt, wait_for_app_run, wait_until_drawn

PROMPT = "To be, or not to be"
SLOW = 180_000  # ms: the shared CI cores may be busy


def metric(page: Page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def test_generate_scrub_and_use_as_prompt(page: Page, streamlit_url, shot):
    open_on_prompt(page, streamlit_url, PROMPT, timeout=SLOW)
    click_page_link(page, "Generate")
    expect(page.get_by_role("heading", name="Generate", exact=True)).to_be_visible(timeout=SLOW)
    wait_for_app_run(page, timeout=SLOW)  # no chart yet: nothing generated
    expect(page.get_by_text("Press Next token or Generate")).to_be_visible()

    page.get_by_role("button", name="Next token").click()
    wait_until_drawn(page, SLOW)
    expect(metric(page, "Step")).to_have_text("1 of 1", timeout=SLOW)

    page.get_by_role("button", name="Generate 20").click()
    wait_until_drawn(page, SLOW)
    expect(metric(page, "Step")).to_have_text("21 of 21", timeout=SLOW)
    no_errors(page)
    titles = page.locator("[data-testid=stPlotlyChart] .gtitle").all_text_contents()
    assert any(t.startswith("Step 21: the") for t in titles), titles
    assert any(t.startswith("Prompt + generated text") for t in titles), titles

    thumb = page.get_by_test_id("stSlider").filter(has_text="Step").get_by_role("slider")
    thumb.focus()
    thumb.press("ArrowLeft")
    wait_until_drawn(page, SLOW)
    expect(metric(page, "Step")).to_have_text("20 of 21", timeout=SLOW)
    shot(page, "generate")

    before = page.get_by_role("textbox", name="Prompt").input_value()
    page.get_by_role("button", name="Use as prompt").click()
    # the rerun that sets the prompt may start after a fixed wait has passed on busy cores: wait
    # for the value itself to change
    expect(page.get_by_role("textbox", name="Prompt")).not_to_have_value(before, timeout=SLOW)
    wait_for_app_run(page, timeout=SLOW)
    after = page.get_by_role("textbox", name="Prompt").input_value()
    assert after.startswith(before) and len(after) == len(before) + 21
    expect(page.get_by_text("Press Next token or Generate")).to_be_visible(timeout=SLOW)
    nav(page, "Next token", timeout=SLOW)
    no_errors(page)
    expect(page.get_by_role("textbox", name="Prompt")).to_have_value(after)
