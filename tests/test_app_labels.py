"""A token's label reads as a person reads it on every page: `0 <` in a select box, a sentence or a
file, and Plotly text (`0 &lt;`) only inside a figure, where Plotly turns it back into `<`. The
Patching page showed `0 &lt;|begin_of_text|&gt;` (escaped twice) for the BOS of every Llama prompt."""

from __future__ import annotations

import json

from apptest_helpers import app_session, figure, ok, serve

from gptviz import figures
from gptviz.bench.checkpoints import NAME

PROMPT = "<b>&x"


def test_labels_for_people_and_for_plotly():
    assert figures.position_labels(["<|begin_of_text|>", "a"]) == ["0 <|begin_of_text|>", "1 a"]
    assert figures.token_labels(["<|begin_of_text|>"]) == ["0 &lt;|begin_of_text|&gt;"]


def test_patching_page_names_tokens_as_they_read(monkeypatch, ckpt_root):
    serve(monkeypatch, ckpt_root, NAME)
    at = ok(app_session("views/patching.py", timeout=120))
    at.text_input(key="pt_clean").input(PROMPT)
    ok(at.run())
    box = at.selectbox(key="pt_pos")
    assert box.options[:3] == ["0 <", "1 b", "2 >"]  # format_func's text, shown as it is
    assert box.options[3] == "3 &"


def test_logit_lens_labels_escaped_once(monkeypatch, ckpt_root):
    serve(monkeypatch, ckpt_root, NAME)
    at = ok(app_session("views/logit_lens.py", timeout=120, prompt=PROMPT, position="0"))
    spec = json.dumps(figure(at, "lens_grid"))
    assert "0 &lt;" in spec and "&amp;lt;" not in spec and "&amp;amp;" not in spec  # Plotly text, escaped once
    subheads = [s.value for s in at.subheader if "through depth" in s.value]
    assert subheads and all("&lt;" not in s for s in subheads), subheads
