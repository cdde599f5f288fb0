"""What the dashboard draws, measured in a real Chromium: numeric-looking tokens keep their order
on category axes, and presentation mode at 1280 × 720 with the sidebar open leaves every chart
readable (wide enough, titles inside their chart, the colour bar clear of the axis titles).

Screenshots of every page go to artifacts/e2e/presentation-*.png; what was measured goes to
artifacts/e2e/presentation.json."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from gptviz.bench.browser import (
    ARTIFACTS,
    PAGES,
    charts,
    click_page_link,
    nav,
    no_errors,
    open_on_prompt,
    page_titles,
    wait_for_app_run,
    wait_until_drawn,
)

PI = "3.14159265358979"  # every token a digit or "." : Plotly would make these axes numeric
PI_LABELS = [f"{i} {c}" for i, c in enumerate(PI)]
SLOW = 180_000  # ms: the shared CI cores may be busy

# Per chart: its box, its titles' boxes, the colour bar's and the axis titles' boxes, and its
# plot area; Plotly's own layout gives the axis types and categories.
MEASURE = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')]
  .filter(c => c.offsetParent !== null).map(c => {
    const el = c.querySelector('.js-plotly-plot'), L = el._fullLayout;
    const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                       return r.width ? {l: r.left, r: r.right, t: r.top, b: r.bottom} : null; };
    const all = sel => [...el.querySelectorAll(sel)].map(box).filter(Boolean);
    return {title: (L.title && L.title.text) || '', chart: box(el),
            titles: all('.gtitle, .gtitle-subtitle'), colorbars: all('.colorbar'),
            ytitles: all('.g-ytitle'), xtitles: all('.g-xtitle'),
            plot: {w: L.xaxis ? L.xaxis._length : 0, h: L.yaxis ? L.yaxis._length : 0},
            meta: L.meta || null, shapes: (L.shapes || []).length,
            tile_px: L.meta && L.meta.tile_side ? L.meta.tile_side * L.xaxis._m : null}; })"""


def overlaps(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] - 1 and b["l"] < a["r"] - 1 and a["t"] < b["b"] - 1 and b["t"] < a["b"] - 1


def heatmap_axes(page: Page, key_title: str) -> dict:
    """Axis type, categories and the drawn tick labels (top to bottom, left to right) of a chart."""
    chart = page.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(".gtitle", has_text=key_title))
    return chart.locator(".js-plotly-plot").first.evaluate(
        """(el) => { const L = el._fullLayout;
            const ticks = (sel, k) => [...el.querySelectorAll(sel)]
              .map(t => [t.getBoundingClientRect()[k], t.textContent]).sort((a, b) => a[0] - b[0]).map(t => t[1]);
            return {xtype: L.xaxis.type, ytype: L.yaxis.type, xcats: L.xaxis._categories, ycats: L.yaxis._categories,
                    yticks: ticks('.ytick text', 'top'), xticks: ticks('.xtick text', 'left')}; }"""
    )


def in_order(shown: list[str], labels: list[str]) -> bool:
    """Every shown tick label is a label, and they appear in the labels' order."""
    idx = [labels.index(s) if s in labels else -1 for s in shown]
    return -1 not in idx and idx == sorted(idx) and len(set(idx)) == len(idx)


def test_numeric_looking_tokens_keep_their_order(page: Page, streamlit_url, shot):
    open_on_prompt(page, streamlit_url, PI, timeout=SLOW)
    expect(page.get_by_text(f"{len(PI)} tokens")).to_be_visible()
    axes = heatmap_axes(page, "attention weights")
    assert axes["xtype"] == axes["ytype"] == "category"
    assert axes["ycats"] == axes["xcats"] == PI_LABELS  # one row per position, in position order
    assert len(axes["yticks"]) >= 4 and in_order(axes["yticks"], PI_LABELS), axes["yticks"]
    assert in_order(axes["xticks"], PI_LABELS), axes["xticks"]
    top = heatmap_axes(page, "Next token after")
    assert top["ytype"] == "category" and [c.split(" ")[0] for c in top["ycats"]] == [f"#{i}" for i in range(1, 11)]
    nav(page, "Q / K / V", timeout=SLOW)
    q = heatmap_axes(page, "q of layer 0")
    assert q["ytype"] == "category" and q["ycats"] == PI_LABELS and in_order(q["yticks"], PI_LABELS)
    nav(page, "Residual stream", timeout=SLOW)
    resid = heatmap_axes(page, "at every position")
    assert resid["xtype"] == "category" and resid["xcats"] == PI_LABELS
    shot(page, "numeric-tokens-residual")


def test_presentation_mode_at_1280x720(page: Page, streamlit_url, shot):
    page.set_viewport_size({"width": 1280, "height": 720})
    open_on_prompt(page, streamlit_url, PI, timeout=SLOW)
    page.get_by_text("Presentation mode").click()
    wait_until_drawn(page, timeout=SLOW)
    # Turning presentation on folds the sidebar away (initial_sidebar_state, applied on change) ...
    expect(page.get_by_test_id("stSidebar")).to_have_attribute("data-collapsed", "true")
    shot(page, "presentation-sidebar-folded")
    # ... and the page must still read with it open: the case of a teacher who opens it again.
    page.get_by_test_id("stExpandSidebarButton").click()
    expect(page.get_by_test_id("stSidebar")).to_have_attribute("data-collapsed", "false")
    titles = page_titles(page)
    record, problems = {}, []
    for title in titles:
        if title in PAGES:
            nav(page, title, timeout=SLOW)
        else:  # another page, perhaps without a chart: screenshot and record once its run is over
            click_page_link(page, title, timeout=SLOW)
            wait_for_app_run(page, timeout=SLOW)
            page.wait_for_timeout(1500)
        no_errors(page)
        page.wait_for_timeout(300)
        name = title.replace(" / ", "").replace(" ", "-").lower()
        shot(page, f"presentation-{name}")
        measured = page.evaluate(MEASURE)
        record[title] = measured
        if title not in PAGES:  # pages of other work: screenshot and record, checked by their own tests
            continue
        for m in measured:
            for t in m["titles"]:  # a title inside its chart: wrapped, not cut
                if t["r"] > m["chart"]["r"] + 1 or t["l"] < m["chart"]["l"] - 1:
                    problems.append(f"{title}: title of {m['title'][:40]!r} runs out of its chart")
            for cb in m["colorbars"]:
                for ax in m["ytitles"] + m["xtitles"]:
                    if overlaps(cb, ax):
                        problems.append(f"{title}: the colour bar of {m['title'][:40]!r} covers an axis title")
            if m["plot"]["w"] and m["plot"]["w"] < 200:
                problems.append(f"{title}: {m['title'][:40]!r} is drawn {m['plot']['w']:.0f} px wide")
    (ARTIFACTS / "presentation.json").write_text(json.dumps(record, indent=1))
    assert not problems, problems
    overview = next(m for m in record["Overview"] if "attention weights" in m["title"])
    assert overview["plot"]["w"] >= 300, overview["plot"]
    grid = next(m for m in record["Attention"] if m["meta"] and "tile_pitch" in m["meta"])
    assert grid["tile_px"] >= 40, grid["tile_px"]  # tiles big enough to click at T = 16
    assert grid["shapes"] == 1  # the head on view is outlined
    # Tables grow with the root font: an HTML table (rem) rather than the canvas grid.
    nav(page, "Overview", timeout=SLOW)
    cell = page.get_by_test_id("stTable").first.locator("td").first
    assert float(cell.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")) >= 17
    expect(charts(page).first).to_be_visible()
