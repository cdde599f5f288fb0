"""Students take part, in a real Chromium on the shipped checkpoints: the teacher opens the join
screen (the follow link in large type and its QR code, which is read back and compared with the
link's own encoding), one student joins from the first page's "join a class" box and another from
the link, each sends a guess on the predict slide, the teacher's screen counts them without anyone
pressing anything, and the key r reveals the model's distribution beside the tally, on the teacher's
screen and the students'. One server for the module. Screenshots: artifacts/e2e/poll_*.png."""

from __future__ import annotations

import base64
import io
import re
import sys
from pathlib import Path

import pytest
import segno
from PIL import Image
from playwright.sync_api import Browser, expect

import gptviz
from gptviz.analysis import top_k
from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run
from gptviz.lessons import shipped_lesson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_join import read_qr  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LESSON = shipped_lesson("how-attention-works")
K = next(i for i, s in enumerate(LESSON.slides) if s.page == "predict")


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-poll.log") as u:
        yield u


def model_top():
    """The model's own next-token probabilities after the slide's prompt, computed here."""
    bundle = gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    ids = bundle.tokenizer.encode(LESSON.slides[K].prompt)
    return top_k(gptviz.trace(bundle.model, ids).part("logits", -1), 5)


def test_the_class_answers_and_the_teacher_reveals(browser: Browser, url, shot):
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{url}/?lesson=how-attention-works&slide={K + 1}&present=1")
    expect(teacher.get_by_role("button", name="Reveal the model's answer (r)")).to_be_visible(timeout=120_000)
    wait_for_app_run(teacher)
    teacher.get_by_role("button", name="Start teaching").click()
    expect(teacher.get_by_text("Class code")).to_be_visible(timeout=30_000)
    code = re.search(r"Class code ([A-Z0-9]{4})", teacher.inner_text("body")).group(1)

    # the join screen: the link in large type, and a QR code that is that link
    teacher.get_by_role("button", name="Join", exact=False).click()
    dialog = teacher.get_by_role("dialog")
    link = dialog.locator(".gptviz-join-link")
    expect(link).to_contain_text(f"/?follow={code}")
    assert float(link.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")) >= 24
    img = dialog.get_by_role("img")
    expect(img).to_be_visible()
    png = teacher.evaluate(
        """async (src) => { const b = await (await fetch(src)).arrayBuffer();
           return btoa(String.fromCharCode(...new Uint8Array(b))); }""",
        img.get_attribute("src"),
    )
    matrix = read_qr(base64.b64decode(png))
    assert matrix == [[bool(x) for x in row] for row in segno.make(link.inner_text(), error="m", micro=False).matrix]
    assert Image.open(io.BytesIO(base64.b64decode(png))).width >= 370  # large enough to scan off a projector
    expect(dialog.get_by_text("students cannot open this link")).to_be_visible()  # this server: loopback only
    box = teacher.locator("[role=dialog]").first.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 720, box  # the warning too fits 1280 × 720
    shot(teacher, "poll_join_screen")
    teacher.keyboard.press("Escape")
    expect(dialog).to_have_count(0)

    # one student joins from the first page's box, the other from the link
    first = browser.new_page(viewport={"width": 1280, "height": 720})
    first.goto(url)
    first.get_by_label("Join a class").fill(code.lower())
    first.get_by_role("button", name="Follow").click()
    second = browser.new_page(viewport={"width": 1280, "height": 720})
    second.goto(f"{url}/?follow={code}")
    for student in (first, second):
        expect(student.get_by_role("button", name="Send my guess")).to_be_visible(timeout=60_000)
        wait_for_app_run(student)
        expect(student.get_by_test_id("stSidebar")).to_be_hidden()  # the box's page had one: no empty one left
    first.get_by_test_id("stRadio").get_by_text("e", exact=True).click()  # one of the slide's choices
    first.get_by_role("button", name="Send my guess").click()
    second.get_by_role("textbox", name="…or type your guess").fill("i")
    second.get_by_role("button", name="Send my guess").click()
    expect(first.get_by_text("Your guess: e")).to_be_visible(timeout=30_000)
    expect(second.get_by_text("Your guess: i")).to_be_visible(timeout=30_000)
    title = teacher.locator(".st-key-slide_figure .gtitle").first
    expect(title).to_have_text("The class's guesses: 2 answers", timeout=15_000)  # nobody pressed a thing
    shot(teacher, "poll_tally")

    teacher.locator("body").press("r")  # the teacher's key: reveal
    expect(teacher.locator(".st-key-round_panel")).to_be_visible(timeout=30_000)  # a scored round: the button gives way
    legend = teacher.locator(".st-key-slide_figure .legendtext")
    expect(legend).to_have_text(["class (2 answers)", "model"], timeout=30_000)
    top = model_top()  # the model's probability of the room's guesses, as gptviz computes it
    expect(teacher.locator(".st-key-round_panel [data-testid=stTable]")).to_contain_text(
        f"{100 * top['probability'].iloc[0]:.2f}"
    )
    for student in (first, second):
        expect(student.locator(".st-key-follow_figure .legendtext")).to_have_text(
            ["class (2 answers)", "model"], timeout=30_000
        )
        expect(student.get_by_role("button", name="Send my guess")).to_have_count(0)  # the poll is closed
    shot(teacher, "poll_revealed")
    shot(first, "poll_follower_revealed")
    for p in (teacher, first, second):
        p.close()
