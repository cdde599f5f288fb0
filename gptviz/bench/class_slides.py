"""Whole slides at the followers (a script, not a test; `gptviz bench --classroom -- --whole-slide`): one
class-mode server, a teacher in a real Chromium page pressing PageDown, and 5 followers each in a
Chromium page of its own. For each press, the seconds from the teacher's key until a follower's page
shows the new slide whole: its title and its figure (a new Plotly chart drawn, its heatmap images set;
on a predict slide before the reveal, the guess form), never the new title over the old figure.

The presses walk the shipped lesson's last 8 slides (the real models': attention, the poll, the heads,
the features, the mask leak), a few seconds apart as a teacher's talk leaves them. The clock is the
machine's wall clock, read by this process before the key and by each page when it sees the slide."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, sync_playwright

from ..lessons import shipped_lesson
from .browser import CHROMIUM, CHROMIUM_ARGS, server_process, wait_for_app_run, wait_for_slide

LESSON = "how-attention-works"
PRESSES = 8
FOLLOWERS = 5
TALK_S = 2.0  # between the room having a slide and the next press
TIMEOUT_MS = 60_000

# Sets window.__gptvizWhole, a promise of Date.now() once the follower's page shows `title` and a body
# drawn since the call: a figure whose chart is not one of those on the page at the call (Plotly gives
# a new chart new data), or a guess form where `form` is true.
WATCH = r"""([title, form]) => {
  const charts = () => [...document.querySelectorAll('.st-key-follow_figure .js-plotly-plot')];
  const old = charts().map(p => p.data);
  window.__gptvizWhole = new Promise((resolve) => {
    const done = () => {
      const h = document.querySelector('.st-key-follow_head h3');
      if (!h || h.innerText.replace(/\s+/g, ' ').trim() !== title) return false;
      if (form) return !!document.querySelector('.st-key-follow_body [data-testid=stForm]');
      const cs = charts();
      const drawn = (i) => i.getAttribute('href') || i.getAttribute('xlink:href');
      return cs.length > 0 && cs.every(p => p.querySelector('.main-svg') && !old.includes(p.data) &&
        [...p.querySelectorAll('.heatmaplayer image')].every(drawn));
    };
    const check = () => done() ? resolve(Date.now()) : setTimeout(check, 10);
    check();
  });
}"""


def summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "median": round(statistics.median(xs), 3),
        "p95": round(xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))], 3),
        "max": round(xs[-1], 3),
    }


def whole_slides(url: str, presses: int = PRESSES, n_followers: int = FOLLOWERS) -> dict:
    lesson = shipped_lesson(LESSON)
    n = len(lesson.slides)
    first = n - presses  # from 1: the slide the teacher starts on
    out: dict = {"load_before": os.getloadavg(), "followers": n_followers, "presses": presses}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        size: ViewportSize = {"width": 1280, "height": 720}
        teacher = browser.new_context(viewport=size).new_page()
        teacher.goto(f"{url}/lesson?lesson={LESSON}&slide={first}&present=1")
        wait_for_slide(teacher, first, n, TIMEOUT_MS * 2)
        teacher.get_by_role("button", name="Start teaching").click()
        code = teacher.locator(".st-key-class_bar strong")
        code.wait_for(timeout=TIMEOUT_MS)
        wait_for_app_run(teacher)
        followers: list[Page] = []
        for _ in range(n_followers):
            page = browser.new_context(viewport=size).new_page()
            page.goto(f"{url}/?follow={code.text_content()}")
            page.get_by_text(f"slide {first} of {n}").first.wait_for(timeout=TIMEOUT_MS * 2)
            followers.append(page)
        time.sleep(TALK_S)
        rows: list[dict] = []
        for k in range(first + 1, first + presses + 1):
            slide = lesson.slides[k - 1]
            args = [" ".join(slide.title.split()), slide.page == "predict"]
            for f in followers:  # each page watching before the key
                f.evaluate(WATCH, args)
            t0 = time.time()
            teacher.keyboard.press("PageDown")
            seen = [f.evaluate("() => window.__gptvizWhole") / 1000 - t0 for f in followers]
            rows.append({"slide": k, "page": slide.page, "seconds": [round(s, 3) for s in seen]})
            print(f"slide {k} ({slide.page}): {max(seen):.2f} s until all {n_followers} followers", flush=True)
            wait_for_slide(teacher, k, n, TIMEOUT_MS)
            time.sleep(TALK_S)
        teacher.get_by_role("button", name="End class").click()
        browser.close()
    seconds: list[list[float]] = [r["seconds"] for r in rows]
    every = [s for r in seconds for s in r]
    room = [max(r) for r in seconds]  # when the last follower had the slide whole
    out.update(
        per_press=rows,
        whole_slide_every_follower=summary(every),
        whole_slide_last_follower=summary(room),
        load_after=os.getloadavg(),
    )
    return out


def run(app_dir: Path, log: Path) -> dict:
    """whole_slides on a class-mode server of the app in app_dir on its shipped checkpoints."""
    env = {"PYTHONPATH": str(app_dir), "GPTVIZ_CLASS": "1"}
    with server_process(app_dir / "checkpoints", "shakespeare-char", log, env, app_dir) as (url, _):
        return whole_slides(url)
