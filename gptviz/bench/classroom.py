"""A class of 30 on one laptop (a script, not a test): one dashboard server on the shipped default
checkpoint, 30 simulated students over Streamlit's own websocket protocol (bench/ws_client.py) and a few
real Chromium pages, all on 127.0.0.1, each step bounded in time.

1. open: every student opens the dashboard at once; seconds until its first page has finished
   (simulated: the script run is over; Chromium: every chart drawn).
2. prompt: every student submits a prompt of its own at once; seconds until the page shows it.
3. view: server time per page view with a cached run: one student reruns the Overview and the
   Attention page (with --every-page: every page) with nothing else going on; 20 views after the first.
4. follow: a teacher opens the shipped lesson, the 30 students follow its code, the teacher presses
   Next three times; seconds from each press to each follower's new slide (only where the
   dashboard has lessons).
5. the server's RSS (now and its peak) at the end.

    .venv/bin/gptviz bench --classroom -- [--students 30] [--browsers 3] [--app-dir DIR]
                                         [--label after] [--json FILE] [--every-page]
                                         [--class-lesson] [--whole-slide]

--class-lesson runs instead a lesson on a class-mode server (GPTVIZ_CLASS=1): the teacher's Next (to
every follower), the teacher's tab reloaded (its ?teach= link in a real Chromium page) and its next
Next onto the predict slide, every student sending a guess at once (until the teacher's screen counts
it), the teacher's reveal (until the scored round is on the teacher's screen and each student's), the
server's RSS and the load average before and after.

--whole-slide runs instead bench/class_slides.py: 5 followers in Chromium, 8 presses, the seconds from
the teacher's key until each follower shows the new slide whole (title and figure).

--app-dir runs another copy of the dashboard (e.g. `git archive main | tar -x -C DIR` for the
figures before a change); its own checkpoints/ are used. Prints a table and writes JSON
(artifacts/e2e/class_bench-LABEL.json by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright
from streamlit.proto.WidgetStates_pb2 import WidgetState

from ..dashboard.classroom.voters import VOTES_ENV
from . import class_slides
from .browser import ALL_CHARTS_DRAWN, ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT, server_process
from .ws_client import Student

STEP_S = 300  # no step may take longer than this
PROMPTS = [  # distinct prompts in the shipped model's alphabet, one per student
    f"{who}: {what}"
    for who in ("ROMEO", "JULIET", "HAMLET", "OPHELIA", "LEAR", "CORDELIA")
    for what in ("What light is this?", "Speak again.", "To sleep, perchance.", "Nothing comes.", "Be brief.")
]


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "p95": round(p95(xs), 3), "max": round(max(xs), 3)}


def rss_mb(pid: int) -> dict:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: round(int(fields[k].split()[0]) / 1024) for k in ("VmRSS", "VmHWM")}


@contextlib.contextmanager
def server(app_dir: Path, log: Path, env: dict | None = None):
    """The app in app_dir on the shipped checkpoints, importing that checkout's gptviz."""
    extra = {"PYTHONPATH": str(app_dir), **(env or {})}
    with server_process(app_dir / "checkpoints", "shakespeare-char", log, extra, app_dir) as (url, proc):
        yield url, proc.pid


async def drawn(page, timeout_ms: int = STEP_S * 1000) -> None:
    """A real page's script run is over and every chart on it is drawn."""
    await page.wait_for_timeout(200)
    await page.locator("[data-testid=stApp][data-test-script-state=notRunning]").wait_for(
        state="attached", timeout=timeout_ms
    )
    await page.wait_for_function(ALL_CHARTS_DRAWN, polling="raf", timeout=timeout_ms)


async def browser_open(page, url: str) -> float:
    t0 = time.monotonic()
    await page.goto(url)
    await drawn(page)
    return time.monotonic() - t0


async def browser_prompt(page, text: str) -> float:
    t0 = time.monotonic()
    box = page.get_by_label("Prompt", exact=True)
    await box.fill(text)
    await box.press("Control+Enter")
    await page.get_by_text(f"{len(text)} tokens").first.wait_for(timeout=STEP_S * 1000)
    await drawn(page)
    return time.monotonic() - t0


async def cached_views(url: str, paths: list[str], every_page: bool = False, repeats: int = 20) -> dict:
    """Server time per page view with a cached run, nothing else going on: each path's view sent
    `repeats` times after its first (which computes what it caches); every_page adds every page the
    top bar lists."""
    views = {}
    paths = list(paths)
    while paths:
        path = paths.pop(0)
        one = Student(url)
        await one.open(path)
        await one._send()
        await one._read_run(STEP_S)
        times = []
        for _ in range(repeats):
            t0 = time.monotonic()
            await one._send()
            await one._read_run(STEP_S)
            times.append(time.monotonic() - t0)
        views[path or "overview"] = summary(times)
        if every_page and path == "":
            paths += [p for p in one.pages if p not in views and p not in paths and p]
        await one.close()
    return views


async def bench(url: str, pid: int, n: int, n_browsers: int, every_page: bool = False) -> dict:
    out: dict = {}
    warm = Student(url)  # the model loaded and the default prompt run once, as a teacher would before class
    out["warm_up_s"] = round(await warm.open(), 3)
    await warm.close()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pages = [
            await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
            for _ in range(n_browsers)
        ]
        students = [Student(url) for _ in range(n)]
        # 1. everyone opens the dashboard at once
        opened = await asyncio.wait_for(
            asyncio.gather(*(s.open() for s in students), *(browser_open(p, url) for p in pages)), STEP_S
        )
        print("open done", flush=True)
        out["open"] = {"simulated": summary(opened[:n]), "chromium": summary(opened[n:]) if pages else None}
        # 2. everyone submits a prompt of their own at once
        prompts = await asyncio.wait_for(
            asyncio.gather(
                *(s.prompt(PROMPTS[i % len(PROMPTS)] + f" {i}") for i, s in enumerate(students)),
                *(browser_prompt(p, PROMPTS[i % len(PROMPTS)] + f" b{i}") for i, p in enumerate(pages)),
            ),
            STEP_S,
        )
        print("prompt done", flush=True)
        out["prompt"] = {"simulated": summary(prompts[:n]), "chromium": summary(prompts[n:]) if pages else None}
        for s in students:
            await s.close()
        out["page_view_cached"] = await cached_views(url, ["", "attention"], every_page)
        # 4. followers
        teacher = Student(url)
        await teacher.open(lesson="how-attention-works", slide="1")
        if "start_teaching" in teacher.widgets:  # a code exists once the teacher starts teaching
            await teacher.click("start_teaching", STEP_S)
        code = next((t.split("**")[1] for t in teacher.last.texts if t.startswith("Class code")), None)
        if code is None:
            out["follow"] = None  # this dashboard has no lessons
        else:
            followers = [Student(url) for _ in range(n)]
            await asyncio.wait_for(asyncio.gather(*(f.open(follow=code) for f in followers)), STEP_S)
            real = []
            for p in pages:
                await p.goto(f"{url}/?follow={code}")
                await p.get_by_text("slide 1 of").first.wait_for(timeout=STEP_S * 1000)
                real.append(p)
            delays, browser_delays, missed = [], [], 0
            for k in (2, 3, 4):
                t0 = time.monotonic()
                await teacher._send([WidgetState(id=teacher.widgets["slide_next"], trigger_value=True)])
                watch = [
                    asyncio.create_task(f.follow_until(lambda x, k=k: f"slide {k} of" in x, 60)) for f in followers
                ]
                seen = [
                    asyncio.create_task(p.get_by_text(f"slide {k} of").first.wait_for(timeout=60_000)) for p in real
                ]
                await teacher._read_run(STEP_S)
                await asyncio.wait([*watch, *seen], timeout=65)
                for task in watch:
                    if task.done() and not task.exception():
                        delays.append(task.result() - t0)
                    else:
                        missed += 1
                        task.cancel()
                if all(t.done() and not t.exception() for t in seen):
                    browser_delays.append(time.monotonic() - t0)  # all real followers saw it by now
                print(f"follow: slide {k}: {len(delays)} seen so far, {missed} missed", flush=True)
            out["follow"] = {
                "simulated": summary(delays) if delays else None,
                "missed": missed,
                "chromium_all_seen": summary(browser_delays) if browser_delays else None,
            }
            for f in followers:
                await f.close()
        await teacher.close()
        await browser.close()
    out["server_mb"] = rss_mb(pid)
    return out


LESSON = "how-attention-works"


def predict_slide(app_dir: Path) -> int | None:
    """The shipped lesson's predict slide in that checkout (from 1), None where it has none (a
    checkout from before the poll: its lesson is run without one, for the before figures)."""
    from gptviz.lessons import parse_lesson  # this checkout's reader, on that checkout's file

    lesson = parse_lesson((app_dir / "gptviz" / "lessons" / f"{LESSON}.toml").read_bytes(), LESSON)
    return next((i + 1 for i, s in enumerate(lesson.slides) if s.page == "predict"), None)


GUESSES = "eiao"


async def guess(s: Student, text: str, slide: int) -> float:
    """A follower sends a guess on the predict slide (its form: the text and the submit together);
    the monotonic time its own run (which records the guess) has finished."""
    i = slide - 1
    states = [WidgetState(id=s.widgets[f"poll_guess_{i}"], string_value=text)]
    states.append(WidgetState(id=s.widgets[f"poll_send_{i}"], trigger_value=True))
    await s._send(states)
    while True:
        run = await s._read_run(STEP_S)
        if not run.fragment:
            return run.finished


async def count_on_screen(page, n: int, t0: float, timeout: float = 60) -> list[float]:
    """Seconds from t0 until the teacher's screen first shows at least k answers, for k = 1..n."""
    seen: list[float] = []
    deadline = time.monotonic() + timeout
    while len(seen) < n and time.monotonic() < deadline:
        title = await page.locator(".st-key-slide_figure .gtitle").first.text_content() or ""
        found = re.search(r"guesses: (\d+) answer", title)
        shown = int(found.group(1)) if found else 0
        now = time.monotonic() - t0
        seen += [now] * (min(shown, n) - len(seen))
        await asyncio.sleep(0.05)
    return seen


async def class_lesson(url: str, pid: int, n: int, n_browsers: int, poll: int | None) -> dict:
    """A class on a class-mode server: the teacher (simulated) starts teaching, n simulated followers
    and n_browsers real ones follow; the teacher presses Next three times (seconds until each
    follower shows the new slide); the teacher's tab is reloaded (a real Chromium page opened on the
    teacher's URL, its ?teach= key) and presses Next onto the predict slide (seconds until each
    follower shows it); every simulated follower sends a guess at once (seconds until the teacher's
    screen counts it); the server's RSS. poll: the predict slide (from 1); None: a lesson without
    one, where the reloaded teacher's Next lands on slide 5 and nobody guesses."""
    out: dict = {"load_before": os.getloadavg()}
    target = poll or 5
    teacher = Student(url)
    await teacher.open(lesson=LESSON, slide=str(target - 4))
    await teacher.click("start_teaching", STEP_S)
    code = next(t.split("**")[1] for t in teacher.last.texts if t.startswith("Class code"))
    followers = [Student(url) for _ in range(n)]
    await asyncio.wait_for(asyncio.gather(*(f.open(follow=code) for f in followers)), STEP_S)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        real = [await browser.new_page(viewport={"width": 1280, "height": 720}) for _ in range(n_browsers)]
        for p in real:
            await p.goto(f"{url}/?follow={code}")
            await p.get_by_text(f"slide {target - 4} of").first.wait_for(timeout=STEP_S * 1000)

        async def everyone_sees(k: int, t0: float) -> tuple[list[float], list[float], int]:
            watch = [asyncio.create_task(f.follow_until(lambda x, k=k: f"slide {k} of" in x, 60)) for f in followers]
            seen = [asyncio.create_task(p.get_by_text(f"slide {k} of").first.wait_for(timeout=60_000)) for p in real]
            await asyncio.wait([*watch, *seen], timeout=65)
            delays = [t.result() - t0 for t in watch if t.done() and not t.exception()]
            for t in [*watch, *seen]:
                t.cancel()
            ok = all(t.done() and not t.cancelled() and not t.exception() for t in seen)
            return delays, ([time.monotonic() - t0] if ok and real else []), n - len(delays)

        nxt: list[float] = []
        nxt_real: list[float] = []
        missed = 0
        for k in range(target - 3, target):
            t0 = time.monotonic()
            await teacher._send([WidgetState(id=teacher.widgets["slide_next"], trigger_value=True)])
            waiting = asyncio.create_task(everyone_sees(k, t0))
            await teacher._read_run(STEP_S)
            d, r, m = await waiting
            nxt, nxt_real, missed = nxt + d, nxt_real + r, missed + m
            print(f"next: slide {k}: {len(d)} of {n} followers", flush=True)
        out["next"] = {"simulated": summary(nxt), "chromium_all_seen": summary(nxt_real) if nxt_real else None}
        out["next"]["missed"] = missed
        # the teacher's tab reloaded: the same URL (its ?teach= key) in a new session, a real page
        query = teacher.query
        await teacher.close()
        screen = await browser.new_page(viewport={"width": 1280, "height": 720})
        t_open = time.monotonic()
        await screen.goto(f"{url}/lesson?{query}")
        await screen.get_by_text(f"slide {target - 1} of").first.wait_for(timeout=STEP_S * 1000)
        await drawn(screen)
        out["teacher_reload_s"] = round(time.monotonic() - t_open, 3)
        t0 = time.monotonic()
        await screen.keyboard.press("PageDown")
        d, r, m = await everyone_sees(target, t0)
        out["after_reload_next"] = {"simulated": summary(d) if d else None, "missed": m}
        out["after_reload_next"]["chromium_all_seen"] = summary(r) if r else None
        print(f"after the reload: {len(d)} of {n} followers on slide {target}", flush=True)
        if poll is None:
            await browser.close()
            for f in followers:
                await f.close()
            return {**out, "poll": None, "server_mb": rss_mb(pid), "load_after": os.getloadavg()}
        await screen.locator(".st-key-slide_figure .gtitle").first.wait_for(timeout=STEP_S * 1000)
        # every simulated follower guesses at once
        t0 = time.monotonic()
        counting = asyncio.create_task(count_on_screen(screen, n, t0))
        acks = await asyncio.wait_for(
            asyncio.gather(*(guess(f, GUESSES[i % len(GUESSES)], poll) for i, f in enumerate(followers))), STEP_S
        )
        shown = await counting
        out["poll"] = {
            "guess_acknowledged": summary([a - t0 for a in acks]),
            "tally_on_teacher_screen": summary(shown) if shown else None,
            "counted": len(shown),
        }
        print(f"poll: {len(shown)} of {n} guesses on the teacher's screen", flush=True)
        await screen.screenshot(path=str(ARTIFACTS / "class_bench_poll.png"))
        out["reveal"] = await reveal(screen, followers)
        print(f"reveal: {out['reveal']}", flush=True)
        await screen.screenshot(path=str(ARTIFACTS / "class_bench_reveal.png"))
        await browser.close()
    for f in followers:
        await f.close()
    out["server_mb"] = rss_mb(pid)
    out["load_after"] = os.getloadavg()
    return out


async def reveal(screen, followers: list[Student]) -> dict:
    """The teacher presses r on the predict slide: seconds until the scored round (the room's guesses
    with the model's probabilities, the score, the lens depths) is on the teacher's screen, and until
    each simulated follower's page shows it."""
    t0 = time.monotonic()
    watch = [asyncio.create_task(f.follow_until(lambda x: x.startswith("Room "), 60)) for f in followers]
    await screen.keyboard.press("r")
    await screen.locator(".st-key-round_panel").first.wait_for(timeout=STEP_S * 1000)
    on_screen = time.monotonic() - t0
    await asyncio.wait(watch, timeout=65)
    seen = [t.result() - t0 for t in watch if t.done() and not t.cancelled() and not t.exception()]
    for t in watch:
        t.cancel()
    return {
        "teacher_screen_s": round(on_screen, 3),
        "followers": summary(seen) if seen else None,
        "missed": len(followers) - len(seen),
    }


async def generate_at_once(url: str, n: int) -> dict:
    """n students on the Generate page press "Generate 20" at once: seconds until each one's run has
    finished with its 20 new tokens drawn."""
    students = [Student(url) for _ in range(n)]
    await asyncio.wait_for(asyncio.gather(*(s.open("generate") for s in students)), STEP_S)

    async def press(s: Student) -> float:
        t0 = time.monotonic()
        await s._send([WidgetState(id=s.widgets["gen_run"], trigger_value=True)])
        run = await s._read_run(STEP_S)
        assert any("20 generated token(s)" in t for t in run.texts), "the page did not generate"
        return time.monotonic() - t0

    seconds = await asyncio.wait_for(asyncio.gather(*(press(s) for s in students)), STEP_S)
    for s in students:
        await s.close()
    return summary(list(seconds))


async def views_only(url: str, paths: list[str]) -> dict:
    warm = Student(url)
    await warm.open()
    await warm.close()
    if paths == ["all"]:
        return await cached_views(url, [""], every_page=True)
    return await cached_views(url, paths, repeats=40)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="gptviz bench --classroom --", description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--browsers", type=int, default=3)
    ap.add_argument("--app-dir", type=Path, default=ROOT)
    ap.add_argument("--label", default="after")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--every-page", action="store_true", help="a cached page view on every page, not two")
    ap.add_argument(
        "--views", nargs="+", metavar="PATH", help="only the cached views of these pages (url paths; all: every page)"
    )
    ap.add_argument("--generate", action="store_true", help="only: every student presses Generate 20 at once")
    ap.add_argument(
        "--whole-slide",
        action="store_true",
        help="only: 5 Chromium followers, 8 PageDown presses, seconds until each follower shows the new slide whole",
    )
    ap.add_argument(
        "--class-lesson",
        action="store_true",
        help="only: a lesson on a class-mode server (GPTVIZ_CLASS=1): Next, a reloaded teacher, every student guessing",
    )
    args = ap.parse_args(argv)
    if not 1 <= args.students <= 60 or not 0 <= args.browsers <= 5:
        ap.error("--students 1..60, --browsers 0..5: the machine is shared")
    result: dict[str, Any]
    if args.whole_slide:  # a server of its own (class mode); its figures alone
        result = class_slides.run(args.app_dir.resolve(), ARTIFACTS / f"class_bench-{args.label}.log")
        result.update(label=args.label, load=os.getloadavg())
        (args.json or ARTIFACTS / f"class_bench_whole-{args.label}.json").write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "per_press"}, indent=1))
        return
    # every student comes from 127.0.0.1: a room behind one address, allowed its answers (classroom/voters.py)
    env = {"GPTVIZ_CLASS": "1", VOTES_ENV: str(args.students + args.browsers)} if args.class_lesson else None
    with server(args.app_dir.resolve(), ARTIFACTS / f"class_bench-{args.label}.log", env) as (url, pid):
        if args.class_lesson:
            poll = predict_slide(args.app_dir.resolve())
            result = asyncio.run(class_lesson(url, pid, args.students, args.browsers, poll))
        elif args.views:  # only the cached views of these pages, after one warm-up open
            result = {"page_view_cached": asyncio.run(views_only(url, args.views)), "server_mb": rss_mb(pid)}
        elif args.generate:
            seconds = asyncio.run(generate_at_once(url, args.students))
            result = {"generate_20_at_once": seconds, "server_mb": rss_mb(pid)}
        else:
            result = asyncio.run(bench(url, pid, args.students, args.browsers, args.every_page))
    result.update(label=args.label, students=args.students, browsers=args.browsers, load=os.getloadavg())
    path = args.json or ARTIFACTS / f"class_bench-{args.label}.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
