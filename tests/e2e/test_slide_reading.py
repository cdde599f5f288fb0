"""Every slide of the shipped lesson read from the back of the room (issue 38), at 1280 × 720 in
presentation mode, light and dark, in a real Chromium: a caption is at least 22 px and at least 4.5 : 1
against the page (its opacity counted), every figure text at least 4.5 : 1 against its paper, and a real
model's heatmap (each tile of the heads slide too) has rows of at least 12 px (lessons.zoom) with a highlight
frame at least 12 px across, and a features slide's bars are at least 12 px wide."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_slide
from gptviz.lessons import content, shipped_lesson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_dark_mode import contrast  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LESSON = shipped_lesson("how-attention-works")
N = len(LESSON.slides)
CAPTION_PX, RATIO, ROW_PX = 22, 4.5, 12

READ = r"""() => {
  const solid = (e) => { while (e) { const c = getComputedStyle(e).backgroundColor;
    if (c && !c.endsWith(', 0)') && c !== 'transparent') return c; e = e.parentElement; }
    return 'rgb(255, 255, 255)'; };
  const opacity = (e) => { let o = 1;
    while (e) { o *= parseFloat(getComputedStyle(e).opacity); e = e.parentElement; } return o; };
  const caps = [...document.querySelectorAll('.st-key-slide_body [data-testid=stCaptionContainer]')].map(e =>
    ({px: parseFloat(getComputedStyle(e).fontSize), fg: getComputedStyle(e).color, bg: solid(e), op: opacity(e)}));
  const figs = [...document.querySelectorAll('.st-key-slide_figure .js-plotly-plot')].map(p => {
    const paper = getComputedStyle(p.querySelector('.main-svg')).backgroundColor;
    const texts = [...p.querySelectorAll('.main-svg text')]
      .filter(t => t.textContent.trim() && !t.closest('.heatmaplayer'))
      .map(t => [t.textContent.slice(0, 30), getComputedStyle(t).fill]);
    const L = p._fullLayout;  // every heatmap's rows (a tile of the heads slide each), every bar's width
    const rows = (p.data || []).filter(t => t.type === 'heatmap').map(t => {
      const ax = L['yaxis' + (t.yaxis || 'y').slice(1)];
      return ax && ax._categories && ax._categories.length ? ax._length / ax._categories.length : null; })
      .filter(r => r !== null);
    const bars = [...p.querySelectorAll('.bars path')].map(b => b.getBoundingClientRect().width);
    const frames = [...p.querySelectorAll('.shapelayer path')].map(s => { const r = s.getBoundingClientRect();
      return [r.left, r.right, r.top, r.bottom]; });
    const extent = (a, b) => Math.max(...frames.map(f => f[b])) - Math.min(...frames.map(f => f[a]));
    const span = frames.length ? Math.min(extent(0, 1), extent(2, 3)) : null;
    return {paper, texts, row: rows.length ? Math.min(...rows) : null, frame: span,
            bar: bars.length ? Math.min(...bars) : null};
  });
  return {caps, figs};
}"""


def blend(fg: str, bg: str, alpha: float) -> str:
    """The colour a text of colour fg at this opacity shows on bg."""
    f, b = (tuple(float(x) for x in c[c.index("(") + 1 : c.index(")")].split(",")[:3]) for c in (fg, bg))
    return "rgb({}, {}, {})".format(*(alpha * x + (1 - alpha) * y for x, y in zip(f, b)))


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-reading.log") as u:
        yield u


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_slide_reads_from_the_back(browser: Browser, url, shot, scheme):
    page = browser.new_page(viewport={"width": 1280, "height": 720}, color_scheme=scheme)
    page.goto(f"{url}/?lesson=how-attention-works&slide=1&present=1")
    problems, heatmaps, bars = [], 0, 0
    for i, slide in enumerate(LESSON.slides, start=1):
        wait_for_slide(page, i, N, 120_000)
        expect(page.locator(".st-key-slide_figure .main-svg").first).to_be_visible(timeout=120_000)
        page.wait_for_timeout(500)
        m = page.evaluate(READ)
        where = f"{scheme} slide {i}"
        assert m["caps"], f"{where}: no caption"
        for c in m["caps"]:
            seen = contrast(blend(c["fg"], c["bg"], c["op"]), c["bg"])
            if c["px"] < CAPTION_PX - 0.01 or seen < RATIO:
                problems.append(f"{where}: caption {c['px']:.1f} px at {seen:.2f} : 1")
        for f in m["figs"]:
            low = [(t, fill) for t, fill in f["texts"] if contrast(fill, f["paper"]) < RATIO]
            problems += [f"{where}: figure text {t!r} {fill} on {f['paper']}" for t, fill in low[:3]]
            if content.real_model(slide) and f["row"] is not None:
                heatmaps += 1
                if f["row"] < ROW_PX:
                    problems.append(f"{where}: heatmap rows of {f['row']:.1f} px")
                if slide.highlight is not None and (f["frame"] or 0) < ROW_PX:
                    problems.append(f"{where}: a highlight frame {f['frame']} px across")
            if content.real_model(slide) and f["bar"] is not None and slide.page == "features":
                bars += 1  # every bar (the orange one at the slide's position among them) wide enough to tell apart
                if f["bar"] < ROW_PX:
                    problems.append(f"{where}: bars {f['bar']:.1f} px wide")
        shot(page, f"reading_{scheme}_{i}")
        if i < N:
            page.keyboard.press("PageDown")
    page.close()
    assert heatmaps >= 4  # the real-model heatmaps were measured (two attention slides, the heads, the mask leak)
    assert bars == 1  # the features slide's bars
    assert not problems, problems[:12]
