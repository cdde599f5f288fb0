"""Every slide of every shipped lesson on a projector (issue 27), in a real Chromium on the shipped
checkpoints, in presentation mode at 1280 × 720 and 1024 × 768, with a class being taught:

- nothing below the fold: the slide row (Back, Next, the class code), title, note, table, numbers,
  figure, caption and the tools row (slide list, full page, handout) lie inside the window, none
  on another, and the page has nothing to scroll to; a predict slide's prompt and its token table
  read as one block (no gap between them);
- the slide counter ("How attention works · slide 13 of 16") on one line, the lesson's title whole;
- every number a slide is about is at least 24 px at 1280 × 720: the numbers in heatmap cells, the
  table cells, the facts beside them and the class code;
- a highlight frames its cells from outside: no line of its frame lies on the cells it points at,
  and none is clipped away by the plot area;
- the keys: Home / End, `b` and `.` for a black screen, and the slide list, which leaves the clicker's
  keys working once a slide is picked.

Screenshots of every slide: artifacts/e2e/slides_<lesson>_<width>x<height>_<slide>.png."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from gptviz.bench.browser import ARTIFACTS, streamlit_server, wait_for_app_run, wait_for_slide
from gptviz.lessons import shipped_lesson, shipped_lessons

ROOT = Path(__file__).resolve().parents[2]
LESSONS = {name: shipped_lesson(name) for name in shipped_lessons()}
SIZES = [(1280, 720), (1024, 768)]
NUMBER_PX = 24  # projection guidance: nothing a class must read under 24 px
COUNTER_LINES = 1.5  # the counter's height over its line height: one line (two would be 2)
STACK_PX = 16  # at most this between one part of a column and the next (Streamlit's own gap is 0.3rem, 6 px)
SLOW = 120_000  # ms: a slide's first computation on busy shared cores

# What must be on screen: CSS selectors of the slide's parts (a part a slide lacks is skipped).
PARTS = {
    "Back": ".st-key-slide_back button",
    "counter": ".st-key-slide_where p",
    "Next": ".st-key-slide_next button",
    "class code": ".st-key-class_bar strong",
    "End class": ".st-key-end_class button",
    "title": ".st-key-slide_head h3",
    "note": ".st-key-slide_note p",
    "table title": ".st-key-slide_body [data-testid=stColumn]:first-child [data-testid=stMarkdown] strong",
    "table": ".st-key-slide_body [data-testid=stTable]",
    "numbers": ".st-key-slide_facts p",
    "figure": ".st-key-slide_figure .main-svg",
    "caption": ".st-key-slide_body [data-testid=stCaptionContainer]",
    "slide list": ".st-key-slide_list",
    "full page": ".st-key-lesson_tools [data-testid=stPageLink] a",
    "handout": ".st-key-lesson_handout button",
}

MEASURE = r"""(parts) => {
  const box = (e) => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom}; };
  const shown = (sel) => [...document.querySelectorAll(sel)].filter((e) => e.getClientRects().length);
  const px = (sel) => shown(sel).map((e) => parseFloat(getComputedStyle(e).fontSize));
  const main = document.querySelector('[data-testid=stMain]');
  const header = document.querySelector('[data-testid=stHeader]');
  return {
    w: innerWidth, h: innerHeight,
    scroll: [document.documentElement.scrollHeight, main.scrollHeight, main.clientHeight],
    header: !!header && header.getClientRects().length > 0,
    parts: Object.fromEntries(Object.entries(parts).map(([k, s]) => [k, shown(s).map(box)])),
    tools: shown('.st-key-lesson_tools').map(box),
    // the counter found by its text, not by its key: its height in lines, whether its text is cut
    counter: shown('[data-testid=stMain] p').filter((e) => /slide \d+ of \d+$/.test(e.textContent)).map((e) =>
      ({lines: e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight),
        cut: [e, ...e.querySelectorAll('strong')].some((x) => x.scrollWidth > x.clientWidth + 1)})),
    // the predict slide's left column: from the prompt's text box to the token table under it
    stack: (() => { const code = shown('.st-key-slide_body .st-key-poll_prompt [data-testid=stCode]')[0];
                    const table = shown('.st-key-slide_body [data-testid=stColumn] [data-testid=stTable]')[0];
                    return code && table ? table.getBoundingClientRect().top - code.getBoundingClientRect().bottom
                                         : null; })(),
    cut: shown('.st-key-slide_body [data-testid=stTable]').map((e) =>
      e.querySelector('table').getBoundingClientRect().right - e.getBoundingClientRect().right),
    px: {cells: px('.st-key-slide_figure .heatmap-label text'),
         table: px('.st-key-slide_body [data-testid=stTable] :is(td, td p)'),
         numbers: px('.st-key-slide_facts strong'), code: px('.st-key-class_bar strong')},
  };
}"""

# The highlight's frame against its cells, in the figure's pixels: the cells' box from the axes
# (a row highlight is the whole row, a token's is its row and its column), each shape's stroke
# from its drawn path widened by its stroke width, and the plot area that clips shapes.
FRAME = """([kind, at]) => {
  const gd = document.querySelector('.st-key-slide_figure .js-plotly-plot');
  const L = gd._fullLayout, xa = L.xaxis, ya = L.yaxis, T = ya._categories.length;
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const span = (a, lo, hi) => { const p = [a._offset + a.l2p(lo - 0.5), a._offset + a.l2p(hi + 0.5)];
                                return [Math.min(...p), Math.max(...p)]; };
  const i = Math.min(at[0], T - 1);
  const rc = kind === 'cell' ? [[i, i, Math.min(at[1], T - 1), Math.min(at[1], T - 1)]]
           : kind === 'row' ? [[i, i, 0, T - 1]] : [[i, i, 0, T - 1], [0, T - 1, i, i]];
  const cells = rc.map(([r0, r1, c0, c1]) => { const [t, b] = span(ya, r0, r1), [l, r] = span(xa, c0, c1);
                                                return {l, r, t, b}; });
  const strokes = [...gd.querySelectorAll('.shapelayer path')].map((p) => {
    // a line's stroke: as wide as the line across it, ending at its ends (SVG's butt caps)
    const r = p.getBoundingClientRect(), w = parseFloat(getComputedStyle(p).strokeWidth) / 2;
    const across = r.width < r.height ? [w, 0] : [0, w];
    return {l: r.left - svg.left - across[0], r: r.right - svg.left + across[0],
            t: r.top - svg.top - across[1], b: r.bottom - svg.top + across[1]}; });
  const plot = {l: xa._offset, r: xa._offset + xa._length, t: ya._offset, b: ya._offset + ya._length};
  return {T, cells, strokes, plot};
}"""


TOP_AT_CENTRE = "() => [document.elementFromPoint(640, 360)].map(e => [e.id, getComputedStyle(e).backgroundColor])[0]"


def overlaps(a: dict, b: dict, slack: float = 0.5) -> bool:
    return a["l"] < b["r"] - slack and b["l"] < a["r"] - slack and a["t"] < b["b"] - slack and b["t"] < a["b"] - slack


@pytest.fixture(scope="module")
def url():
    with streamlit_server(ROOT / "checkpoints", "shakespeare-char", ARTIFACTS / "streamlit-slides.log") as u:
        yield u


def on_slide(page: Page, i: int, n: int, timeout: int = 60_000) -> None:
    """Wait until slide i (from 1) of n is drawn: its counter, the run over, its figure laid out."""
    wait_for_slide(page, i, n, timeout)
    expect(page.locator(".st-key-slide_figure .main-svg").first).to_be_visible(timeout=timeout)
    page.wait_for_timeout(400)  # Plotly lays the figure out after its SVG appears


def start_teaching(page: Page) -> None:
    page.get_by_role("button", name="Start teaching").click()
    expect(page.locator(".st-key-class_bar strong")).to_be_visible(timeout=30_000)
    wait_for_app_run(page)


def problems_of(m: dict, where: str, sizes_checked: bool) -> list[str]:
    """What of a measured slide is off the screen, on another part, or too small to read."""
    out = []
    w, h = m["w"], m["h"]
    if m["header"]:
        out.append(f"{where}: Streamlit's menu bar is shown")
    if max(m["scroll"][:2]) > h or m["scroll"][1] > m["scroll"][2]:
        out.append(f"{where}: the page scrolls (scroll heights {m['scroll']}, window {h})")
    tools = m["tools"][0] if m["tools"] else None
    for name, boxes in m["parts"].items():
        for b in boxes:
            if b["t"] < -0.5 or b["b"] > h + 0.5 or b["l"] < -0.5 or b["r"] > w + 0.5:
                out.append(f"{where}: the {name} lies outside the {w} × {h} window: {b}")
            if tools and name not in ("slide list", "full page", "handout") and overlaps(b, tools):
                out.append(f"{where}: the {name} runs into the tools row")
    for name in ("title", "figure", "caption", "slide list", "handout", "Back", "Next", "class code"):
        if not m["parts"][name]:
            out.append(f"{where}: no {name} on screen")
    if len(m["counter"]) != 1:
        out.append(f"{where}: {len(m['counter'])} slide counters on screen")
    for c in m["counter"]:
        if c["lines"] > COUNTER_LINES:
            out.append(f"{where}: the slide counter runs onto {c['lines']:.1f} lines")
        if c["cut"]:
            out.append(f"{where}: the slide counter's text is cut short")
    if m["stack"] is not None and m["stack"] > STACK_PX:
        out.append(f"{where}: {m['stack']:.0f} px between the prompt and its token table (a column in two)")
    for cut in m["cut"]:
        if cut > 1:
            out.append(f"{where}: the table is cut {cut:.0f} px on the right")
    if sizes_checked:
        for what, sizes in m["px"].items():
            small = [s for s in sizes if s < NUMBER_PX - 0.01]
            if small:
                out.append(f"{where}: {len(small)} {what} number(s) at {min(small):.1f} px (< {NUMBER_PX})")
    return out


def frame_problems(f: dict, where: str) -> list[str]:
    """A highlight: at least four lines around each framed box, none on the box, none clipped."""
    out = []
    if len(f["strokes"]) < 4 * len(f["cells"]):
        out.append(f"{where}: {len(f['strokes'])} lines frame {len(f['cells'])} box(es)")
    for s in f["strokes"]:
        for c in f["cells"]:
            if overlaps(s, c):
                out.append(f"{where}: a highlight line {s} lies on the cells it points at {c}")
        p = f["plot"]
        if s["l"] < p["l"] - 0.5 or s["r"] > p["r"] + 0.5 or s["t"] < p["t"] - 0.5 or s["b"] > p["b"] + 0.5:
            out.append(f"{where}: a highlight line {s} runs out of the plot area {p} (clipped)")
    return out


@pytest.mark.parametrize("width,height", SIZES)
def test_every_slide_fits_and_reads(page: Page, url, shot, width, height):
    page.set_viewport_size({"width": width, "height": height})
    problems, record = [], {}
    for name, lesson in LESSONS.items():
        n = len(lesson.slides)
        page.goto(f"{url}/?lesson={name}&slide=1&present=1")
        on_slide(page, 1, n, timeout=SLOW)
        start_teaching(page)  # the class code is on every slide of a class
        for i, slide in enumerate(lesson.slides, start=1):
            where = f"{name} slide {i} at {width}x{height}"
            expect(page.get_by_role("heading", name=slide.title)).to_be_visible()
            m = record[where] = page.evaluate(MEASURE, PARTS)
            problems += problems_of(m, where, sizes_checked=(width, height) == (1280, 720))
            if slide.highlight is not None:
                f = record[where]["frame"] = page.evaluate(FRAME, [slide.highlight.kind, list(slide.highlight.at)])
                problems += frame_problems(f, where)
            shot(page, f"slides_{name}_{width}x{height}_{i}")
            if i < n:
                page.keyboard.press("PageDown")
                on_slide(page, i + 1, n, timeout=SLOW)
        page.get_by_role("button", name="End class").click()
        wait_for_app_run(page)
    (ARTIFACTS / f"slides_{width}x{height}.json").write_text(json.dumps(record, indent=1))
    assert not problems, problems[:12]
    # the sizes were read from something: numbers in heatmap cells, tables, facts, the class code
    for what in ("cells", "table", "numbers", "code"):
        assert any(m["px"][what] for m in record.values()), f"no {what} measured"
    assert sum(1 for m in record.values() if "frame" in m) == sum(
        s.highlight is not None for lesson in LESSONS.values() for s in lesson.slides
    )


def test_the_keys_and_the_slide_list(page: Page, url, shot):
    name, lesson = next(iter(LESSONS.items()))
    n = len(lesson.slides)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{url}/?lesson={name}&slide=2&present=1")
    on_slide(page, 2, n, timeout=SLOW)
    page.keyboard.press("End")
    on_slide(page, n, n, timeout=SLOW)
    page.keyboard.press("Home")
    on_slide(page, 1, n)
    # b blacks the screen out: the black sheet lies over everything, and b brings the slide back
    blank = page.locator("#gptviz-blank")
    for on, off in (("b", "b"), (".", "."), ("b", "Escape"), (".", "b")):
        page.keyboard.press(on)
        expect(blank).to_be_visible()
        top = page.evaluate(TOP_AT_CENTRE)
        assert top == ["gptviz-blank", "rgb(0, 0, 0)"], top
        if on == "b":
            shot(page, "slides_blank")
        page.keyboard.press(off)
        expect(blank).to_have_count(0)
    page.keyboard.press("PageDown")  # the clicker still moves the slides after a black screen
    on_slide(page, 2, n)
    # the slide list: a slide by its title; then the clicker's keys move the slides, not the list
    page.locator(".st-key-slide_list").click()
    page.get_by_role("option", name=f"{n - 1}. {lesson.slides[n - 2].title}").click()
    on_slide(page, n - 1, n)
    expect(page.get_by_role("heading", name=lesson.slides[n - 2].title)).to_be_visible()
    page.keyboard.press("PageUp")
    on_slide(page, n - 2, n)
    assert re.search(rf"[?&]slide={n - 2}(&|$)", page.url), page.url
    expect(page.get_by_role("combobox", name="Go to slide")).to_have_value(f"{n - 2}. {lesson.slides[n - 3].title}")
    shot(page, "slides_list")
    # Exit presentation: the menu bar and Streamlit's own font size come back
    page.get_by_role("button", name="Exit presentation").click()
    expect(page.get_by_test_id("stHeader")).to_be_visible(timeout=30_000)
    wait_for_app_run(page)
    assert page.evaluate("getComputedStyle(document.documentElement).fontSize") == "16px"
    assert "present=1" not in page.url


def test_a_followers_slide_fits_too(browser, url, shot):
    name, lesson = next(iter(LESSONS.items()))
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{url}/?lesson={name}&slide=1&present=1")
    on_slide(teacher, 1, len(lesson.slides), timeout=SLOW)
    start_teaching(teacher)
    code = teacher.locator(".st-key-class_bar strong").inner_text().strip()
    student = browser.new_page(viewport={"width": 1024, "height": 768})
    student.goto(f"{url}/?follow={code}&present=1")
    expect(student.get_by_role("heading", name=lesson.slides[0].title)).to_be_visible(timeout=SLOW)
    expect(student.locator(".st-key-follow_figure .main-svg").first).to_be_visible(timeout=SLOW)
    student.wait_for_timeout(400)
    parts = {k: v.replace("slide_", "follow_") for k, v in PARTS.items() if k in ("title", "note", "figure")}
    m = student.evaluate(MEASURE, parts)
    shot(student, "slides_follower_1024x768")
    assert not m["header"] and m["scroll"][1] <= m["scroll"][2], m["scroll"]
    for name_, boxes in m["parts"].items():
        assert boxes and all(b["b"] <= m["h"] + 0.5 for b in boxes), (name_, boxes)
    teacher.get_by_role("button", name="End class").click()
    teacher.close()
    student.close()
