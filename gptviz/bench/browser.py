"""Start `streamlit run app.py` on 127.0.0.1 and drive Debian's Chromium: shared by the browser
tests (tests/e2e) and the dashboard's benchmarks (dashboard.py, sessions.py, classroom.py)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import Page, ViewportSize, expect

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "e2e"  # screenshots and logs (pytest-playwright wipes test-results/)
CHROMIUM = "/usr/bin/chromium"
# Playwright already passes --headless --no-sandbox --disable-background-networking etc.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic"]
VIEWPORT: ViewportSize = {"width": 1500, "height": 1300}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(checkpoints: Path, default: str, log_path: Path, extra_env: dict | None = None):
    """A dashboard server on a free port over the checkpoints in a folder, opening on `default`
    (extra_env: more environment, e.g. its own TMPDIR); yields its URL and stops it on exit."""
    with server_process(checkpoints, default, log_path, extra_env) as (url, _):
        yield url


@contextlib.contextmanager
def server_process(
    checkpoints: Path, default: str, log_path: Path, extra_env: dict | None = None, app_dir: Path = ROOT
):
    """streamlit_server of the app in app_dir (another checkout, for a before/after); yields its URL
    and its process."""
    env = {"GPTVIZ_CHECKPOINTS_DIR": str(checkpoints), "GPTVIZ_DEFAULT_CHECKPOINT": default, **(extra_env or {})}
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true"]
    cmd += ["--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=app_dir, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log_path}")
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not answer in 60 s; see {log_path}")
                time.sleep(0.1)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_for_app_run(page: Page, initial_wait_ms: int = 200, timeout: int = 60_000) -> None:
    """Wait until Streamlit is connected and its script is not running."""
    page.wait_for_timeout(initial_wait_ms)  # the script state flips to "running" asynchronously
    page.locator("[data-testid=stApp][data-test-connection-state=CONNECTED]").wait_for(
        state="attached", timeout=timeout
    )
    page.locator("[data-testid=stApp][data-test-script-state=notRunning]").wait_for(state="attached", timeout=timeout)
    expect(page.get_by_test_id("stSkeleton")).to_have_count(0, timeout=timeout)


def wait_for_slide(page: Page, i: int, n: int, timeout: int = 60_000) -> None:
    """Wait until slide i (from 1) of n is drawn: its counter, the run over, its figure on the page."""
    expect(page.get_by_text(re.compile(f"slide {i} of {n}$"))).to_be_visible(timeout=timeout)
    wait_for_app_run(page, timeout=timeout)
    expect(page.locator(".st-key-slide_figure .main-svg").first).to_be_attached(timeout=timeout)


PAGES = ["Overview", "Attention", "Q / K / V", "Shapes", "Residual stream", "Next token"]

# True once every chart on screen has been drawn by Plotly (its SVG exists; a heatmap's image is set).
ALL_CHARTS_DRAWN = """() => { const cs = [...document.querySelectorAll('[data-testid=stPlotlyChart]')]
  .filter(c => c.offsetParent !== null);
  return cs.length > 0 && cs.every(c => c.querySelector('.main-svg') &&
    [...c.querySelectorAll('.heatmaplayer image')]
      .every(i => i.getAttribute('href') || i.getAttribute('xlink:href'))); }"""


# The top bar's menus; on a narrow screen it folds the last ones into an "N more" menu and keeps the
# folded ones (and the "more" menu while nothing is folded) in the page, inert or aria-hidden and
# transparent: still "visible" to Playwright.
TOP_SECTIONS = "[data-testid=stTopNavSection]:not([inert] *):not([aria-hidden=true] *)"


def click_page_link(page: Page, title: str, timeout: int = 60_000) -> None:
    """Click a page's link in the top bar, where each section is a menu: open the menus in turn
    until one lists the page (on a narrow screen the bar folds the last sections into an "N more"
    menu, and the folded ones stay in the page, hidden)."""
    link = page.get_by_role("menuitem", name=title, exact=True)
    for _ in each_menu(page, timeout):
        if link.count():
            link.click()
            return
    raise AssertionError(f"no page {title!r} in the top bar's menus")


def each_menu(page: Page, timeout: int = 60_000):
    """Open the top bar's menus one after the other (yielding while each is open). The bar may fold
    or unfold a menu while another opens, so the count is read again at every step."""
    sections = page.locator(TOP_SECTIONS)
    expect(sections.first).to_be_visible(timeout=timeout)
    i = 0
    while i < sections.count():
        sections.nth(i).click()
        expect(page.get_by_test_id("stTopNavPopover")).to_be_visible()
        yield
        page.keyboard.press("Escape")
        i += 1


def page_titles(page: Page) -> list[str]:
    """Every page's title as the top bar lists it, section by section."""
    titles = []
    for _ in each_menu(page):  # an item's text starts with its icon's name ("home\n\nOverview")
        shown = [t.split("\n")[-1].strip() for t in page.get_by_role("menuitem").all_inner_texts()]
        titles += [t for t in shown if t not in titles]
    return titles


def nav(page: Page, title: str, timeout: int = 60_000) -> float:
    """Open a page from the top bar; seconds from the click until its charts are drawn and the
    script run is over (the wait before checking the run state is included when it is longer)."""
    t0 = time.perf_counter()
    click_page_link(page, title, timeout)
    expect(page.get_by_role("heading", name=title, exact=True)).to_be_visible(timeout=timeout)
    wait_until_drawn(page, timeout)
    return time.perf_counter() - t0


open_page = nav  # the name the why, what-if and over-time modules use


def enter_prompt(page: Page, text: str, timeout: int = 60_000) -> float:
    """Type a prompt and press Enter; seconds until the Overview's charts show the new run."""
    t0 = time.perf_counter()
    type_prompt(page, text)
    wait_until_drawn(page, timeout)
    return time.perf_counter() - t0


def open_on_prompt(page: Page, url: str, prompt: str, timeout: int = 60_000) -> None:
    """Open the dashboard with a prompt in the URL (the server loads the model and runs it)."""
    page.goto(f"{url}/?{urlencode({'prompt': prompt})}")
    heatmap_drawn(page).wait_for(state="attached", timeout=timeout)
    wait_until_drawn(page, timeout)


def wait_until_drawn(page: Page, timeout: int = 60_000) -> None:
    """Wait until the script run is over and every chart on screen is drawn."""
    wait_for_app_run(page, timeout=timeout)
    page.wait_for_function(ALL_CHARTS_DRAWN, polling="raf", timeout=timeout)


def tour(page: Page, timeout: int = 60_000, shot=None) -> dict[str, float]:
    """From the Overview, open every other page once and come back: seconds per page.
    A page's first visit after a new prompt is the one that computes what it shows."""
    seconds = {}
    for title in [*PAGES[1:], PAGES[0]]:
        seconds[title] = nav(page, title, timeout=timeout)
        no_errors(page)
        if shot:
            shot(page, title.replace(" / ", "").replace(" ", "-").lower())
    return seconds


def long_prompt(n: int, salt: str = "") -> str:
    """n characters of plain text, all of them in the fixture checkpoints' vocabulary."""
    text = f"Now is the winter of our discontent made glorious summer by this sun of York{salt}. "
    return (text * (n // len(text) + 1))[:n]


def no_errors(page: Page) -> None:
    expect(page.get_by_test_id("stException")).to_have_count(0)
    expect(page.get_by_text("Internal error")).to_have_count(0)


def record_frames(page: Page) -> list[int]:
    """The size in bytes of every websocket message the page receives from now on: Streamlit sends
    each element (a chart's whole Plotly figure) as one message."""
    sizes: list[int] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: sizes.append(len(payload))))
    return sizes


def chart(page: Page, title: str):
    """The Plotly chart whose title contains `title`."""
    return (
        page.locator("[data-testid=stPlotlyChart]")
        .filter(has=page.locator(".gtitle", has_text=title))
        .locator(".js-plotly-plot")
    )


def click_head_cell(page: Page, layer: int, head: int) -> None:
    """Click layer, head's cell in the Heads page's grid, at the pixel Plotly's own mapping of its
    category axes gives (the click opens that head in Attention)."""
    grid = chart(page, "previous-token score")
    grid.scroll_into_view_if_needed()
    x, y = grid.evaluate(
        """(el, [head, layer]) => { const L = el._fullLayout, r = el.getBoundingClientRect();
            return [r.left + L._size.l + L.xaxis.d2p(head), r.top + L._size.t + L.yaxis.d2p(layer)]; }""",
        [str(head), str(layer)],
    )
    page.mouse.click(x, y)


def charts(page: Page):
    return page.locator("[data-testid=stPlotlyChart] .js-plotly-plot")


def heatmap_drawn(page: Page):
    """The first heatmap image Plotly has painted."""
    return page.locator("[data-testid=stPlotlyChart] .heatmaplayer image").first


def type_prompt(page: Page, text: str) -> None:
    """Fill the multi-line prompt box and submit it with Ctrl+Enter (Enter is a new line there)."""
    box = page.get_by_label("Prompt", exact=True)
    box.fill(text)
    box.press("Control+Enter")
