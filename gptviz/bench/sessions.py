"""Load benchmark (a script, not a test): several browser sessions on one dashboard server.

1. Latency: N = 1, 4, 8 Playwright contexts on one server over the shipped model, each typing its
   own distinct prompts; per-prompt seconds from Ctrl+Enter until the Overview is drawn again
   (median, p95) while the other sessions do the same.
2. Memory: distinct ~1,000-token prompts on a GPT-2-small-shaped checkpoint (random weights,
   written by bench/checkpoints.py), spread over 4 sessions; the server's RSS after 10, 60
   and 120 prompts. With the caches bounded (GPTVIZ_CACHE_RUNS Traces), RSS must plateau.

    .venv/bin/gptviz bench --sessions -- [--sessions 1,4,8] [--per-session 4]
                                             [--marks 10,60,120] [--skip-latency] [--skip-memory]

Writes artifacts/e2e/load_bench.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from .browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    VIEWPORT,
    long_prompt,
    open_on_prompt,
    streamlit_server,
    type_prompt,
    wait_until_drawn,
)
from .checkpoints import GPT2_SMALL_NAME, make_gpt2_small_checkpoint

SLOW = 600_000  # ms: a 124M-parameter model at T = 1,024 on two shared cores


def server_rss_mb(url_pid: int) -> float:
    """Resident memory of the server process, from /proc."""
    for line in Path(f"/proc/{url_pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def run_round(browser, url: str, n: int, per_session: int, prompt_of, timeout: int = SLOW) -> list[float]:
    """n sessions open, then take turns (interleaved, so the server always has n live sessions and
    each new prompt arrives while the others' results are still held) typing distinct prompts;
    seconds per prompt."""
    contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(n)]
    pages = [c.new_page() for c in contexts]
    for i, page in enumerate(pages):
        open_on_prompt(page, url, prompt_of(i, 0), timeout=timeout)
    seconds = []
    for k in range(1, per_session + 1):
        started = []
        for i, page in enumerate(pages):  # submit in every session first: they run at the same time
            started.append(time.perf_counter())
            type_prompt(page, prompt_of(i, k))
        for page, t0 in zip(pages, started):
            wait_until_drawn(page, timeout)
            seconds.append(time.perf_counter() - t0)
    for c in contexts:
        c.close()
    return seconds


def latency(browser, sessions: list[int], per_session: int) -> dict:
    out = {}
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "load-bench-latency.log") as url:
        for n in sessions:
            s = run_round(browser, url, n, per_session, lambda i, k: f"Session {i} asks question {k}: who goes there?")
            out[n] = {"prompts": len(s), "median_s": statistics.median(s), "p95_s": p95(s)}
            print(
                f"N = {n}: {len(s)} prompts, median {out[n]['median_s']:.2f} s, p95 {out[n]['p95_s']:.2f} s", flush=True
            )
    return out


def memory(browser, marks: list[int], sessions: int = 4) -> dict:
    root = make_gpt2_small_checkpoint(Path(tempfile.mkdtemp(prefix="gptviz-bench-")))
    log = ARTIFACTS / "load-bench-memory.log"
    rss, seconds = {}, []
    with streamlit_server(root, GPT2_SMALL_NAME, log) as url:
        pid = _server_pid(url)
        contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(sessions)]
        pages = [c.new_page() for c in contexts]
        open_on_prompt(pages[0], url, long_prompt(1000, salt="#0"), timeout=SLOW)
        rss["model loaded, 1 prompt"] = server_rss_mb(pid)
        print(f"  prompt 1: server RSS {rss['model loaded, 1 prompt']:.0f} MB", flush=True)
        done = 1
        for mark in marks:
            while done < mark:
                page = pages[done % sessions]
                t0 = time.perf_counter()
                if page.url == "about:blank":
                    open_on_prompt(page, url, long_prompt(1000, salt=f"#{done}"), timeout=SLOW)
                else:
                    type_prompt(page, long_prompt(1000, salt=f"#{done}"))
                    wait_until_drawn(page, SLOW)
                seconds.append(time.perf_counter() - t0)
                done += 1
                print(f"  prompt {done}: {seconds[-1]:.1f} s, server RSS {server_rss_mb(pid):.0f} MB", flush=True)
            rss[f"after {mark} prompts"] = server_rss_mb(pid)
            print(f"{mark} prompts: server RSS {rss[f'after {mark} prompts']:.0f} MB", flush=True)
        for c in contexts:
            c.close()
    shutil.rmtree(root, ignore_errors=True)  # the 500 MB checkpoint
    return {"rss_mb": rss, "median_s": statistics.median(seconds), "p95_s": p95(seconds), "sessions": sessions}


def _server_pid(url: str) -> int:
    """The streamlit process listening on the URL's port (the one bench/browser.py started)."""
    port = int(url.rsplit(":", 1)[1])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(cmd) and str(port).encode() in cmd:
            return int(proc.name)
    raise RuntimeError(f"no streamlit process on port {port}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="gptviz bench --sessions --", description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1,4,8")
    ap.add_argument("--per-session", type=int, default=4)
    ap.add_argument("--marks", default="10,60,120")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    args = ap.parse_args(argv)
    record: dict = {}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        if not args.skip_latency:
            record["latency"] = latency(browser, [int(x) for x in args.sessions.split(",")], args.per_session)
        if not args.skip_memory:
            record["memory"] = memory(browser, [int(x) for x in args.marks.split(",")])
        browser.close()
    (ARTIFACTS / "load_bench.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
