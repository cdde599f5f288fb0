"""The Interventions and Patching pages in a real Chromium, as a person would use them: pick a head
to ablate and see the prediction before and after; make a corrupt prompt by changing one character
and see the sweeps drawn. (A click on the grid or a sweep cell is checked through its callback in
tests/test_app_interventions.py and tests/test_app_patching.py.)"""

from __future__ import annotations

from urllib.parse import urlencode

from playwright.sync_api import Page, expect

from gptviz.bench.browser import chart, click_page_link, no_errors, open_page, wait_for_app_run, wait_until_drawn

PROMPT = "To be, or not to be: that is the question."


def test_ablate_a_head_then_sweep_a_corrupt_prompt(page: Page, shot):
    page.set_viewport_size({"width": 1440, "height": 1300})
    page.goto("/?" + urlencode({"prompt": PROMPT}))
    wait_until_drawn(page, timeout=90_000)

    open_page(page, "Interventions")
    expect(page.get_by_text("Choose heads or MLPs to ablate")).to_be_visible()
    box = page.get_by_role("combobox", name="Heads to ablate")
    chosen = page.get_by_test_id("stMultiSelect").filter(has=box)
    # a click on the box while a run is still going lands on a widget the run then replaces (seen on a
    # loaded CI machine: the list open, nothing chosen): choose again once the run is over
    for _ in range(3):
        wait_for_app_run(page)
        box.click()
        page.get_by_role("option", name="L1H2").click()
        wait_for_app_run(page)
        if "L1H2" in chosen.inner_text():
            break
        page.keyboard.press("Escape")
    expect(chosen).to_contain_text("L1H2")
    page.keyboard.press("Escape")
    wait_for_app_run(page)
    expect(page.get_by_text("ablate blocks.1.attn.z heads 2 (zero)")).to_be_visible(timeout=60_000)
    wait_until_drawn(page)
    expect(page.locator(".gtitle", has_text="(before)")).to_be_visible()
    expect(page.locator(".gtitle", has_text="(after)")).to_be_visible()
    expect(page.locator(".gtitle", has_text="before and after the edit")).to_be_visible()
    no_errors(page)
    shot(page, "whatif-interventions")

    # the page draws nothing before there is a corrupt prompt, so nav's "every chart drawn" cannot be awaited
    click_page_link(page, "Patching")
    expect(page.get_by_role("heading", name="Patching", exact=True)).to_be_visible(timeout=60_000)
    wait_for_app_run(page)
    clean = page.get_by_label("Clean prompt")
    clean.fill("To be, or not to be")
    clean.press("Enter")
    wait_for_app_run(page)
    page.get_by_label("New token").fill("o")
    page.get_by_label("New token").press("Enter")
    wait_for_app_run(page)
    page.get_by_role("button", name="Make it").click()
    wait_for_app_run(page)
    expect(page.get_by_label("Corrupt prompt (the same number of tokens)")).to_have_value("oo be, or not to be")
    wait_until_drawn(page, timeout=90_000)
    sweep = chart(page, "Patching resid_pre")
    expect(sweep).to_be_visible()
    expect(chart(page, "Patching attn.z")).to_be_visible()
    expect(page.get_by_text("Click a cell of a heatmap")).to_be_visible()
    no_errors(page)
    shot(page, "whatif-patching")
