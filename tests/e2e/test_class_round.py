"""The class against the model in a real Chromium (issue 38), on the shipped lesson's predict slide:
two students guess, the teacher presses r, and the scored reveal (each guess with the model's
probability, the room's score, the lens depths, the link to the Logit lens page) fits the projector at
1280 × 720 and 1024 × 768 in light and dark, on the teacher's screen and a student's: nothing outside the
window, nothing under the tools row, nothing to scroll. Screenshots: artifacts/e2e/round_*.png."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run
from gptviz.lessons import shipped_lesson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_slides import MEASURE, PARTS, on_slide, problems_of, start_teaching  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LESSON = shipped_lesson("how-attention-works")
K = next(i for i, s in enumerate(LESSON.slides) if s.page == "predict")
N = len(LESSON.slides)
SIZES = [(1280, 720), (1024, 768)]
ROUND = {**PARTS, "round": ".st-key-round_panel", "lens link": ".st-key-round_panel [data-testid=stPageLink] a"}


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-round.log") as u:
        yield u


def test_the_reveal_fits_in_light_and_dark(browser: Browser, url, shot):
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{url}/?lesson=how-attention-works&slide={K + 1}&present=1")
    on_slide(teacher, K + 1, N, timeout=120_000)
    start_teaching(teacher)
    code = teacher.locator(".st-key-class_bar strong").inner_text().strip()
    students = []
    for g in ("o", "o", "e"):  # the room's favourite is not the model's answer: two depths
        s = browser.new_page(viewport={"width": 1024, "height": 768}, color_scheme="dark")
        s.goto(f"{url}/?follow={code}&present=1")
        expect(s.get_by_role("button", name="Send my guess")).to_be_visible(timeout=60_000)
        wait_for_app_run(s)
        s.get_by_role("textbox", name="…or type your guess").fill(g)
        s.get_by_role("button", name="Send my guess").click()
        expect(s.get_by_text(f"Your guess: {g}")).to_be_visible(timeout=30_000)
        students.append(s)
    expect(teacher.locator(".st-key-slide_figure .gtitle").first).to_have_text(
        "The class's guesses: 3 answers", timeout=15_000
    )
    teacher.locator("body").press("r")
    expect(teacher.locator(".st-key-round_panel")).to_be_visible(timeout=60_000)
    expect(teacher.get_by_role("link", name="Follow 'o' in the logit lens ↗")).to_be_visible()  # the favourite
    problems = []
    dark = browser.new_page(viewport={"width": 1280, "height": 720}, color_scheme="dark")
    dark.goto(teacher.url)  # the teacher's own link (?teach=): the same class, in dark
    for page, scheme in ((teacher, "light"), (dark, "dark")):
        for w, h in SIZES:
            page.set_viewport_size({"width": w, "height": h})
            on_slide(page, K + 1, N, timeout=60_000)
            expect(page.locator(".st-key-round_panel")).to_be_visible(timeout=60_000)
            page.wait_for_timeout(500)
            where = f"teacher {scheme} {w}x{h}"
            problems += problems_of(page.evaluate(MEASURE, ROUND), where, sizes_checked=(w, h) == (1280, 720))
            shot(page, f"round_teacher_{scheme}_{w}x{h}")
    follow = {k: v.replace("slide_", "follow_") for k, v in ROUND.items() if "slide_" in v or "round" in v}
    for w, h in SIZES:
        s = students[0]
        s.set_viewport_size({"width": w, "height": h})
        expect(s.locator(".st-key-round_panel")).to_be_visible(timeout=60_000)
        s.wait_for_timeout(500)
        m = s.evaluate(MEASURE, follow)
        for name, boxes in m["parts"].items():
            problems += [f"student {w}x{h}: the {name} is below the window" for b in boxes if b["b"] > h + 0.5]
        if m["scroll"][1] > m["scroll"][2]:
            problems.append(f"student {w}x{h}: the page scrolls {m['scroll']}")
        shot(s, f"round_student_dark_{w}x{h}")
    assert not problems, problems[:12]
    for p in (teacher, dark, *students):
        p.close()
