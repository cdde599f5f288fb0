"""The Corpus page in a real Chromium, as a person would use it: the shipped scan opens at once with
its charts drawn; a neuron's context opens as the prompt on Next token; a fresh scan run from the
page shows its progress and then its results."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

import gptviz
from gptviz.bench.browser import ARTIFACTS, no_errors, streamlit_server, wait_for_app_run, wait_until_drawn
from gptviz.bench.checkpoints import NAME, make_checkpoints

TEXT = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer\n" * 8


@pytest.fixture(scope="module")
def corpus_url(tmp_path_factory):
    """A server of its own: its samples folder holds a scan of the fixture checkpoint."""
    ckpts = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    samples = tmp_path_factory.mktemp("samples")
    (samples / "hamlet").mkdir()
    (samples / "hamlet" / "a.txt").write_text(TEXT)
    gptviz.scan(str(ckpts / NAME), samples / "hamlet", window=32, k=5, out=samples / "scans" / NAME)
    scans = tmp_path_factory.mktemp("scans")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPTVIZ_SAMPLES_DIR", str(samples))
        mp.setenv("GPTVIZ_SCANS_DIR", str(scans))
        with streamlit_server(ckpts, NAME, ARTIFACTS / "streamlit-corpus.log") as url:
            yield url


def test_corpus_page_shipped_scan_open_as_prompt_and_a_fresh_scan(page: Page, corpus_url, shot):
    page.set_viewport_size({"width": 1440, "height": 1300})
    page.goto(f"{corpus_url}/corpus")
    expect(page.get_by_role("heading", name="Corpus", exact=True)).to_be_visible(timeout=90_000)
    wait_until_drawn(page, timeout=90_000)
    expect(page.get_by_test_id("stMetric").first).to_be_visible()
    expect(page.locator(".gtitle", has_text="Windows by loss")).to_be_visible()
    no_errors(page)
    shot(page, "corpus-shipped-scan")
    page.get_by_role("tab", name="Heads over windows").click()
    expect(page.locator(".gtitle", has_text="per head over the windows")).to_be_visible()
    shot(page, "corpus-heads")
    page.get_by_role("tab", name="Neurons").click()
    expect(page.get_by_text("strongest contexts, the peak token highlighted")).to_be_visible()
    shot(page, "corpus-neurons")

    # the strongest context of neuron 0 opens as the prompt on Next token
    page.get_by_role("button", name="Next token").first.click()
    expect(page.get_by_role("heading", name="Next token", exact=True)).to_be_visible()
    wait_for_app_run(page)
    prompt = page.get_by_role("textbox", name="Prompt").input_value()
    assert prompt and prompt in TEXT
    no_errors(page)

    # a fresh scan from the page: progress, then its own results
    page.goto(f"{corpus_url}/corpus")
    expect(page.get_by_role("heading", name="Corpus", exact=True)).to_be_visible()
    wait_for_app_run(page)
    page.get_by_text("run a new scan").click()
    wait_for_app_run(page)
    page.get_by_role("button", name="Run scan").click()
    expect(page.get_by_text("Scan of ", exact=False)).to_be_visible(timeout=120_000)
    wait_until_drawn(page, timeout=60_000)
    folder = page.get_by_label("Scan folder (what `gptviz scan --out` wrote)").input_value()
    assert folder and Path(folder).name == "scan"  # the folder box shows where the fresh scan was written
    no_errors(page)
    shot(page, "corpus-fresh-scan")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.wait_for_timeout(500)
    shot(page, "corpus-fresh-scan-1280x720")
