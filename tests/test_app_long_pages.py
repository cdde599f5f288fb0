"""Every page on a prompt of 8,192 tokens (a context of 131,072 makes that ordinary): it opens without an
error, and what it sends stays what a browser draws at once: no figure over MAX_FIGURE_BYTES of JSON, no
table over window.LONG rows, no block of text over MAX_TEXT_BYTES. A page that draws per position shows
a window of them and says which ("Positions 7,680–8,191 of 8,192 shown."); the numbers in the window are
the whole run's. A random model of 2 layers, one head, C = 8 and a character vocabulary, so that T is the
prompt's length and the T² work of the maps stays small on two cores.

Overview, Attention and Compare cost what they draw: no whole [H, T, T] map of a run is built on them (the
maps are block means made a band of query rows at a time; a whole map to download is made when asked)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve

import gptviz
from gptviz import rebuild
from gptviz.analysis.attention import attention_mask
from gptviz.analysis.blocks import block_mean
from gptviz.attention import AttentionSpec
from gptviz.dashboard import pages, window

T = 8192
CHARS = list("abcdefgh ,.:\n")
NAME = "long-char"
MAX_FIGURE_BYTES = 1 * 2**20  # the layer × head grid of 144 heads at T = 1,024 is ~0.4 MB
MAX_TEXT_BYTES = 512 * 2**10  # the loss chips of SHOW tokens are ~0.1 MB
SHOWN = f"Positions {T - window.SHOW:,}–{T - 1:,} of {T:,} shown."
COMPARE = "views/compare.py"

pytestmark = pytest.mark.slow  # T² attention work on every page: a minute or two on two cores


def prompt(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh ,.") for _ in range(n))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    model = gptviz.GPT(
        gptviz.GPTConfig(n_layer=2, n_head=1, n_embd=8, vocab_size=len(CHARS), block_size=T + 64, bias=True)
    )
    gptviz.save(model, folder / NAME, gptviz.CharTokenizer(CHARS))
    return folder


@pytest.fixture
def maps(monkeypatch) -> list[tuple[str, int]]:
    """Every whole [H, T, T] weights map and [T, T] mask a run rebuilds, with its T: rebuild._weights and
    rebuild._mask counted, not replaced (a run binds them when it is traced, so this comes before the session)."""
    built: list[tuple[str, int]] = []
    weights, mask, scores = rebuild._weights, rebuild._mask, AttentionSpec.scores
    monkeypatch.setattr(rebuild, "_weights", lambda spec, q, k, T: built.append(("map", T)) or weights(spec, q, k, T))
    monkeypatch.setattr(rebuild, "_mask", lambda spec, T, device: built.append(("mask", T)) or mask(spec, T, device))

    def counted_scores(spec, q, k):  # a band's rows are fewer than the prompt's: T of them is a whole map
        if q.size(-2) == T:
            built.append(("scores", T))
        return scores(spec, q, k)

    monkeypatch.setattr(AttentionSpec, "scores", counted_scores)
    return built


@pytest.fixture
def long_app(root, monkeypatch, maps):
    serve(monkeypatch, root, NAME)
    return ok(app_session(timeout=900, prompt=prompt(T)))  # a loaded two-core machine: minutes for a page


def sent(at) -> dict[str, int]:
    """What the page sends, at its largest: figure JSON bytes, table rows, markdown bytes."""
    figs = [len(e.proto.spec) for e in at.get("plotly_chart")]
    rows = [len(t.value) for t in at.dataframe] + [len(t.value) for t in at.table]
    text = [len(m.value.encode()) for m in at.markdown]
    return {"figure": max(figs, default=0), "rows": max(rows, default=0), "text": max(text, default=0)}


def bounded(at, page: str) -> dict[str, int]:
    got = sent(at)
    assert got["figure"] <= MAX_FIGURE_BYTES, (page, got)
    assert got["rows"] <= window.LONG, (page, got)
    assert got["text"] <= MAX_TEXT_BYTES, (page, got)
    return got


def captions(at) -> list[str]:
    return [c.value for c in at.caption]


def test_every_page_opens_on_8192_tokens_and_sends_a_bounded_page(long_app, root):
    at = long_app
    assert at.session_state["position"] == T - 1
    for p in pages.PAGES:
        started = time.perf_counter()
        got = bounded(ok(at.switch_page(p.file).run()), p.key)
        print(f"{p.key}: {time.perf_counter() - started:.1f} s, sends at most {got}")  # a record, with -s
    # the pages that draw per position: a window of the last SHOW, said, of the whole run's numbers
    ok(at.switch_page("views/qkv.py").run())
    assert SHOWN in captions(at)
    assert len(array(figure(at, "qkv_scores")["data"][0]["y"])) == window.SHOW  # a bar per key of the window
    ok(at.switch_page("views/next_token.py").run())
    assert SHOWN in captions(at)
    bundle = gptviz.load(root / NAME)
    ids = bundle.tokenizer.encode(prompt(T))
    whole = gptviz.analysis.per_token_loss(gptviz.trace(bundle.model, ids).tensor("logits"), ids)
    drawn = array(figure(at, "loss_bars")["data"][0]["y"])
    np.testing.assert_allclose(drawn, whole["loss_nats"].to_numpy()[-window.SHOW :], rtol=1e-5)


def test_the_window_moves_and_is_held_to_at_most_long(long_app):
    at = ok(long_app.switch_page("views/next_token.py").run())
    at.slider(key="window_loss").set_value((100, 5000)).run()  # wider than LONG: its end is kept
    ok(at)
    lo, hi = 5000 - window.LONG + 1, 5000
    assert any(c.startswith(f"Positions {lo:,}–{hi:,} of {T:,} shown.") for c in captions(at))
    assert len(array(figure(at, "loss_bars")["data"][0]["y"])) == window.LONG
    bounded(at, "next-token")


def test_the_what_if_pages_act_on_8192_tokens_and_send_a_bounded_page(long_app):
    at = long_app
    ok(at.switch_page("views/patching.py").run())
    clean = prompt(T)
    at.text_input(key="pt_corrupt").input(clean[:-1] + ("a" if clean[-1] != "a" else "b")).run()  # the last token
    at.text_input(key="pt_answer").input("a")
    at.text_input(key="pt_wrong").input("b")
    bounded(ok(at.run()), "patching")
    sweep = figure(at, "pt_map_resid_pre")["data"][0]
    x = array(sweep["x"])  # the window's columns, at their own positions (a click opens the right cell)
    assert len(x) == 32 and x[0] == T - 32 and x[-1] == T - 1
    ok(at.switch_page("views/interventions.py").run())
    at.multiselect(key="iv_heads").select("L0H0").run()
    bounded(ok(at), "interventions")
    assert len(figure(at, "iv_loss")["data"][0]["x"]) == window.SHOW
    ok(at.switch_page("views/generate.py").run())
    at.button(key="gen_step").click().run()
    bounded(ok(at), "generate")
    assert len(array(figure(at, "gen_step_attention")["data"][0]["y"])) == window.SHOW


def test_overview_and_attention_build_no_whole_map(long_app, maps):
    at = long_app  # on the Overview
    ok(at.run())  # a plain rerun: the heatmap's download is made only when pressed
    ok(at.switch_page("views/attention.py").run())
    assert not maps, maps
    assert "each cell is the mean of a" in figure(at, "attn_heatmap")["layout"]["title"]["text"]
    for kind in ("masked scores", "scores"):  # a Trace's scores would be the layer's every [T, T] map
        ok(at.button_group(key="attn_kind").set_value(kind).run())
        assert not maps, (kind, maps)
        assert "each cell is the mean of a" in figure(at, "attn_heatmap")["layout"]["title"]["text"]


def test_compare_draws_its_window_and_its_difference_in_blocks_from_no_whole_map(long_app, root, maps):
    at = ok(long_app.switch_page(COMPARE).run())
    at.text_input(key="cmp_prompt_b").input(prompt(T, seed=1)).run()
    got = bounded(ok(at), "compare")
    assert SHOWN in captions(at)
    assert got["rows"] == window.SHOW
    assert not maps, maps  # neither run's [T, T] maps nor masks: block means made a band of rows at a time
    diff = figure(at, "cmp_att_diff")
    b = T // 256
    assert f"each cell is the mean of a {b}×{b} block" in diff["layout"]["title"]["text"]
    # the numbers are the whole maps': the last rows' blocks of A − B, from each run's whole map
    layer, head = at.session_state["layer"], at.session_state["head"]
    bundle = gptviz.load(root / NAME)
    last = []
    for text in (prompt(T), prompt(T, seed=1)):
        t = gptviz.trace(bundle.model, bundle.tokenizer.encode(text))
        last.append(t.tensor(f"blocks.{layer}.attn.weights")[head, -256:].double().numpy())  # a whole map, cut
    allowed = attention_mask(t, layer)[-256:]
    want = block_mean(np.where(allowed, last[0] - last[1], np.nan), 256)[0]  # [8, 256]: the last 8 block rows
    np.testing.assert_allclose(array(diff["data"][0]["z"])[-8:], want, atol=1e-6, equal_nan=True)
