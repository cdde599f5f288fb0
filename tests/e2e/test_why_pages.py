"""The Logit lens and Heads pages in a real Chromium: one pass as a person would make it. Open the
Logit lens and follow a typed token through depth; open Heads, click a head in the grid and land on
Attention with that head and the same prompt; click a cell of its heatmap and see why it scores so."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlparse

from playwright.sync_api import Page, expect

from gptviz.bench.browser import chart, click_head_cell, no_errors, open_page, wait_for_app_run, wait_until_drawn

PROMPT = "To be, or not to be: that is the question. To be, or not."


def test_logit_lens_then_heads_then_attention(page: Page, shot):
    page.set_viewport_size({"width": 1440, "height": 1300})
    page.goto("/?" + urlencode({"prompt": PROMPT}))
    wait_until_drawn(page, timeout=90_000)

    open_page(page, "Logit lens")
    lens = chart(page, "applied to an intermediate residual")
    expect(lens).to_be_visible()
    expect(lens.locator(".heatmaplayer image")).to_be_attached()
    box = page.get_by_role("textbox", name="Target token")
    box.fill("q")
    box.press("Enter")
    wait_until_drawn(page)
    expect(page.locator(".gtitle", has_text="Where “q” ranks through depth")).to_be_visible()
    no_errors(page)
    shot(page, "why-logit-lens")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.wait_for_timeout(500)
    shot(page, "why-logit-lens-1280x720")
    page.set_viewport_size({"width": 1440, "height": 1300})

    open_page(page, "Heads")
    expect(page.get_by_text("previous token ≥ 0.4")).to_be_visible()
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    grid = chart(page, "previous-token score")
    expect(grid).to_be_visible()
    no_errors(page)
    shot(page, "why-heads")

    click_head_cell(page, 1, 2)
    expect(page.get_by_role("heading", name="Attention", exact=True)).to_be_visible(timeout=60_000)
    wait_until_drawn(page)
    expect(page.locator(".gtitle", has_text="Layer 1, head 2: weights")).to_be_visible()
    expect(page.get_by_label("Prompt", exact=True)).to_have_value(PROMPT)  # the same run, not the preset
    wait_for_app_run(page)
    query = {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}
    assert (query.get("layer"), query.get("head")) == ("1", "2")
    no_errors(page)

    heat = chart(page, "Layer 1, head 2: weights")
    heat.scroll_into_view_if_needed()
    x, y = heat.evaluate(  # query 7's row, key 3's column, where Plotly's own category axes put them
        """(el, [q, k]) => { const X = el._fullLayout.xaxis, Y = el._fullLayout.yaxis, d = el.data[0];
            const r = el.getBoundingClientRect();
            return [r.left + X._offset + X.d2p(d.x[k]), r.top + Y._offset + Y.d2p(d.y[q])]; }""",
        [7, 3],
    )
    page.mouse.click(x, y)
    wait_for_app_run(page)
    expect(page.get_by_label("Query position")).to_have_value("7", timeout=60_000)
    expect(page.get_by_label("Key position")).to_have_value("3")
    expect(chart(page, "What each source writes into the score")).to_be_visible(timeout=60_000)
    no_errors(page)
    shot(page, "why-attention-cell")
