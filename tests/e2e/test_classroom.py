"""The classroom pages in a real Chromium, at projector sizes: the step-by-step page in presentation
mode at 1280 × 720 and 1024 × 768 (Back / Next clicked like a teacher would, nothing wider than the
screen), and the worked examples' mask switch and an edited input cell. Screenshots go to
artifacts/e2e/classroom_*.png."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from gptviz.analysis import worked
from gptviz.bench.browser import wait_for_app_run


def presentation_on(page: Page) -> None:
    toggle = page.locator(".st-key-presentation").get_by_role("switch")
    toggle.check(force=True)  # the switch's input is visually hidden behind its track
    # presentation mode enlarges the root font; the rerun that does it may start late on busy cores
    page.wait_for_function("getComputedStyle(document.documentElement).fontSize !== '16px'", timeout=60_000)
    wait_for_app_run(page)


@pytest.mark.parametrize("width,height", [(1280, 720), (1024, 768)])
def test_forward_pass_in_presentation_mode(page: Page, base_url, shot, width, height):
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{base_url}/forward-pass?step=4")  # "Step 4 of N": steps count from 1
    expect(page.get_by_role("heading", name="One forward pass, step by step")).to_be_visible(timeout=60_000)
    wait_for_app_run(page)
    presentation_on(page)
    expect(page.get_by_role("heading", name="Block 0: residual stream in")).to_be_visible()
    page.get_by_role("button", name="Next ▶").click()
    wait_for_app_run(page)
    expect(page.get_by_role("heading", name="Block 0: norm (ln_1)")).to_be_visible()
    expect(page.get_by_text("shape (B, T, C) = (1, 60, 32) · B = 1 · T = 60 · C = 32")).to_be_visible()
    assert re.search(r"[?&]step=5(&|$)", page.url), page.url
    for title in ("Block 0: q", "Block 0: k"):  # per-head tensors: a slice of one head
        page.get_by_role("button", name="Next ▶").click()
        expect(page.get_by_role("heading", name=title)).to_be_visible()  # one click, one step
        wait_for_app_run(page)
    expect(page.get_by_text("shape (B, H, T, D) = (1, 4, 60, 8) · B = 1 · H = 4 · T = 60 · D = 8")).to_be_visible()
    page.get_by_role("button", name="◀ Back").click()
    wait_for_app_run(page)
    expect(page.get_by_role("heading", name="Block 0: q")).to_be_visible()
    # readable from the back of the room: the table is drawn and nothing is wider than the screen
    grid = page.get_by_test_id("stTable").first
    expect(grid).to_be_visible()
    box = grid.bounding_box()
    assert box["x"] + box["width"] <= width, box
    assert box["y"] + box["height"] <= height, "the whole slice is on screen, no scrolling in front of a class"
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for name in ("◀ Back", "Next ▶"):
        b = page.get_by_role("button", name=name).bounding_box()
        assert b["y"] + b["height"] <= height, "Back and Next are on screen without scrolling"
    shot(page, f"classroom_forward_{width}x{height}")


def test_worked_examples_mask_switch_and_an_edited_cell(page: Page, base_url, shot):
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{base_url}/worked-examples")
    expect(page.get_by_role("heading", name="Worked examples")).to_be_visible(timeout=60_000)
    wait_for_app_run(page)
    mass = page.get_by_test_id("stMetric").filter(has_text="Future attention mass (weights above")
    expect(mass).to_contain_text("0.0000")
    # Edit X's last cell (token 2, feature 3): 0.1 -> 1, like a student at the board would.
    grid = page.locator(".st-key-w0_X").get_by_test_id("stDataFrame")
    expect(grid.locator("canvas").first).to_be_visible()
    page.wait_for_timeout(500)  # the grid lays out its canvas after it appears
    box = grid.bounding_box()
    editor = page.locator("input.gdg-input")  # the grid's cell editor, opened by a double click
    for _ in range(3):  # the first click may only focus the grid
        page.mouse.dblclick(box["x"] + box["width"] - 12, box["y"] + box["height"] - 10)
        if editor.is_visible() or (page.wait_for_timeout(500) or editor.is_visible()):
            break
    expect(editor).to_be_visible()
    editor.fill("1")
    shot(page, "classroom_worked_editing")
    editor.press("Enter")
    wait_for_app_run(page)
    expect(mass).to_contain_text("0.0000")  # the mask still hides the future, whatever X holds
    # Mask off: the leak appears, and its size is the one the edited X gives (0.9976 before the edit:
    # the hand computation in tests/test_worked.py, checked on the page by test_app_classroom.py).
    page.locator(".st-key-w0_mask").get_by_role("switch").uncheck(force=True)
    wait_for_app_run(page)
    X = np.array(worked.TOY_ATTENTION["X"])
    X[2, 3] = 1.0
    d = {k: v for k, v in worked.TOY_ATTENTION.items() if k != "X"}
    want = worked.toy_attention(X, **d, causal=False)["future_mass"]
    assert f"{want:.4f}" != "0.9976"
    expect(mass).to_contain_text(f"{want:.4f}")
    expect(page.get_by_text("Mask off", exact=False).first).to_be_visible()
    mass.scroll_into_view_if_needed()
    shot(page, "classroom_worked_1280x720")
