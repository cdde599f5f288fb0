"""Hostile surroundings in a real Chromium against a real server (issue 21): every request of a page
load stays on 127.0.0.1; an upload is never written to the server's disk and no other session can
open it; text from the URL or a folder name never becomes a live link; a folder whose name is not
UTF-8 and a NUL byte in the URL each get one line, never an internal error."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
import torch
from playwright.sync_api import Browser, Page, expect

import gptviz
from gptviz.bench.browser import (
    ARTIFACTS,
    heatmap_drawn,
    nav,
    no_errors,
    streamlit_server,
    wait_for_app_run,
    wait_until_drawn,
)
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME, make_checkpoints
from gptviz.dashboard.sources import uploads
from gptviz.figures.style import WORD_JOINER

LINK_NAME = "[click](mailto:x@example.invalid)"
UNDECODABLE = os.fsdecode(b"run-\xff\xfe")  # a folder name that is not UTF-8, as a listing gives it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server over the fixture checkpoints plus two hostile folder names, with a temp folder of
    its own (TMPDIR), so whatever it writes there can be looked at."""
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    shutil.copytree(root / NAME, root / LINK_NAME)
    shutil.copytree(root / NAME, root / UNDECODABLE)
    server_tmp = tmp_path_factory.mktemp("server-tmp")
    env = {"TMPDIR": str(server_tmp)}
    with streamlit_server(root, NAME, ARTIFACTS / "streamlit-hostile.log", env) as url:
        yield url, server_tmp


def holding(folder: Path, marker: bytes) -> list[Path]:
    """Every file below folder whose bytes contain marker."""
    found = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath) / name
            try:
                if marker in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def test_every_request_of_a_page_load_goes_to_loopback(browser: Browser, server):
    url, _ = server
    context = browser.new_context()
    page = context.new_page()
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.goto(url)
    expect(heatmap_drawn(page)).to_be_attached(timeout=90_000)
    wait_until_drawn(page)
    nav(page, "Attention")
    page.wait_for_timeout(1000)  # the favicon and fonts are asked for after the first paint
    hosts = {urlparse(u).hostname for u in seen if urlparse(u).scheme not in ("data", "blob")}
    assert hosts == {"127.0.0.1"}, sorted(u for u in seen if urlparse(u).hostname != "127.0.0.1")
    assert len(seen) > 10  # the page, its scripts, styles, fonts and icon were all seen
    context.close()


def test_an_upload_never_touches_the_servers_disk(browser: Browser, server, tmp_path):
    url, server_tmp = server
    marker = uuid.uuid4().hex  # in the uploaded config.json's model card, and nowhere else
    folder = tmp_path / "ckpt"
    torch.manual_seed(3)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), folder, gptviz.CharTokenizer(CHARS), card={"note": marker})
    files = sorted(folder.iterdir())
    a = browser.new_context()
    page_a = a.new_page()
    page_a.goto(f"{url}/?checkpoint=upload")
    wait_for_app_run(page_a, timeout=90_000)
    page_a.locator("[data-testid=stSidebar] input[type=file]").set_input_files([str(p) for p in files])
    expect(heatmap_drawn(page_a)).to_be_attached(timeout=90_000)
    wait_until_drawn(page_a)
    names = ", ".join(p.name for p in files)
    expect(page_a.get_by_text(f"upload: {names}").first).to_be_visible()
    assert holding(server_tmp, marker.encode()) == []  # while its session is open: in memory only
    assert not (server_tmp / "gptviz-uploads").exists()

    class Named:  # the content name a session would have to guess: "upload:<hash of the files>"
        def __init__(self, p):
            self.name, self.data, self.size = p.name, p.read_bytes(), p.stat().st_size

        def getvalue(self):
            return self.data

    source = uploads.UPLOAD_PREFIX + uploads._digest([Named(p) for p in files])
    b = browser.new_context()
    page_b = b.new_page()
    page_b.goto(f"{url}/?checkpoint={quote(source)}")
    wait_for_app_run(page_b, timeout=90_000)
    expect(page_b.get_by_test_id("stAlertContentError").first).to_contain_text("Checkpoint not loaded")
    expect(page_b.locator("[data-testid=stPlotlyChart]")).to_have_count(0)
    a.close()  # the tab is closed: nothing was ever written, so nothing is left
    assert holding(server_tmp, marker.encode()) == []
    b.close()


@pytest.mark.parametrize(
    "text, href",
    [("www.evil.example/login", "evil.example"), ("x@example.invalid", "mailto:"), (LINK_NAME, "mailto:")],
)
def test_text_from_the_url_or_a_folder_name_is_no_link(page: Page, server, text, href):
    url, _ = server
    page.goto(f"{url}/?checkpoint={quote(text)}")
    wait_for_app_run(page, timeout=90_000)
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("Checkpoint" if text != LINK_NAME else "tokens")
    assert text in main.inner_text().replace(WORD_JOINER, "")  # shown as typed, but for invisible joiners
    assert page.locator(f'a[href*="{href}"]').count() == 0
    no_errors(page)


def test_a_folder_name_that_is_not_utf8_leaves_the_list_working(page: Page, server):
    url, _ = server
    page.goto(url)
    expect(heatmap_drawn(page)).to_be_attached(timeout=90_000)
    wait_until_drawn(page)
    expect(page.get_by_test_id("stSidebar")).to_contain_text("run-\\xff\\xfe")  # said once, escaped
    no_errors(page)


@pytest.mark.parametrize("title", ["Overview", "Timeline"])
def test_a_nul_byte_in_the_url_is_one_line(page: Page, server, title):
    url, _ = server
    page.goto(f"{url}/{'timeline' if title == 'Timeline' else ''}?checkpoint=%00")
    wait_for_app_run(page, timeout=90_000)
    expect(page.get_by_test_id("stAlertContentError").first).to_contain_text("NUL byte")
    no_errors(page)
