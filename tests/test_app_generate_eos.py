"""The Generate page stops at the model's end-of-text token, as the library does, and says so."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from apptest_helpers import app_session, ok, serve

import gptviz
from gptviz.bench.checkpoints import CHARS, CONFIG

PROMPT = "To be, or"


@pytest.fixture(scope="module")
def eos_root(tmp_path_factory):
    """A tiny-char model whose end-of-text token is a token its greedy decoding makes (the last one it
    makes for the first time: fewer than the 8 asked for come out)."""
    torch.manual_seed(1234)
    model = gptviz.GPT(gptviz.GPTConfig(**CONFIG)).eval()
    tok = gptviz.CharTokenizer(CHARS)
    ids = gptviz.encode_prompt(tok, PROMPT, CONFIG["block_size"])
    free = gptviz.generate(model, ids, 8, temperature=0).new_ids
    eos = [t for i, t in enumerate(free) if t not in free[:i]][-1]
    model.config = replace(model.config, eos_token_id=(eos,))
    root = tmp_path_factory.mktemp("checkpoints")
    gptviz.save(model, root / "eos-char", tok, card={"note": "random weights, an end-of-text token"})
    return root, eos, free


def test_generate_page_stops_at_eos_and_says_so(eos_root, monkeypatch):
    root, eos, free = eos_root
    bundle = gptviz.load(root / "eos-char")
    assert bundle.model.config.eos_token_id == (eos,)  # kept through save and load
    serve(monkeypatch, root, "eos-char")
    at = ok(app_session("views/generate.py", prompt=PROMPT))
    at.slider(key="gen_temperature").set_value(0.0)
    at.number_input(key="gen_n").set_value(8)
    ok(at.button(key="gen_run").click().run())
    said = [i.value for i in at.info if "end-of-text" in i.value]
    assert said and f"(id {eos})" in said[0] and f"after {free.index(eos) + 1} token(s)" in said[0]
