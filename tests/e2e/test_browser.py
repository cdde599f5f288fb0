"""The dashboard in a real Chromium, driven like a person: type a prompt, press Enter, switch
pages, pick a head, click the layer × head grid, and check what is drawn."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import torch
from playwright.sync_api import Page, expect

import gptviz
from gptviz.bench.browser import (
    charts,
    click_head_cell,
    heatmap_drawn,
    nav,
    no_errors,
    tour,
    type_prompt,
    wait_for_app_run,
)
from gptviz.bench.checkpoints import CHARS, CONFIG


def query(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_first_open_then_type_a_prompt(page: Page, shot):
    page.goto("/")
    expect(heatmap_drawn(page)).to_be_attached(timeout=90_000)  # a result before anyone types
    wait_for_app_run(page)
    type_prompt(page, "To be, or not to be")
    wait_for_app_run(page)
    expect(page.get_by_text("19 tokens")).to_be_visible()
    expect(page.locator(".gtitle", has_text="Next token after 18 e")).to_be_visible()
    assert query(page)["prompt"] == "To be, or not to be"
    no_errors(page)
    shot(page, "overview")


def test_switch_pages_and_pick_a_head(page: Page, shot):
    page.goto("/")
    wait_for_app_run(page)
    type_prompt(page, "Now is the winter of our discontent")
    wait_for_app_run(page)
    tour(page, shot=lambda p, name: shot(p, "page-" + name))
    expect(charts(page).first).to_be_visible()
    nav(page, "Attention")
    page.get_by_test_id("stRadio").filter(has_text="Head").get_by_text("2", exact=True).click()
    wait_for_app_run(page)
    expect(page.locator(".gtitle", has_text="Layer 0, head 2: weights")).to_be_visible()
    assert query(page)["head"] == "2"
    shot(page, "attention-head-2")


def test_click_the_layer_head_grid_opens_that_head(page: Page):
    page.goto("/attention")
    wait_for_app_run(page)
    grid = (
        page.locator("[data-testid=stPlotlyChart]")
        .filter(has=page.locator(".gtitle", has_text="Every layer × head"))
        .locator(".js-plotly-plot")
    )
    expect(grid).to_be_visible()
    grid.scroll_into_view_if_needed()
    # The pixel of the centre of layer 1, head 3's tile, from Plotly's own axis mapping.
    x, y = grid.evaluate(
        """(el) => { const L = el._fullLayout, pitch = L.meta.tile_pitch, r = el.getBoundingClientRect();
                     return [r.left + L.xaxis._offset + L.xaxis.d2p(3 * pitch + pitch / 2 - 1),
                             r.top + L.yaxis._offset + L.yaxis.d2p(1 * pitch + pitch / 2 - 1)]; }"""
    )
    page.mouse.click(x, y)
    wait_for_app_run(page)
    expect(page.locator(".gtitle", has_text="Layer 1, head 3")).to_be_visible()
    assert (query(page)["layer"], query(page)["head"]) == ("1", "3")


def test_unknown_characters_in_the_browser(page: Page, shot):
    page.goto("/")
    wait_for_app_run(page)
    type_prompt(page, "Café | bar")
    wait_for_app_run(page)
    expect(page.get_by_text("does not know 2 character(s)")).to_be_visible()
    shot(page, "unknown-characters")
    page.get_by_role("button", name="Drop the 2 unknown character(s) and run").click()
    wait_for_app_run(page)
    expect(page.get_by_text("Dropped 2 unknown character(s)")).to_be_visible()
    expect(heatmap_drawn(page)).to_be_attached()
    no_errors(page)


# The text a box shows cut on the right: its <input>'s text runs past the box.
CUT = "(e) => e.scrollWidth - e.clientWidth"


def test_a_gemma_scope_saes_reads_box_shows_its_whole_choice(page: Page, shot, tmp_path):
    # a params.npz whose path names no layer gets two boxes: the layer and what it reads; beside the
    # layer box, the Reads box showed "residual stream (r" (and it is what a person checks)
    (tmp_path / "params.npz").write_bytes(b"")  # not read until a layer is named: its name says what it is
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"/?sae={tmp_path / 'params.npz'}")
    expect(page.get_by_text("Say which layer this Gemma Scope SAE reads")).to_be_visible(timeout=90_000)
    wait_for_app_run(page)
    reads = page.get_by_role("combobox", name="Reads")
    for choice in ("residual stream (res)", "MLP output (mlp)", "attention (att)"):
        if reads.input_value() != choice:
            reads.click()
            page.get_by_role("option", name=choice).click()
            wait_for_app_run(page)
        expect(reads).to_have_value(choice)
        reads.scroll_into_view_if_needed()
        assert reads.evaluate(CUT) <= 1, f"{choice!r} is cut {reads.evaluate(CUT)} px in the Reads box"
        if choice.endswith("(res)"):
            shot(page, "sae_gemma_reads_1280x720")
    no_errors(page)


def test_an_uploaded_checkpoint_stays_in_use_when_a_click_opens_another_page(page: Page, tmp_path):
    # st.switch_page (a click in the Heads grid opens that head in Attention) emptied the uploader on the
    # server while the browser still listed its files: the page then had no model ("Nothing to show yet")
    torch.manual_seed(7)
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), tmp_path / "mine", gptviz.CharTokenizer(CHARS))
    page.goto("/?checkpoint=upload")
    wait_for_app_run(page)
    files = sorted(str(f) for f in (tmp_path / "mine").iterdir())
    page.get_by_test_id("stFileUploaderDropzoneInput").first.set_input_files(files)
    expect(heatmap_drawn(page)).to_be_attached(timeout=60_000)
    nav(page, "Heads")
    click_head_cell(page, 1, 1)
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible(timeout=60_000)
    wait_for_app_run(page)
    expect(page.locator(".gtitle", has_text="Layer 1, head 1: weights")).to_be_visible()
    expect(page.get_by_text("uploaded on the page before")).to_be_visible()
    expect(page.get_by_text("Nothing to show yet")).to_have_count(0)
    no_errors(page)
