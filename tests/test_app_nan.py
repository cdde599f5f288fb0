"""A checkpoint whose logits are NaN, on every page that shows probabilities or loss (AppTest):
no ranking of ids 0, 1, 2, ... drawn as a result, no "nan" printed as a number, NaN losses red.
And one unit of loss (nats) on every page that shows a loss.

The fixture checkpoint, saved to disk as a user's would be, has one NaN weight in an MLP: every
position's logits are NaN. (A NaN embedding row of one token makes every position NaN as well, not
only the later ones: a masked key's weight is 0, and 0 × NaN is NaN in the weighted sum of values.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import APP, app_session, array, figure, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz import analysis, figures
from gptviz.bench.checkpoints import CHARS, CONFIG, NAME, make_overtime_checkpoints
from gptviz.figures.style import NAN
from gptviz.figures.whatif import loss_before_after

PROMPT = "To be, or not to be: that is the question."
ALL_PAGES = sorted(str(p.relative_to(Path(APP).parent)) for p in (Path(APP).parent / "views").glob("[a-z]*.py"))
NUMBER_NAN = re.compile(r"\bnan\b")  # how Python prints a NaN float: "mean nan bits"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = make_overtime_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    tok = gptviz.CharTokenizer(CHARS)
    torch.manual_seed(11)
    everywhere = gptviz.GPT(gptviz.GPTConfig(**CONFIG))
    with torch.no_grad():
        everywhere.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    gptviz.save(everywhere, root / "broken-mlp", tok)
    return root


def open_app(root: Path, monkeypatch, name: str, page: str = "views/overview.py", **query) -> AppTest:
    serve(monkeypatch, root, name)
    at = app_session(page, checkpoint=name, prompt=PROMPT, **query)
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts_of(fig: dict) -> list[str]:
    """Every text a figure shows: title, subtitle, axis titles, legend names, annotations, colour bars."""
    lay = fig["layout"]
    out = [lay.get("title", {}).get("text", ""), lay.get("title", {}).get("subtitle", {}).get("text", "")]
    out += [v.get("title", {}).get("text", "") for k, v in lay.items() if k.startswith(("xaxis", "yaxis"))]
    out += [a.get("text", "") for a in lay.get("annotations", [])]
    for tr in fig["data"]:
        out += [tr.get("name") or ""]
        bar = tr.get("colorbar") or tr.get("marker", {}).get("colorbar") or {}
        out += [bar.get("title", {}).get("text", "")]
    return out


def test_the_mechanism_in_the_library():
    logits = np.array([[1.0, 2.0, 0.5], [np.nan, 1.0, 2.0], [0.0, np.inf, 1.0], [0.0, -np.inf, 1.0]])
    assert analysis.nan_logits(logits).tolist() == [False, True, True, False]
    assert bool(analysis.nan_logits(torch.tensor(logits[1]))) and not analysis.nan_logits(logits[0])
    top = analysis.top_k(logits[1], 3)
    assert len(top) == 0 and top.attrs["nan"] and list(top.columns) == ["rank", "id", "token", "probability", "logit"]
    assert analysis.top_k(logits[0], 2)["id"].tolist() == [1, 0]
    with pytest.raises(ValueError, match="NaN"):
        analysis.token_rank(logits[1], 0)
    fig = figures.topk_bars(top, position_label="3 x")
    assert not fig.data and "NaN" in fig.layout.title.text and "NaN" in fig.layout.annotations[0].text
    assert figures.number(float("nan")) == "NaN" and figures.number(2.0, ".1f") == "2.0"
    assert figures.mean_loss([1.0, np.nan, 3.0]) == "mean 2.000 nats over 2 tokens, 1 NaN"
    assert figures.mean_loss([np.nan]) == "every loss NaN" and figures.mean_loss([1.0]) == "mean 1.000 nats"


def test_next_token_says_the_logits_are_nan_instead_of_ranking_ids(root, monkeypatch):
    at = open_app(root, monkeypatch, "broken-mlp", "views/next_token.py")
    top = figure(at, "topk_bars")
    assert not any(tr.get("y") for tr in top["data"]), "bars drawn from NaN logits"
    assert "NaN" in top["layout"]["title"]["text"]
    at.text_input(key="lookup_token").input("e").run()
    assert any("logits after" in e.value and "are NaN" in e.value for e in at.error)
    assert not at.metric  # no "Rank 1 of 95"
    loss = figure(at, "loss_bars")
    title = loss["layout"]["title"]["text"]
    assert "every loss NaN" in title and not NUMBER_NAN.search(title), title
    marks = next(tr for tr in loss["data"] if tr["type"] == "scatter")
    assert marks["marker"]["color"] == NAN and len(marks["x"]) == len(PROMPT) - 1
    assert loss["data"][0]["marker"]["showscale"] is False  # no colour scale for colours nothing has
    chips = next(m.value for m in at.markdown if "position 1," in m.value)
    assert chips.count(f"background:{NAN}") == len(PROMPT) - 1  # every predicted token red
    assert chips.count("background:#f4f4f4") == 1  # the first token: nothing predicts it, grey


def test_loss_figures_mark_only_the_nan_positions():
    """Per-token loss with a NaN in the middle (a model whose logits are NaN at some positions only):
    the finite bars keep their values, each NaN gets a red mark, the mean says what it is over."""
    logits = torch.randn(6, 5, dtype=torch.float64)
    logits[3, 2] = float("nan")
    ids = [0, 1, 2, 3, 4, 0]
    loss = analysis.per_token_loss(logits, ids)  # row t scores ids[t + 1] at position t
    nats = loss["loss_nats"].to_numpy()
    assert np.isnan(nats[3]) and np.isfinite(np.delete(nats, 3)).all()
    labels = [f"{i} t{i}" for i in range(6)]
    fig = figures.loss_bars(loss, labels)
    np.testing.assert_array_equal(fig.data[0].y, nats)
    marks = fig.data[1]
    assert list(marks.x) == ["4 t4"] and marks.marker.color == NAN and list(marks.text) == ["NaN"]
    assert f"mean {np.nanmean(nats):.3f} nats over 4 tokens, 1 NaN" in fig.layout.title.text
    both = loss_before_after(loss, loss.assign(loss_nats=nats + 1.0), labels)
    assert "before (mean" in both.layout.title.subtitle.text and not both.layout.showlegend
    assert [tr.x for tr in both.data if tr.type == "scatter"] == [("4 t4",)]
    chips = figures.token_chips_html(["a", "b", "c"], [0, 1, 2], [None, 0.5, float("nan")], vmax=1.0, unit="nats")
    assert chips.count("background:#f4f4f4") == 1 and chips.count(f"background:{NAN}") == 1
    assert "0.500 nats" in chips and "NaN (the model computed NaN here)" in chips


@pytest.mark.parametrize("page", ALL_PAGES)
def test_no_page_prints_nan_as_a_number_or_ranks_nan_logits(root, monkeypatch, page):
    at = open_app(root, monkeypatch, "broken-mlp", page)
    assert not [e for e in at.error if "Internal error" in e.value], [e.value for e in at.error]
    for el in at.get("plotly_chart"):
        fig = json.loads(el.proto.spec)
        for text in texts_of(fig):
            assert not NUMBER_NAN.search(text or ""), (page, text)
        for tr in fig["data"]:  # a top-k chart ranks "#1 …" only from a real distribution
            names = tr.get("y") if tr.get("orientation") == "h" else None
            if isinstance(names, list) and names and str(names[0]).startswith("#1 "):
                assert np.isfinite(array(tr["x"]).astype(float)).all(), (page, names)
    for m in at.metric:
        assert not NUMBER_NAN.search(str(m.value)), (page, m.label, m.value)
    for md in [*at.markdown, *at.caption, *at.info]:
        assert not NUMBER_NAN.search(re.sub(r"<[^>]+>", "", md.value)), (page, md.value[:200])


@pytest.mark.parametrize(
    "page, setup",
    [
        ("views/next_token.py", {}),
        ("views/interventions.py", {"iv_heads": ["L1H2"]}),
        ("views/mask_leak.py", {}),
        ("views/compare.py", {}),
    ],
)
def test_one_unit_of_loss_on_every_page(root, monkeypatch, page, setup):
    """Loss in nats everywhere (the unit of the training loss people know), never bits beside it."""
    at = open_app(root, monkeypatch, NAME, page)
    for key, value in setup.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception
    texts = [t for el in at.get("plotly_chart") for t in texts_of(json.loads(el.proto.spec))]
    texts += [m.label for m in at.metric] + [c.value for c in [*at.caption, *at.markdown]]
    assert any("nats" in t for t in texts), page
    assert not [t for t in texts if re.search(r"\bbits\b|log₂", t)], page


def test_generate_refuses_nan_logits_in_one_line(root, monkeypatch):
    at = open_app(root, monkeypatch, "broken-mlp", "views/generate.py")
    assert any("are NaN" in e.value for e in at.error)
    assert not [b for b in at.button if b.key in ("gen_step", "gen_run")]  # nothing to press that would lie


def test_the_logit_lens_says_nan_instead_of_a_top_token(root, monkeypatch):
    at = open_app(root, monkeypatch, "broken-mlp", "views/logit_lens.py")
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    grid = next(f for f in figs if f["layout"]["title"]["text"].startswith("Logit lens"))
    red = [tr for tr in grid["data"] if tr.get("name") == "NaN"]
    assert red and set(np.asarray(red[0]["text"]).ravel()) >= {"NaN"}  # NaN cells say so, in red
    depth = [f for f in figs if f is not grid and any(tr.get("name") == "rank" for tr in f["data"])]
    assert depth
    for f in depth:  # the last site's logits are the model's own, NaN: no rank drawn there
        rank = next(tr for tr in f["data"] if tr.get("name") == "rank")
        assert np.isnan(array(rank["y"]).astype(float)[-1])
