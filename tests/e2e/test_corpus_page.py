"""The Corpus page in a real Chromium, as a person would use it: the shipped scan opens at once with
its charts drawn; a neuron's context opens as the prompt on Next token; a fresh scan run from the
page shows its progress and then its results; a second scan of the same corpus compares with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page, expect

import gptviz
from gptviz.bench.browser import ARTIFACTS, no_errors, streamlit_server, wait_for_app_run, wait_until_drawn
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.scanning.compare import document_losses

TEXT = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer\n" * 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The checkpoints; a samples folder holding a scan of the fixture checkpoint; scan B: the same
    corpus scanned by a model of other weights (its tokenizer and shape the same)."""
    ckpts = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    samples = tmp_path_factory.mktemp("samples")
    (samples / "hamlet").mkdir()
    (samples / "hamlet" / "a.txt").write_text(TEXT)
    gptviz.scan(str(ckpts / NAME), samples / "hamlet", window=32, k=5, out=samples / "scans" / NAME)
    bundle = gptviz.load(str(ckpts / NAME))
    torch.manual_seed(77)
    other = gptviz.save(gptviz.GPT(bundle.model.config), tmp_path_factory.mktemp("other") / "m", bundle.tokenizer)
    scan_b = tmp_path_factory.mktemp("scan-b") / "b"
    gptviz.scan(str(other), samples / "hamlet", window=32, k=5, out=scan_b)
    return ckpts, samples, scan_b


@pytest.fixture(scope="module")
def corpus_url(folders, tmp_path_factory):
    """A server of its own: its samples folder holds a scan of the fixture checkpoint."""
    ckpts, samples, _ = folders
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


def test_corpus_page_compares_two_scans_of_one_corpus(page: Page, corpus_url, folders, shot):
    """The shipped scan (A) against scan B: the mean losses and their change as the scans' summaries
    give them, each section drawn; a folder that is no scan is one line."""
    _, samples, scan_b = folders
    a, b = gptviz.load_scan(samples / "scans" / NAME), gptviz.load_scan(scan_b)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{corpus_url}/corpus")
    expect(page.get_by_role("heading", name="Corpus", exact=True)).to_be_visible(timeout=90_000)
    wait_until_drawn(page, timeout=90_000)
    page.get_by_role("tab", name="Compare two scans").click()
    box = page.get_by_label("Scan B: the folder of a second scan, same corpus")
    box.fill(str(scan_b.parent / "missing"))
    box.press("Enter")
    expect(page.get_by_text("Scan B not compared:")).to_be_visible()
    box.fill(str(scan_b))
    box.press("Enter")
    expect(page.get_by_role("heading", name="Neurons whose top contexts changed")).to_be_visible(timeout=60_000)
    wait_until_drawn(page, timeout=60_000)
    metrics = page.get_by_test_id("stMetricValue")
    expect(metrics.get_by_text(f"{a.summary['loss']:.3f}", exact=True).first).to_be_visible()
    expect(metrics.get_by_text(f"{b.summary['loss'] - a.summary['loss']:+.3f}", exact=True)).to_be_visible()
    doc = document_losses(a, b).iloc[0]  # the corpus's one document, by its file's name
    expect(page.locator(".ytick text", has_text=f"{doc['doc']}: {doc['document']}")).to_be_visible()
    for title in ("Loss per document, scan A against scan B", "induction per head: scan A against scan B"):
        expect(page.locator(".gtitle", has_text=title)).to_be_visible()
    # the chosen neuron's contexts in each scan, under a bold "Scan B" (the picker above is labelled "Scan B" too)
    expect(page.locator("strong").get_by_text("Scan B", exact=True)).to_be_visible()
    no_errors(page)
    shot(page, "corpus-compare")
