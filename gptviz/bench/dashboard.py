"""Time the dashboard in a real Chromium, warm, and make the README screenshot.

    .venv/bin/gptviz bench --dashboard -- [--runs 7] [--screenshot docs/screenshot.png]

Two timings, measured with the page's own clock (performance.now) in the same browser session:
  enter -> heatmap   pressing Enter on a new prompt until the Overview heatmap shows the new run
                     (the model really runs: every prompt is new to the cache);
  trivial rerun      pressing Run again on the same prompt until Streamlit's script run is over
                     (a rerun of the same page from the caches: Streamlit's own round trip).
It uses the shipped checkpoints/shakespeare-char when it exists, else a small random-weight
fixture checkpoint (--fixture forces that); the output says which.

    .venv/bin/gptviz bench --dashboard -- --long [--runs 3]

times every page at T = 1,024 on a GPT-2-small-shaped random checkpoint instead: for each new
prompt, Enter -> Overview drawn, then each page's first visit (click -> every chart drawn), next
to the model's plain forward time at T = 1,024 measured in this process, and the largest
websocket message the browser received.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import sync_playwright

from .browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    VIEWPORT,
    enter_prompt,
    long_prompt,
    open_on_prompt,
    record_frames,
    streamlit_server,
    tour,
    wait_for_app_run,
)
from .checkpoints import GPT2_SMALL_NAME, NAME, make_checkpoints, make_gpt2_small_checkpoint

HEATMAP = "[data-testid=stPlotlyChart] .heatmaplayer image"
SCREENSHOT_VIEW = {
    "prompt": "ROMEO: But soft, what light through yonder window breaks?",
    "layer": 2,
    "head": 1,
    "position": 56,
}
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
]

# Timestamps, in the page's clock, of Enter, clicks and every change of Streamlit's script state.
INSTRUMENT = """() => {
  window.__log = [];
  const app = document.querySelector('[data-testid=stApp]');
  new MutationObserver(() =>
      window.__log.push(['state', app.getAttribute('data-test-script-state'), performance.now()]))
    .observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  document.addEventListener('keydown', e => {
    if (e.key === 'Enter') window.__log.push(['enter', '', performance.now()]);
  }, true);
  document.addEventListener('click', () => window.__log.push(['click', '', performance.now()]), true);
}"""

NEW_IMAGE = """(old) => { const img = document.querySelector('HEATMAP');
  const href = img && (img.getAttribute('href') || img.getAttribute('xlink:href'));
  return href && href !== old ? performance.now() : false; }""".replace("HEATMAP", HEATMAP)

RUN_OVER = """(t0) => { const log = window.__log; let running = false;
  for (const [kind, value, t] of log) { if (kind !== 'state' || t < t0) continue;
    if (value === 'running') running = true; else if (running && value === 'notRunning') return t; }
  return false; }"""


def last(page, kind: str) -> float:
    return page.evaluate(f"() => window.__log.filter(e => e[0] === '{kind}').at(-1)[2]")


def heatmap_href(page) -> str:
    return page.locator(HEATMAP).first.evaluate("el => el.getAttribute('href') || el.getAttribute('xlink:href')")


def summary(ms: list[float]) -> dict:
    return dict(
        median=round(statistics.median(ms)),
        min=round(min(ms)),
        max=round(max(ms)),
        n=len(ms),
        all=[round(x) for x in ms],
    )


def measure(url: str, runs: int, screenshot: Path | None, base_prompt: str) -> dict:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(url)
        page.locator(HEATMAP).first.wait_for(state="attached", timeout=120_000)
        wait_for_app_run(page)
        page.evaluate(INSTRUMENT)
        box = page.get_by_label("Prompt", exact=True)
        run_button = page.get_by_role("button", name="Run")
        enter_ms, rerun_ms, script_ms = [], [], []
        for i in range(runs + 1):  # the first run warms the caches and the chart code
            old = heatmap_href(page)
            box.fill(f"{base_prompt} {WORDS[i % len(WORDS)]} {i}")
            box.press("Control+Enter")  # Enter alone is a new line in the prompt box
            drawn = page.wait_for_function(NEW_IMAGE, arg=old, polling="raf", timeout=60_000).json_value()
            t_enter = last(page, "enter")
            over = page.wait_for_function(RUN_OVER, arg=t_enter, polling=20, timeout=60_000).json_value()
            wait_for_app_run(page)
            run_button.click()
            t_click = last(page, "click")
            done = page.wait_for_function(RUN_OVER, arg=t_click, polling="raf", timeout=60_000).json_value()
            wait_for_app_run(page)
            if i:
                enter_ms.append(drawn - t_enter)
                script_ms.append(over - t_enter)
                rerun_ms.append(done - t_click)
        if screenshot:  # a fresh session opened from a bookmark-style URL, on a 1440 × 900 laptop screen
            page.set_viewport_size({"width": 1440, "height": 900})
            page.goto(f"{url}/?{urlencode(SCREENSHOT_VIEW)}")
            page.locator(HEATMAP).first.wait_for(state="attached", timeout=60_000)
            wait_for_app_run(page)
            page.wait_for_timeout(1500)  # let Plotly finish its transitions
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot))
        browser.close()
    return {
        "enter_to_heatmap_ms": summary(enter_ms),
        "enter_to_script_done_ms": summary(script_ms),
        "trivial_rerun_ms": summary(rerun_ms),
    }


def forward_seconds(checkpoint: Path, T: int, repeats: int = 5) -> float:
    """Median plain forward time of the checkpoint's model at T tokens, in this process."""
    import torch

    import gptviz

    model = gptviz.load(checkpoint).model
    idx = torch.randint(0, model.config.vocab_size, (1, T))
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            model(idx)
            times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def measure_long(url: str, runs: int, T: int = 1024) -> dict:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        frames = record_frames(page)
        open_on_prompt(page, url, long_prompt(T), timeout=300_000)
        seconds: dict[str, list[float]] = {}
        for i in range(runs):
            seconds.setdefault("Enter -> Overview", []).append(
                enter_prompt(page, long_prompt(T, salt=f" {i}"), timeout=300_000)
            )
            for title, s in tour(page, timeout=300_000).items():
                seconds.setdefault(title, []).append(s)
        browser.close()
    return {
        "page_seconds": {k: round(statistics.median(v), 2) for k, v in seconds.items()},
        "largest_message_bytes": max(frames),
    }


def main_long(runs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_gpt2_small_checkpoint(Path(tmp))
        forward = forward_seconds(root / GPT2_SMALL_NAME, 1024)
        with streamlit_server(root, GPT2_SMALL_NAME, Path(tmp) / "streamlit.log") as url:
            result = measure_long(url, runs)
    print(
        json.dumps({"checkpoint": "GPT-2 small shape, random weights, T = 1024", "plain_forward_s": round(forward, 2)})
    )
    for title, s in result["page_seconds"].items():
        print(json.dumps({"page": title, "median_s": s, "x_forward": round(s / forward, 2)}))
    print(json.dumps({"largest_message_MB": round(result["largest_message_bytes"] / 2**20, 2)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="gptviz bench --dashboard --", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--screenshot", type=Path, help="also save a screenshot of the Overview here")
    ap.add_argument("--fixture", action="store_true", help="use the random-weight fixture checkpoint")
    ap.add_argument("--long", action="store_true", help="every page at T = 1024 on a GPT-2-small-shaped checkpoint")
    args = ap.parse_args(argv)
    if args.long:
        return main_long(args.runs)
    shipped = ROOT / "checkpoints" / "shakespeare-char"
    with tempfile.TemporaryDirectory() as tmp:
        if args.fixture or not (shipped / "config.json").is_file():
            root, name, checkpoint = make_checkpoints(Path(tmp)), NAME, f"fixture {NAME} (random weights)"
        else:
            root, name, checkpoint = shipped.parent, shipped.name, str(shipped)
        with streamlit_server(root, name, Path(tmp) / "streamlit.log") as url:
            result = measure(url, args.runs, args.screenshot, "Now is the winter of our discontent")
    print(json.dumps({"checkpoint": checkpoint}))
    for name, stats in result.items():
        print(json.dumps({name: stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
