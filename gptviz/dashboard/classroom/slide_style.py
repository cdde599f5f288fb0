"""How a slide looks and answers the keyboard: the CSS of a slide (SLIDE_CSS, and PRESENT_CSS for a
projector: the slide is the whole screen) and the script of a clicker's keys (CLICKER_JS). Used by
slides.py; the selectors name the keys of the elements slides.py draws (slide_*, follow_*,
lesson_tools, class_bar)."""

import html

# The keys a presentation clicker sends (PageDown / PageUp), the arrows and Space press the slide's
# Next and Back buttons, Home and End its first and last; `b` and `.` (a clicker's "blank" key) press
# the hidden Black screen button: the projector and every follower go black, and the same key (or
# Escape, or Next, which only brings the slide back) ends it (blackout.py). Installed once
# per browser tab on the page's own document (st.html runs it outside any iframe); it ignores keys
# typed into a field and keys with a modifier. The slide list is a field until a slide is picked:
# then the clicker's keys move the slides again, not the list.
#
# A freshly opened tab loads st.html's code and the buttons' code (Streamlit loads an element's code
# when the first such element comes) after the page's Markdown is drawn: a press made on seeing the
# slide counter found no listener, or no button, and was lost. So the counter is drawn by st.html too
# (counter_html), after this script, and a press made before its button is drawn is held until the
# button is there (at most HOLD_MS).
CLICKER_JS = """<script>
(() => {
  if (window.__gptvizClicker) return;
  window.__gptvizClicker = true;
  const BUTTONS = {PageDown: "next", ArrowRight: "next", " ": "next", PageUp: "back", ArrowLeft: "back",
                   Home: "first", End: "last"};
  const HOLD_MS = 10000;
  let held = null;  // [button name, when]: a press made before its button was drawn
  const press = (name) => {
    const b = document.querySelector(".st-key-slide_" + name + " button");
    if (b) { held = null; if (!b.disabled) b.click(); return; }
    const first = held === null;
    held = [name, Date.now()];
    if (!first) return;
    const retry = () => {
      if (held === null) return;
      const [n, t] = held;
      if (document.querySelector(".st-key-slide_" + n + " button")) press(n);
      else if (Date.now() - t < HOLD_MS) setTimeout(retry, 50);
      else held = null;
    };
    setTimeout(retry, 50);
  };
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    const t = e.target;
    const list = t && t.closest && t.closest(".st-key-slide_list");
    if (list && t.getAttribute("aria-expanded") !== "true") t.blur();
    else if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)
              || t.getAttribute("role") === "slider")) return;
    if (!document.querySelector(".st-key-slide_bar")) return;  // not on a slide
    if (e.key === "b" || e.key === "." || (e.key === "Escape" && document.getElementById("gptviz-blank"))) {
      e.preventDefault();
      press("blackout");
      return;
    }
    if (!BUTTONS[e.key]) return;
    e.preventDefault();
    e.stopPropagation();
    press(BUTTONS[e.key]);
  }, true);
  document.documentElement.classList.add("gptviz-keys");
})();
</script>"""


def counter_html(title: str, i: int, n: int) -> str:
    """The teacher's slide counter ('**title** · slide i+1 of n'), as st.html draws it: it shows only
    once CLICKER_JS, drawn before it by the same code, has run, so a slide that shows its counter takes
    a clicker's press. The title is escaped: a lesson's text never becomes markup."""
    return f"<p><strong>{html.escape(title)}</strong> · slide {i + 1} of {n}</p>"


# A slide on any screen: less padding above the page, the note and the facts large, the class code
# at least 24 px (1.5rem of Streamlit's 16 px root font), the Home / End buttons out of sight.
SLIDE_CSS = """<style>
[data-testid=stMainBlockContainer] { padding-top: 4rem; padding-bottom: 1rem; }
.st-key-slide_note p, .st-key-follow_note p { font-size: 1.3rem; line-height: 1.3; margin-bottom: 0; }
.st-key-slide_head h3, .st-key-follow_head h3 { padding: 0; }
.st-key-slide_facts p, .st-key-follow_facts p { font-size: 1.15rem; margin-bottom: 0.2rem; }
[data-testid=stTable] th, [data-testid=stTable] td { padding: 0.2rem 0.35rem; font-size: 0.85rem; }
.st-key-class_bar strong { font-size: 1.5rem; letter-spacing: 0.05em; }
.st-key-slide_head [data-testid=stMarkdownContainer], .st-key-follow_head [data-testid=stMarkdownContainer],
.st-key-slide_note [data-testid=stMarkdownContainer], .st-key-follow_note [data-testid=stMarkdownContainer] {
  margin-bottom: 0; }  /* Streamlit's -1rem put the note on the title */
/* the slide row: ◀ Back, the counter, Next ▶, then the class code at the right end; the counter on
   one line, a lesson title too long for it cut short (…), never the slide count */
[data-testid=stLayoutWrapper]:has(> .st-key-slide_where) {
  flex: 0 1 auto; width: auto; min-width: 0; max-width: calc(100% - 10rem); }  /* 10rem: Back and Next */
.st-key-slide_where, .st-key-slide_where [data-testid=stElementContainer] { min-width: 0; }
.st-key-slide_where [data-testid=stHtml] { min-width: 0; margin-bottom: 0; }
.st-key-slide_where p { display: flex; white-space: pre; margin: 0; }
.st-key-slide_where strong { overflow: hidden; text-overflow: ellipsis; }
[data-testid=stLayoutWrapper]:has(> .st-key-slide_share) { margin-left: auto; }
[data-testid=stLayoutWrapper]:has(> .st-key-slide_ends) { display: none; }
[data-testid=stElementContainer]:has(> [data-testid=stHtml] > script:only-child) { display: none; }
</style>"""

# Presentation mode: the slide is the whole screen, with nothing below the fold at 1280 × 720 or
# 1024 × 768. Streamlit's page menu and sidebar go (the slide list and "Exit presentation" stand in
# for them), the page is one screen tall, and the row of input and result takes what the title,
# note and tools rows leave: the figure is stretched to it (its height comes from the screen, not
# from the figure), so a taller screen gets a taller figure. The caption sits under the figure, small.
PRESENT_CSS = """<style>
[data-testid=stHeader], [data-testid=stSidebar], [data-testid=stSidebarCollapsedControl] { display: none; }
[data-testid=stMainBlockContainer] { height: 100vh; max-width: none; padding: 0.5rem 1.5rem 0.6rem; }
[data-testid=stMainBlockContainer] > [data-testid=stVerticalBlock] { height: 100%; gap: 0.45rem; }
/* the slide row is one row; under 1200 px the counter is a little smaller, so that at 1024 × 768 it
   still has room for a short lesson title (the shipped one) */
.st-key-slide_bar { flex-wrap: nowrap; }
@media (max-width: 1200px) { .st-key-slide_where p { font-size: 0.9rem; } }
[data-testid=stLayoutWrapper]:has(> .st-key-slide_body, > .st-key-follow_body) { flex: 1 1 0; min-height: 0; }
.st-key-slide_body, .st-key-follow_body { height: 100%; }
.st-key-slide_body [data-testid=stLayoutWrapper], .st-key-follow_body [data-testid=stLayoutWrapper],
.st-key-slide_body [data-testid=stHorizontalBlock], .st-key-follow_body [data-testid=stHorizontalBlock] {
  height: 100%; min-height: 0; }
.st-key-slide_body [data-testid=stColumn] > [data-testid=stVerticalBlock],
.st-key-follow_body [data-testid=stColumn] > [data-testid=stVerticalBlock] { height: 100%; gap: 0.3rem; }
.st-key-slide_figure, .st-key-follow_figure { flex: 1 1 0; min-height: 0; }
/* a container inside a column (the predict slide's prompt, the facts) is as tall as what it holds:
   the 100% above, meant for the row of columns, stretched it and left a gap under its text */
.st-key-slide_body [data-testid=stColumn] [data-testid=stLayoutWrapper]:not(:has(.st-key-slide_figure)),
.st-key-follow_body [data-testid=stColumn] [data-testid=stLayoutWrapper]:not(:has(.st-key-follow_figure)) {
  height: auto; flex: 0 0 auto; }
.st-key-slide_head h3, .st-key-follow_head h3 { font-size: 1.6rem; line-height: 1.2; }
.st-key-slide_note p, .st-key-follow_note p { font-size: 1.2rem; line-height: 1.25; }
/* every number a slide is about at least 24 px: 1.15rem of the presentation root font (21 px) */
[data-testid=stTable] th, [data-testid=stTable] td { padding: 0.1rem 0.35rem; font-size: 1.15rem; }
[data-testid=stTable] thead th { font-size: 1rem; line-height: 1.2; }
[data-testid=stCaptionContainer] { margin-bottom: 0; }
[data-testid=stCaptionContainer] p { line-height: 1.25; margin-bottom: 0; }
/* a slide's caption carries its formula: read from the back of the room (22 px or more, in the text's
   own colour: Streamlit fades a caption to 60 % opacity, 3.9 : 1 on white) */
:is(.st-key-slide_body, .st-key-follow_body) [data-testid=stCaptionContainer] {
  font-size: max(22px, 1.05rem); opacity: 1; }
.st-key-lesson_tools { gap: 0.45rem; }
.st-key-lesson_tools p, .st-key-lesson_tools [data-baseweb=select] { font-size: 0.8rem; }
.st-key-lesson_tools button, .st-key-lesson_tools [data-baseweb=select] > div { min-height: 1.8rem; padding: 0 0.6rem; }
</style>"""
