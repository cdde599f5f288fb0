"""`gptviz dashboard` from the installed wheel (not the checkout) serves the app, and Chromium draws it.

It takes pytest-playwright's `browser`, not `page`: `page` would start this folder's shared server
(conftest.base_url), which runs the checkout's app.py, and a plain sync_playwright() cannot run
beside pytest-playwright in one session."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest
from installed import CHECKPOINTS, installed_package
from playwright.sync_api import Browser, expect

from gptviz.bench.browser import ARTIFACTS, free_port, heatmap_drawn, no_errors, wait_until_drawn

pytestmark = pytest.mark.slow  # builds and installs the wheel as well
PROMPT = "ROMEO:"


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@contextlib.contextmanager
def dashboard(pkg, log_path: Path, **env: str):
    """`gptviz dashboard --port P` from the installed script; yields (url, its process). It runs in a
    session of its own, so whatever the test leaves of it is killed at the end."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(pkg.script), "dashboard", "--port", str(port)],
            cwd=pkg.work,
            env=pkg.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, f"gptviz dashboard exited with {proc.returncode}: {log_path.read_text()}"
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                        break
                assert time.monotonic() < deadline, f"no answer in 90 s: {log_path.read_text()}"
                time.sleep(0.2)
            yield url, proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_gptviz_dashboard_from_the_wheel_draws_in_chromium(browser: Browser, tmp_path_factory):
    pkg = installed_package(tmp_path_factory)
    env = {"GPTVIZ_CHECKPOINTS_DIR": str(CHECKPOINTS), "GPTVIZ_DEFAULT_CHECKPOINT": "shakespeare-char"}
    with dashboard(pkg, ARTIFACTS / "installed-streamlit.log", **env) as (url, proc):
        # The server runs the installed app.py, not the checkout's.
        app = str(pkg.target / "gptviz" / "_app" / "app.py").encode()
        servers = [p for p in [proc.pid, *children(proc.pid)] if app in cmdline(p)]
        assert len(servers) == 1, [cmdline(p) for p in [proc.pid, *children(proc.pid)]]

        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        try:
            page = context.new_page()
            page.goto(f"{url}/?{urlencode({'prompt': PROMPT})}")
            expect(heatmap_drawn(page)).to_be_attached(timeout=120_000)
            wait_until_drawn(page)
            no_errors(page)
            expect(page.get_by_test_id("stAlert")).to_have_count(0)
            expect(page.get_by_role("combobox", name="Checkpoint")).to_have_value("shakespeare-char (shipped)")
            expect(page.get_by_text("6 tokens")).to_be_visible()
            # Each token chip shows "position·id": the ids of R, O, M, E, O, : in the checkpoint's own vocabulary.
            chars = json.loads((CHECKPOINTS / "shakespeare-char" / "config.json").read_text())["tokenizer"]["chars"]
            main = page.get_by_test_id("stMain")
            for pos, ch in enumerate(PROMPT):
                expect(main.get_by_text(f"{pos}·{chars.index(ch)}", exact=True)).to_have_count(1)
            page.screenshot(path=str(ARTIFACTS / "installed-1440.png"))
            page.set_viewport_size({"width": 1280, "height": 720})
            wait_until_drawn(page)
            page.screenshot(path=str(ARTIFACTS / "installed-1280x720.png"))
        finally:
            context.close()
        # What a service manager or `timeout` does: SIGTERM to the process it started, and only to it.
        proc.terminate()
        proc.wait(30)
        deadline = time.monotonic() + 10
        while alive(servers[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(servers[0]), "the Streamlit server outlived gptviz dashboard"
