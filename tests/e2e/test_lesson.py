"""The shipped lesson in a real Chromium, on the shipped checkpoints: driven from the keyboard like a
clicker (PageDown, →, Space forward; PageUp, ← back) in presentation mode at 1280 × 720 and
1024 × 768, every slide on one screen with its input beside its result; and a student following
the teacher in a second page, who sees the teacher's Next within 3 s.
Screenshots of every slide go to artifacts/e2e/lesson_<size>_<slide>.png."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_slide
from gptviz.lessons import shipped_lesson

ROOT = Path(__file__).resolve().parents[2]
LESSON = shipped_lesson("how-attention-works")
N = len(LESSON.slides)
FORWARD = ["PageDown", "ArrowRight", "Space"]


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-lesson.log") as u:
        yield u


def on_slide(page: Page, i: int, timeout: int = 60_000) -> None:
    wait_for_slide(page, i, N, timeout)


def fits(page: Page, width: int, height: int) -> list[str]:
    """What of the slide lies outside the screen: its Back / Next, title, note, table, figure."""
    problems = []
    for name, loc in [
        ("Back", page.locator(".st-key-slide_back button")),
        ("Next", page.locator(".st-key-slide_next button")),
        ("note", page.locator(".st-key-slide_note")),
        ("figure", page.locator(".st-key-slide_figure")),
        ("table", page.get_by_test_id("stTable").first),
    ]:
        box = loc.bounding_box()
        if box is None or box["y"] < 0 or box["y"] + box["height"] > height + 1 or box["x"] + box["width"] > width:
            problems.append(f"{name}: {box}")
    table, fig = (
        page.get_by_test_id("stTable").first.bounding_box(),
        page.locator(".st-key-slide_figure").bounding_box(),
    )
    if not table["x"] + table["width"] <= fig["x"]:
        problems.append("the input is not beside its result")
    cut = page.get_by_test_id("stTable").first.evaluate(
        "e => e.querySelector('table').getBoundingClientRect().right - e.getBoundingClientRect().right"
    )
    if cut > 1:
        problems.append(f"the table is cut {cut:.0f} px on the right")
    return problems


@pytest.mark.parametrize("width,height", [(1280, 720), (1024, 768)])
def test_the_shipped_lesson_from_the_keyboard(page: Page, url, shot, width, height):
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{url}/?lesson=how-attention-works&slide=1&present=1")
    on_slide(page, 1, timeout=120_000)
    assert page.evaluate("getComputedStyle(document.documentElement).fontSize") != "16px"  # presentation mode
    problems = {}
    for i in range(1, N + 1):
        expect(page.get_by_role("heading", name=LESSON.slides[i - 1].title)).to_be_visible()
        page.wait_for_timeout(400)  # Plotly lays the figure out after its SVG appears
        problems.update({f"slide {i}: {p}": 1 for p in fits(page, width, height)})
        shot(page, f"lesson_{width}x{height}_{i}")
        assert re.search(rf"[?&]slide={i}(&|$)", page.url) and "present=1" in page.url, page.url
        if i < N:
            page.keyboard.press(FORWARD[i % 3])  # the keys a clicker and a keyboard send
            on_slide(page, i + 1)
    assert not problems, list(problems)
    page.keyboard.press("PageUp")
    on_slide(page, N - 1)
    page.keyboard.press("ArrowLeft")
    on_slide(page, N - 2)
    page.reload()  # presentation mode and the slide are in the URL: a reload keeps both
    on_slide(page, N - 2, timeout=120_000)
    assert page.evaluate("getComputedStyle(document.documentElement).fontSize") != "16px"


def test_a_student_follows_the_teacher(browser, url, shot):
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{url}/?lesson=how-attention-works&slide=2&present=1")
    on_slide(teacher, 2, timeout=120_000)
    teacher.get_by_role("button", name="Start teaching").click()
    expect(teacher.get_by_text("Class code")).to_be_visible(timeout=30_000)
    code = re.search(r"Class code ([A-Z0-9]{4})", teacher.inner_text("body"))
    student = browser.new_page(viewport={"width": 1280, "height": 720})
    student.goto(f"{url}/?follow={code.group(1)}")
    expect(student.get_by_role("heading", name=LESSON.slides[1].title)).to_be_visible(timeout=60_000)
    expect(student.get_by_test_id("stSidebar")).to_have_count(0)  # no sidebar: nothing of the teacher's controls
    expect(student.get_by_role("button", name="Next ▶")).to_have_count(0)
    waited = {}
    for i in (3, 4):
        teacher.keyboard.press("PageDown")
        t0 = time.monotonic()
        expect(student.get_by_role("heading", name=LESSON.slides[i - 1].title)).to_be_visible(timeout=10_000)
        seconds = waited[i] = round(time.monotonic() - t0, 2)
        assert seconds <= 3.0, f"the student saw slide {i} {seconds:.1f} s after the teacher's Next"
        expect(student.get_by_text(f"slide {i} of {N}")).to_be_visible()
    shot(student, "lesson_follower")
    (ARTIFACTS / "lesson_follow.json").write_text(json.dumps({"seconds_to_follower": waited}))
    teacher.close()
    student.close()
