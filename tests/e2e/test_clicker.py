"""A clicker's press is never undone by a run_every fragment's tick, in a real Chromium on the shipped
checkpoints.

The race (CI once failed on it in test_slides.py): the teacher presses Next on the predict slide,
whose tally polls every TALLY_POLL_S; a tick fired in the few ms before the server's answer reaches
the browser carries the page's widgets as they were, among them the slide list made on the slide
just left. The server runs that tick after the Next, and Streamlit ran the old list's on_change for
it (its value was back after the list had left the page): the teacher was sent back one slide on
the server while the screen still showed the new one, so the next press seemed lost.

A tick lands in that window now and then; here the browser's own tick, recorded on the predict
slide, is sent again right after the Next press's message, which is the moment the race sends it.
One server for the module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from streamlit.proto.BackMsg_pb2 import BackMsg

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run, wait_for_slide
from gptviz.lessons import shipped_lesson

ROOT = Path(__file__).resolve().parents[2]
LESSON = shipped_lesson("how-attention-works")
N = len(LESSON.slides)
K = next(i for i, s in enumerate(LESSON.slides) if s.page == "predict")  # from 0

# Sends window.__tick on the page's websocket right after the next message that presses Next (the
# only message naming the slide_next button: a button's press is the one state the browser sends for it).
SEND_AFTER_NEXT = """
(() => {
  const send = WebSocket.prototype.send;
  const latin1 = new TextDecoder("latin1");
  WebSocket.prototype.send = function (data) {
    send.call(this, data);
    const tick = window.__tick;
    if (tick && data instanceof Uint8Array && latin1.decode(data).includes("slide_next")) {
      window.__tick = null;
      send.call(this, tick);
    }
  };
})();
"""


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-clicker.log") as u:
        yield u


def on_slide(page: Page, i: int, timeout: int = 60_000) -> None:
    wait_for_slide(page, i, N, timeout)


def is_tick(payload) -> bool:
    """A run_every fragment's automatic rerun, as the browser sends it."""
    if not isinstance(payload, bytes):
        return False
    msg = BackMsg.FromString(payload)
    return msg.WhichOneof("type") == "rerun_script" and msg.rerun_script.is_auto_rerun


def test_a_tally_tick_after_next_does_not_send_the_teacher_back(browser: Browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.add_init_script(SEND_AFTER_NEXT)
    ticks: list[bytes] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda p: ticks.append(p) if is_tick(p) else None))
    page.goto(f"{url}/?lesson={LESSON.name}&slide={K + 1}&present=1")
    on_slide(page, K + 1, timeout=120_000)
    page.get_by_role("button", name="Start teaching").click()
    expect(page.locator(".st-key-class_bar strong")).to_be_visible(timeout=30_000)
    wait_for_app_run(page)
    page.wait_for_timeout(1500)  # the tally polls (TALLY_POLL_S): a few ticks of this slide's page
    assert ticks, "the predict slide's tally sent no tick"
    page.evaluate("(b) => { window.__tick = new Uint8Array(b); }", list(ticks[-1]))
    page.keyboard.press("PageDown")
    on_slide(page, K + 2, timeout=120_000)
    assert page.evaluate("window.__tick") is None  # the tick went right after the press
    page.wait_for_timeout(1000)  # the tick's fragment run, queued behind the slide's run, is over
    wait_for_app_run(page)
    page.keyboard.press("PageDown")
    on_slide(page, K + 3, timeout=60_000)  # this press moves on: the tick did not send the teacher back
    assert re.search(rf"[?&]slide={K + 3}(&|$)", page.url), page.url
    # the browser's Back is still a link to the slide before (a URL this session wrote, read again)
    page.go_back()
    on_slide(page, K + 2)
    assert re.search(rf"[?&]slide={K + 2}(&|$)", page.url), page.url
    page.get_by_role("button", name="End class").click()
    page.close()


def test_the_first_press_in_a_reopened_tab_moves_the_class(browser: Browser, url):
    """A teacher's tab closed and opened again (its ?teach= link): the first PageDown pressed as soon as
    the slide counter shows moves the teacher and the follower. (The counter showed before the clicker's
    script was loaded, and that press was lost.)"""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    page = teacher.new_page()
    page.goto(f"{url}/?lesson={LESSON.name}&slide=1&present=1")
    on_slide(page, 1, timeout=120_000)
    page.get_by_role("button", name="Start teaching").click()
    code = page.locator(".st-key-class_bar strong")
    expect(code).to_be_visible(timeout=30_000)
    wait_for_app_run(page)
    student = browser.new_page(viewport={"width": 1280, "height": 720})
    student.goto(f"{url}/?follow={code.text_content()}")
    expect(student.get_by_text(re.compile(f"slide 1 of {N}$"))).to_be_visible(timeout=120_000)
    link = page.url
    assert "teach=" in link, link
    page.close()  # the tab closed, and opened again on its link
    page = teacher.new_page()
    page.goto(link)
    expect(page.get_by_text(re.compile(f"slide 1 of {N}$"))).to_be_visible(timeout=120_000)
    page.keyboard.press("PageDown")  # at once: no wait for the run or the figure
    on_slide(page, 2, timeout=60_000)
    assert re.search(r"[?&]slide=2(&|$)", page.url), page.url
    expect(student.get_by_text(re.compile(f"slide 2 of {N}$"))).to_be_visible(timeout=60_000)
    # and the next press, after the reopened tab's first, moves the follower on again
    wait_for_app_run(page)
    page.keyboard.press("PageDown")
    on_slide(page, 3)
    expect(student.get_by_text(re.compile(f"slide 3 of {N}$"))).to_be_visible(timeout=60_000)
    page.get_by_role("button", name="End class").click()
    student.close()
    teacher.close()
