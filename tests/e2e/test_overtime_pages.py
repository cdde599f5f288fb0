"""The Compare and Timeline pages in a real Chromium, on a server of their own over two checkpoints
of one shape and a run folder of three steps: change one character of prompt B and see where the
runs part; compare two checkpoints; scrub a training run with the step slider and see that step's
attention. Screenshots: artifacts/e2e/compare_*.png, artifacts/e2e/timeline.png."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import ARTIFACTS, no_errors, open_page, streamlit_server, wait_for_app_run, wait_until_drawn
from gptviz.bench.checkpoints import NAME, make_overtime_checkpoints

PROMPT = "To be, or not to be"
SLOW = 120_000  # ms: the shared CI cores may be busy


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = make_overtime_checkpoints(tmp_path_factory.mktemp("overtime"))
    with streamlit_server(root, NAME, ARTIFACTS / "streamlit-overtime.log") as u:
        yield u


def metric(page: Page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def titles(page: Page) -> list[str]:
    return page.locator("[data-testid=stPlotlyChart] .gtitle").all_text_contents()


def start_on(page: Page, url: str, title: str) -> None:
    """Open the dashboard on PROMPT at 1440 wide, then the page `title`."""
    page.set_viewport_size({"width": 1440, "height": 1300})
    page.goto(f"{url}/?{urlencode({'prompt': PROMPT})}")
    wait_until_drawn(page, SLOW)
    open_page(page, title, timeout=SLOW)


def test_compare_two_prompts_then_two_checkpoints(page: Page, url, shot):
    start_on(page, url, "Compare")
    expect(page.get_by_text("The two prompts are the same")).to_be_visible()
    expect(metric(page, "First differing token")).to_have_text("none")

    box = page.get_by_role("textbox", name="Prompt B")
    box.fill("To be, or not to go")  # the same length; differs at position 17
    box.press("Enter")
    expect(metric(page, "First differing token")).to_have_text("position 17", timeout=SLOW)
    wait_until_drawn(page, SLOW)
    expect(page.get_by_text("The two prompts are the same")).to_have_count(0)
    shown = titles(page)
    for t in ("A (sidebar prompt)", "B (prompt B)", "A − B", "KL(A ‖ B) at each position"):
        assert any(s.startswith(t) for s in shown), (t, shown)
    no_errors(page)
    shot(page, "compare_prompts")

    page.get_by_test_id("stRadio").get_by_text("one prompt, two checkpoints").click()
    wait_for_app_run(page, timeout=SLOW)
    # B starts on the checkpoint of A's shape and vocabulary (other weights), and both are named
    expect(page.locator(".gtitle", has_text="B: tiny-char-2")).to_be_visible(timeout=SLOW)
    expect(page.locator(".gtitle", has_text="A: tiny-char")).to_be_visible()
    wait_until_drawn(page, SLOW)
    kl = float(metric(page, "Mean KL").inner_text().split()[0])
    assert kl > 0, "other weights, the same prompt: the next-token distributions differ"
    no_errors(page)
    shot(page, "compare_checkpoints")

    page.get_by_test_id("stSelectbox").filter(has_text="Checkpoint B").click()
    page.get_by_role("option", name="tiny-deep", exact=True).click()
    expect(page.get_by_text("Not compared")).to_be_visible(timeout=SLOW)
    no_errors(page)


def test_timeline_step_slider(page: Page, url, shot):
    start_on(page, url, "Timeline")
    expect(page.get_by_text("3 checkpoints, steps 0 … 100")).to_be_visible()
    expect(page.locator(".gtitle", has_text="Step 100: layer 0, head 0")).to_be_visible()

    thumb = page.get_by_test_id("stSlider").filter(has_text="Step").get_by_role("slider")
    thumb.focus()
    thumb.press("ArrowLeft")
    expect(page.locator(".gtitle", has_text="Step 50: layer 0, head 0")).to_be_visible(timeout=SLOW)
    wait_until_drawn(page, SLOW)
    assert any(t.startswith("Loss per step") for t in titles(page))
    assert any(t.startswith("Every head's induction score per step") for t in titles(page))
    no_errors(page)
    shot(page, "timeline")
