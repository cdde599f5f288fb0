"""Figure builders and analyses without Streamlit: the numbers drawn are the numbers computed,
axes are named, masked cells are not zeros, and big inputs stay small."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
import torch.nn.functional as F

import gptviz
from gptviz import analysis, figures
from gptviz.analysis.attention import attention_mask
from gptviz.figures import compare
from gptviz.figures.attention import mark_tile
from gptviz.figures.style import MASKED, NAN, PRESENTATION_WRAP, percent, wrap
from gptviz.lessons import content


@pytest.fixture(scope="module")
def trace() -> gptviz.Trace:
    torch.manual_seed(0)
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
    return gptviz.trace(model, [1, 4, 2, 9, 4, 4, 0, 7, 3, 10])


@pytest.fixture(scope="module")
def labels(trace) -> list[str]:
    return figures.token_labels(trace.tokens)


def axis_titles(fig: go.Figure) -> list[str]:
    layout = fig.to_plotly_json()["layout"]
    return [
        v["title"]["text"]
        for k, v in layout.items()
        if k.startswith(("xaxis", "yaxis")) and v.get("visible", True) is not False and "title" in v
    ]


def test_figures_do_not_import_streamlit():
    code = "import gptviz, gptviz.figures, gptviz.analysis, sys; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- next token --------------------------------------------------------------------------------
def test_top_k_is_softmax_top_k(trace):
    logits = trace["logits"][-1]
    for temperature in (1.0, 0.5, 2.0):
        top = analysis.top_k(logits, 5, temperature)
        ref = torch.topk(torch.softmax(torch.tensor(logits, dtype=torch.float64) / temperature, -1), 5)
        np.testing.assert_allclose(top["probability"], ref.values.numpy(), rtol=1e-12)
        assert top["id"].tolist() == ref.indices.tolist()
    fig = figures.topk_bars(top, position_label="9 x", temperature=2.0)
    np.testing.assert_array_equal(fig.data[0].x, top["probability"].to_numpy())
    assert "temperature 2" in fig.layout.title.text
    assert all(axis_titles(fig))


def test_a_thin_distribution_never_reads_zero_percent():
    """A 128k vocabulary over random weights: every top probability is ~1e-5. The bars and their axis
    must still give numbers, not a column of 0.0% (seen on a 1B-shaped model)."""
    logits = np.linspace(0.0, 0.5, 128_256, dtype=np.float32)
    top = analysis.top_k(logits, 3)
    hi = float(top["probability"].max())
    fig = figures.topk_bars(top, position_label="9 x")
    assert fig.data[0].text[0].startswith(f"{100 * hi:.2g}%") and "0.0%" not in fig.data[0].text[0]
    assert fig.layout.xaxis.tickformat == ".5~%"  # enough for its ticks of 0.0002%; ~ trims the zeros left
    assert [percent(p) for p in (0.5, 0.0123, 0.00099, 7.8e-6, 0.0)] == ["50.0%", "1.2%", "0.099%", "0.00078%", "0.0%"]


def test_top_k_breaks_ties_by_id():
    top = analysis.top_k(np.zeros(6, dtype=np.float32), 3)
    assert top["id"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(top["probability"], 1 / 6)


def test_token_rank():
    logits = np.array([0.0, 3.0, 1.0, 3.0])
    assert analysis.token_rank(logits, 1) == (1, pytest.approx(math.exp(3) / (2 * math.exp(3) + math.e + 1)))
    assert analysis.token_rank(logits, 0)[0] == 4


def test_per_token_loss_is_cross_entropy(trace):
    loss = analysis.per_token_loss(trace["logits"], trace.token_ids)
    ref = F.cross_entropy(
        torch.tensor(trace["logits"][:-1], dtype=torch.float64), torch.tensor(trace.token_ids[1:]), reduction="none"
    )
    np.testing.assert_allclose(loss["loss_nats"], ref.numpy(), rtol=1e-10)
    np.testing.assert_allclose(loss["loss_bits"], ref.numpy() / math.log(2), rtol=1e-10)
    assert loss["position"].tolist() == list(range(1, trace.n_tokens))
    fig = figures.loss_bars(loss, figures.token_labels(trace.tokens))
    np.testing.assert_array_equal(fig.data[0].y, loss["loss_nats"].to_numpy())  # the one unit on every page
    assert fig.layout.yaxis.title.text == "loss −ln p (nats)" and "nats)" in fig.layout.title.text


def test_per_token_loss_in_blocks_of_rows_is_the_same_loss(trace, monkeypatch):
    """A long prompt's losses are made a block of positions at a time (no float64 copy of all T × V
    logits): blocks of 1 and 3 rows, which do not divide T, give the losses of one block, bit for bit."""
    from gptviz.analysis import next_token

    whole = analysis.per_token_loss(trace.tensor("logits"), trace.token_ids)["loss_nats"].to_numpy()
    V = trace["logits"].shape[1]
    for rows in (1, 3):
        monkeypatch.setattr(next_token, "LOSS_BLOCK_CELLS", rows * V)
        got = analysis.per_token_loss(trace.tensor("logits"), trace.token_ids)["loss_nats"].to_numpy()
        np.testing.assert_array_equal(got, whole)


def test_per_token_loss_from_the_trace_tensor_and_one_position_of_logits(trace):
    # The dashboard passes the tensor where the model left it, and takes one position's row.
    from_tensor = analysis.per_token_loss(trace.tensor("logits"), trace.token_ids)
    from_array = analysis.per_token_loss(trace["logits"], trace.token_ids)
    np.testing.assert_array_equal(from_tensor["loss_nats"], from_array["loss_nats"])
    np.testing.assert_array_equal(trace.part("logits", 2), trace["logits"][2])
    assert trace.part("logits", -1).shape == (trace["logits"].shape[1],)


def test_softmax_rejects_a_bad_temperature():
    with pytest.raises(ValueError, match="temperature"):
        analysis.softmax(np.zeros(3), 0.0)


# --- attention ---------------------------------------------------------------------------------
def test_heatmap_shows_masked_cells_as_gaps_not_zeros(trace, labels):
    m = analysis.attention_matrix(trace, 1, 0)
    fig = figures.attention_heatmap(m, labels)
    z = np.asarray(fig.data[0].z)
    w = trace["blocks.1.attn.weights"][0]
    assert np.isnan(z[np.triu_indices(len(z), 1)]).all()
    np.testing.assert_array_equal(z[np.tril_indices(len(z))], w[np.tril_indices(len(z))])
    assert fig.data[0].hoverongaps is False
    assert "masked" in fig.layout.title.subtitle.text
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0.0, pytest.approx(np.nanmax(z)))
    assert all(axis_titles(fig)) and len(set(fig.data[0].x)) == len(labels)


def test_scores_are_unmasked_and_on_a_diverging_scale(trace, labels):
    m = analysis.attention_matrix(trace, 0, 1, "scores")
    np.testing.assert_array_equal(m, trace["blocks.0.attn.scores"][1])
    fig = figures.attention_heatmap(m, labels, kind="scores")
    assert not np.isnan(np.asarray(fig.data[0].z)).any()
    assert "score" in fig.data[0].colorbar.title.text
    masked = analysis.attention_matrix(trace, 0, 1, "masked scores")
    assert np.isnan(masked[0, 1]) and masked[1, 0] == m[1, 0]
    with pytest.raises(ValueError):
        analysis.attention_matrix(trace, 0, 1, "probabilities")


def test_leaving_key_0_out_of_the_scale_says_so(labels):
    m = np.tril(np.full((10, 10), 0.01, dtype=np.float32))
    m[:, 0] = 0.9
    m[np.triu_indices(10, 1)] = np.nan
    fig = figures.attention_heatmap(m, labels, skip_first_key=True)
    assert fig.data[0].zmax == pytest.approx(0.01)
    assert "key 0 left out" in fig.layout.title.subtitle.text


def test_a_long_prompt_is_averaged_into_blocks_and_says_so():
    T = 1024
    w = np.tril(np.ones((T, T), dtype=np.float32))
    w /= w.sum(1, keepdims=True)
    w[np.triu_indices(T, 1)] = np.nan
    fig = figures.attention_heatmap(w, [str(i) for i in range(T)])
    z = np.asarray(fig.data[0].z)
    assert z.shape == (256, 256) and "4×4 block" in fig.layout.title.text
    assert len(fig.to_json()) < 600_000  # small enough to draw at once
    grid = figures.layer_head_grid(np.broadcast_to(w, (12, T, T)) for _ in range(12))
    assert len(grid.to_json()) < 2_000_000


def test_block_reduce_averages_what_is_there():
    m = np.array([[1.0, np.nan, np.nan], [2.0, 4.0, np.nan], [1.0, 1.0, 1.0]], dtype=np.float32)
    out, b = analysis.block_reduce(m, 2)
    assert b == 2
    np.testing.assert_allclose(out, [[7 / 3, np.nan], [1.0, 1.0]])
    same, b = analysis.block_reduce(m, 3)
    assert b == 1 and same is m


@pytest.mark.parametrize("H", [4, 12, 32])
def test_a_layers_heads_take_the_figures_height_at_any_head_count(H):
    """Each row of tiles gets most of its share of the figure: a fixed gap between rows (a share of the
    whole figure) left a 32-head layer's tiles 2 % of the height each, dots in white space."""
    T = 6
    w = np.tril(np.full((H, T, T), 1.0 / T))
    fig = figures.head_grid(w, [f"t{i}" for i in range(T)], layer=0)
    rows = -(-H // 4)
    heights = [fig.layout["yaxis" + ("" if h == 0 else str(h + 1))].domain for h in range(0, H, 4)]
    assert len(heights) == rows
    assert all((top - bottom) >= 0.7 / rows for bottom, top in heights), heights


def test_head_grid_and_line_view(trace, labels):
    w = analysis.layer_weights(trace, 0)
    np.testing.assert_array_equal(w[1], analysis.attention_matrix(trace, 0, 1))
    fig = figures.head_grid(w, labels, layer=0)
    assert len(fig.data) == w.shape[0]
    np.testing.assert_array_equal(fig.data[1].z, w[1])
    assert np.isnan(fig.data[1].z[0, 1])
    lines = figures.attention_lines(w[1, 6], labels, 6, top=4)  # NaN (masked) keys are never drawn
    drawn = [t for t in lines.data if t.mode == "lines"]
    assert len(drawn) == 4  # the heaviest four keys of seven
    widths = sorted(t.line.width for t in drawn)
    assert widths[-1] == pytest.approx(0.5 + 14 * np.sort(w[1, 6, :7])[-1])


def test_a_click_on_the_grid_maps_back_to_layer_and_head(trace):
    fig = figures.layer_head_grid(analysis.layer_weights(trace, l) for l in range(trace.n_layer))
    markers = next(t for t in fig.data if t.type == "scatter")
    pitch = fig.layout.meta["tile_pitch"]
    for (x, y), (l, h) in zip(zip(markers.x, markers.y), markers.customdata):
        assert figures.overview_cell(x, y, pitch=pitch) == (l, h)
        assert figures.overview_cell(x + 4.4, y - 4.4, pitch=pitch) == (l, h)  # anywhere in the tile
    assert len(markers.x) == trace.n_layer * 2


def test_query_computation_matches_the_trace(trace):
    work = analysis.query_computation(trace, 1, 1, 6)
    keys = work["keys"]
    assert work["max_diff"]["scores"] < 1e-5 and work["max_diff"]["weights"] < 1e-5
    np.testing.assert_array_equal(keys["score (Trace)"], trace["blocks.1.attn.scores"][1, 6])
    assert (keys.loc[~keys["allowed"], "softmax"] == 0).all() and keys["softmax"].sum() == pytest.approx(1)
    v = trace["blocks.1.attn.v"][1].astype(np.float64)
    np.testing.assert_allclose(work["output"], trace["blocks.1.attn.weights"][1, 6] @ v, rtol=1e-6, atol=1e-9)
    labels = figures.token_labels(trace.tokens)
    fig = figures.query_scores(keys, labels, query_label=labels[6], head_dim=work["head_dim"])
    np.testing.assert_array_equal(fig.data[-1].y, trace["blocks.1.attn.weights"][1, 6])
    assert "√" in fig.layout.annotations[0].text


def test_matrix_heatmaps(trace, labels):
    q = trace["blocks.0.attn.q"][0]
    fig = figures.matrix_heatmap(q, labels, title="q", value_name="q")
    np.testing.assert_array_equal(fig.data[0].z, q)
    assert fig.data[0].zmin == -fig.data[0].zmax == -np.abs(q).max()
    work = analysis.query_computation(trace, 0, 0, 3)
    fig = figures.query_weighted_values(work["weighted_v"], work["output"], labels, query_label=labels[3])
    np.testing.assert_allclose(fig.data[1].z[0], work["output"])


# --- residual stream and shapes ----------------------------------------------------------------
def test_residual_grid_matches_resid_stats(trace):
    sites, grid = analysis.residual_stat_grid(trace, "norm")
    assert len(sites) == 1 + 2 * trace.n_layer
    stats = trace.resid_stats
    ref = stats[(stats.layer == 1) & (stats.site == "resid_post")]["norm"].to_numpy()
    np.testing.assert_allclose(grid[-1], ref)
    fig = figures.residual_lines(sites, grid, "norm", position=2, position_label="2 x")
    np.testing.assert_allclose(fig.data[2].y, grid.mean(1))
    np.testing.assert_allclose(fig.data[3].y, grid[:, 2])
    for stat in ("mean", "std"):  # against NumPy on the arrays, in float64
        x = np.asarray(trace["blocks.0.resid_mid"], dtype=np.float64)
        np.testing.assert_allclose(analysis.residual_stat_grid(trace, stat)[1][1], getattr(x, stat)(1), rtol=1e-12)
    heat = figures.residual_heatmap(sites, grid, figures.token_labels(trace.tokens), "mean")
    assert heat.data[0].zmin == -heat.data[0].zmax
    assert all(axis_titles(fig)) and all(axis_titles(heat))


def test_sublayer_contributions_and_flags(trace):
    contrib = analysis.sublayer_contributions(trace)
    pre, mid = trace["blocks.0.resid_pre"], trace["blocks.0.resid_mid"]
    assert contrib.loc[0, "added_norm"] == pytest.approx(np.linalg.norm(mid - pre, axis=1).mean(), rel=1e-6)
    assert analysis.residual_flags(trace) == []
    figures.contributions_bars(contrib)


def blown_trace(nan_at: str | None = None) -> gptviz.Trace:
    """A Trace whose residual stream grows 10× per sub-layer (and holds NaN at one site if asked)."""
    x = torch.ones(3, 4, dtype=torch.float64)
    tensors = {}
    for l in range(2):
        tensors[f"blocks.{l}.resid_pre"] = x
        tensors[f"blocks.{l}.resid_mid"] = x = x * 10
        tensors[f"blocks.{l}.resid_post"] = x = x * 10
    if nan_at:
        tensors[nan_at] = tensors[nan_at] * float("nan")
    return gptviz.Trace(tensors, ["a", "b", "c"], np.arange(3), [])


def test_runaway_growth_is_flagged():
    blown = blown_trace()
    flags = analysis.residual_flags(blown)
    assert any("block 1 multiplies the mean residual norm by 100.0×" in f for f in flags)
    assert not any("block 0" in f for f in flags)  # block 0 may rescale the embedding
    assert any("reaches 2e+04" in f for f in flags)
    assert analysis.residual_growth(blown) == pytest.approx(1e4)
    blown = blown_trace(nan_at="blocks.1.resid_mid")
    assert any("blocks.1.resid_mid holds NaN" in f for f in analysis.residual_flags(blown))


def test_shape_flow_has_the_real_sizes(trace):
    flow = analysis.shape_flow(trace)
    d = analysis.dims(trace)
    shapes = dict(zip(flow["notation"] + " " + flow["module"], flow["shape"]))
    T, C, H, D, V = d["T"], d["C"], d["H"], d["D"], d["V"]
    assert shapes["(B, T, 3C) transformer.h.0.attn.c_attn"] == (1, T, 3 * C)
    assert shapes["(B, H, T, D) transformer.h.0.attn.q"] == (1, H, T, D)
    assert shapes["(B, H, T, T) transformer.h.0.attn.scores"] == (1, H, T, T)
    assert shapes["(B, T, 4C) transformer.h.0.mlp.c_fc"] == (1, T, 4 * C)
    assert shapes["(B, T, V) lm_head"] == (1, T, V)
    fig = figures.shape_flow(flow, d)
    assert f"T = {T}" in fig.layout.title.text and len(fig.layout.annotations) >= len(flow)


# --- style -------------------------------------------------------------------------------------
def test_presentation_mode_enlarges_fonts_and_leaves_the_input_alone(trace, labels):
    fig = figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0), labels)
    before = json.dumps(fig.to_plotly_json(), default=str)
    big = figures.presentation(fig)
    assert big.layout.font.size > fig.layout.font.size and big.layout.height > fig.layout.height
    assert json.dumps(fig.to_plotly_json(), default=str) == before
    assert figures.presentation(fig, on=False).layout.font.size == fig.layout.font.size


def test_figures_built_as_dicts_are_figures_plotly_accepts(trace, labels):
    """presentation() edits the figure's dict, and the charts a class draws on each new prompt (top-k
    bars, one head's heatmap) or that a page rebuilt on every view (Shapes, Q / K / V) are built as
    dicts: none runs Plotly's validation (tens of ms a chart), so what they write must still be
    properties Plotly knows, for every kind of figure (subplots too)."""
    w = analysis.layer_weights(trace, 0)
    built = [
        figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0), labels),  # a colour bar
        figures.head_grid(w, labels, layer=0),  # subplots: xaxis2 …, subplot titles as annotations
        figures.loss_bars(analysis.per_token_loss(trace["logits"], trace.token_ids), labels),  # marker colour bar
        figures.shape_flow(analysis.shape_flow(trace), analysis.dims(trace)),  # annotations
        figures.topk_bars(analysis.top_k(trace.part("logits", -1), 5), position_label=labels[-1]),
        figures.matrix_heatmap(trace[gptviz.point("attn.q", 0)][0], labels, title="q", value_name="q", max_rows=3),
    ]
    work = analysis.query_computation(trace, 0, 1, 6)
    allowed = work["keys"]["allowed"].to_numpy()
    built.append(figures.query_scores(work["keys"], labels, query_label=labels[6], head_dim=work["head_dim"]))
    read = [label for label, ok in zip(labels, allowed) if ok]
    built.append(figures.query_weighted_values(work["weighted_v"][allowed], work["output"], read, query_label="q"))
    diff = analysis.attention_matrix(trace, 0, 0) - analysis.attention_matrix(trace, 0, 1)
    built += [  # the Compare page's
        compare.attention_difference_heatmap(diff, labels, title="A − B", mask=attention_mask(trace, 0)),
        compare.head_change_heatmap(np.eye(2, 3), title="heads", what="score"),
        compare.kl_bars(np.linspace(0, 1, len(labels)), labels, title="KL"),
    ]
    tiny = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])  # a lesson's, and Worked examples'
    built.append(content.small_heatmap(tiny, ["Order", "shipped", "from"], "w", np.tril(np.ones((3, 3), bool)), 320))
    for fig in built:
        for on in (False, True):
            shown = figures.presentation(fig, on)
            checked = go.Figure(shown.to_dict())  # Plotly's validators: an unknown property raises
            assert json.loads(checked.to_json()) == json.loads(shown.to_json())
            if on:
                axes = [k for k in shown.to_dict()["layout"] if k[1:5] == "axis"]
                assert axes and all(shown.layout[k].tickfont.size == round(14 * 1.45) - 2 for k in axes)


def test_token_chips_escape_html_and_colour_by_value():
    html = figures.token_chips_html(["<b>", "␣"], [3, 1], [np.nan, 2.0], vmax=2.0, unit="bits")
    assert "&#60;b&#62;" in html and "<b><b>" not in html  # a reference: neither a tag nor Markdown
    assert "rgb(255,115,40)" in html and "2.000 bits" in html


# --- drawing the truth: category axes, NaN vs masked, centred scales, the grid, presentation ----
def char_trace(prompt: str) -> tuple[gptviz.Trace, list[str]]:
    """A random char model over digits and '.', run on a numeric-looking prompt."""
    tok = gptviz.CharTokenizer(list("0123456789."))
    torch.manual_seed(3)
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    t = gptviz.trace(model, tok.encode(prompt), tok)
    return t, figures.token_labels(tok.display(t.token_ids))


def token_axes(fig: go.Figure) -> dict[str, dict]:
    """The axes of a figure's JSON that carry category labels, by name."""
    layout = json.loads(fig.to_json())["layout"]
    return {k: v for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and "categoryarray" in v}


@pytest.mark.parametrize("kind", ["chars", "ids"])
def test_numeric_looking_tokens_get_category_axes_in_position_order(kind):
    if kind == "chars":  # the prompt of issue 9 on a char model: every token is a digit or "."
        trace, labels = char_trace("3.14159265358979")
    else:  # ids typed for a model without a tokenizer: labels are "0 3", "1 10", … (Plotly drops the space)
        torch.manual_seed(4)
        model = gptviz.GPT(gptviz.GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
        trace = gptviz.trace(model, [3, 10, 3, 2, 41, 7, 7, 0])
        labels = figures.token_labels([str(i) for i in trace.token_ids])
    T = trace.n_tokens
    assert len(set(labels)) == T  # "1" twice in the prompt, still two labels
    mask = attention_mask(trace, 0)
    work = analysis.query_computation(trace, 0, 0, T - 1)
    sites, grid = analysis.residual_stat_grid(trace, "mean")
    top = analysis.top_k(trace["logits"][-1], 5, display=lambda ids: [str(i) for i in ids])
    built = {
        "heatmap": figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0), labels, mask=mask),
        "scores": figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0, "scores"), labels, kind="scores"),
        "heads": figures.head_grid(analysis.layer_weights(trace, 0), labels, layer=0, mask=mask),
        "q": figures.matrix_heatmap(trace["blocks.0.attn.q"][0], labels, title="q", value_name="q"),
        "query": figures.query_scores(work["keys"], labels, query_label=labels[-1], head_dim=work["head_dim"]),
        "weighted": figures.query_weighted_values(work["weighted_v"], work["output"], labels, query_label="x"),
        "residual": figures.residual_heatmap(sites, grid, labels, "mean"),
        "loss": figures.loss_bars(analysis.per_token_loss(trace["logits"], trace.token_ids), labels),
        "topk": figures.topk_bars(top, position_label=labels[-1]),
        "lines": figures.residual_lines(sites, grid, "mean", position=0, position_label=labels[0]),
        "contrib": figures.contributions_bars(analysis.sublayer_contributions(trace)),
    }
    for name, fig in built.items():
        axes = token_axes(fig)
        assert axes, f"{name}: no category axis"
        for ax_name, ax in axes.items():
            assert ax["type"] == "category", (name, ax_name)
            assert ax["categoryorder"] == "array" and len(set(ax["categoryarray"])) == len(ax["categoryarray"])
        for tr in fig.data:  # every token-labelled trace coordinate is one of its axis's categories, in order
            for letter in "xy":
                values = getattr(tr, letter, None)
                if values is None or not isinstance(values[0], str):
                    continue
                ax = axes[letter + "axis" + (getattr(tr, letter + "axis") or letter)[1:]]
                assert list(values) == [c for c in ax["categoryarray"] if c in set(values)], (name, letter)
    tokens_axes = [token_axes(built[n]) for n in ("heatmap", "q", "residual", "loss")]
    assert tokens_axes[0]["xaxis"]["categoryarray"] == tokens_axes[0]["yaxis"]["categoryarray"] == labels
    assert tokens_axes[1]["yaxis"]["categoryarray"] == labels and tokens_axes[2]["xaxis"]["categoryarray"] == labels
    assert tokens_axes[3]["xaxis"]["categoryarray"] == labels[1:]
    assert token_axes(built["topk"])["yaxis"]["categoryarray"][0].startswith("#1 ")


def nan_trace(bad_position: int = 3) -> gptviz.Trace:
    """A model whose embedding row for one token is NaN (NaN weights), run on a prompt holding that
    token at one position: every allowed cell reading it, and every row after it, is NaN."""
    torch.manual_seed(5)
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
    with torch.no_grad():
        model.transformer.wte.weight[7] = float("nan")
    ids = [1, 2, 3, 4, 5, 6]
    ids[bad_position] = 7
    return gptviz.trace(model, ids)


def test_nan_from_the_model_is_drawn_red_and_masked_cells_grey():
    trace = nan_trace(3)
    labels = figures.token_labels(trace.tokens)
    w = analysis.attention_matrix(trace, 0, 0)
    mask = attention_mask(trace, 0)
    assert mask.tolist() == np.tril(np.ones((6, 6), bool)).tolist()
    bad = np.isnan(trace["blocks.0.attn.weights"][0]) & mask
    assert bad[3:].any() and not bad[:3].any()  # rows before the NaN token are fine
    fig = figures.attention_heatmap(w, labels, mask=mask)
    assert len(fig.data) == 2
    red = np.asarray(fig.data[1].z)
    np.testing.assert_array_equal(~np.isnan(red), bad)  # red exactly where the model computed NaN
    assert not (~np.isnan(red) & ~mask).any()  # never on a masked cell
    assert fig.data[1].colorscale[0][1] == NAN and fig.layout.plot_bgcolor == MASKED
    assert "red = NaN computed by the model" in fig.layout.title.subtitle.text
    assert "grey = masked" in fig.layout.title.subtitle.text
    # Without the mask the old convention holds (every NaN is masked); with it, a healthy head has no red.
    assert len(figures.attention_heatmap(w, labels).data) == 1
    healthy = gptviz.trace(gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=16, n_layer=1)).eval(), [1, 2, 3])
    clean = figures.attention_heatmap(
        analysis.attention_matrix(healthy, 0, 0), ["a", "b", "c"], mask=attention_mask(healthy, 0)
    )
    assert len(clean.data) == 1 and "red" not in clean.layout.title.subtitle.text
    # The small multiples and the layer × head grid keep the same convention.
    heads = figures.head_grid(analysis.layer_weights(trace, 0), labels, layer=0, mask=mask)
    assert sum(t.name == "NaN" for t in heads.data) == 2 and "red = NaN" in heads.layout.title.subtitle.text
    grid = figures.layer_head_grid(
        (analysis.layer_weights(trace, l) for l in range(2)),
        masks=(attention_mask(trace, l) for l in range(2)),
    )
    codes = np.asarray(grid.data[1].z)
    side, pitch = grid.layout.meta["tile_side"], grid.layout.meta["tile_pitch"]
    tile = codes[:side, :side]  # layer 0, head 0
    np.testing.assert_array_equal(tile == 2, bad)
    np.testing.assert_array_equal(tile == 1, ~mask)
    assert (codes[:, side:pitch] == 0).all()  # the gaps are neither
    assert "grey = masked" in grid.layout.title.subtitle.text and "red = NaN" in grid.layout.title.subtitle.text


def test_nan_survives_block_averaging():
    T = 300  # averaged into 2 × 2 blocks: one NaN cell must still colour its block red
    w = np.tril(np.full((T, T), 1 / T, dtype=np.float32))
    w[np.triu_indices(T, 1)] = np.nan
    w[101, 50] = np.nan
    mask = np.tril(np.ones((T, T), bool))
    fig = figures.attention_heatmap(w, [str(i) for i in range(T)], mask=mask)
    red = ~np.isnan(np.asarray(fig.data[1].z))
    assert red.sum() == 1 and red[50, 25]


def test_diverging_scales_are_centred_on_zero(trace, labels):
    negative = -np.abs(trace["blocks.0.attn.scores"][0]) - 1  # all negative: none may look positive
    for kind in ("scores", "masked scores"):
        fig = figures.attention_heatmap(negative, labels, kind=kind)
        d = json.loads(fig.to_json())["data"][0]
        assert d["zmin"] == -d["zmax"] and d["zmax"] == pytest.approx(np.abs(negative).max())
        assert d["colorscale"] is not None and "zmid" not in d
    skip = figures.attention_heatmap(negative, labels, kind="scores", skip_first_key=True)
    assert skip.data[0].zmin == -skip.data[0].zmax == pytest.approx(-np.abs(negative[:, 1:]).max())
    assert figures.attention_heatmap(np.abs(negative), labels).data[0].zmin == 0  # weights start at 0
    sites, grid = analysis.residual_stat_grid(trace, "mean")
    heat = figures.residual_heatmap(sites, grid - 5, labels, "mean")
    assert heat.data[0].zmin == -heat.data[0].zmax == pytest.approx(-np.abs(grid - 5).max())
    q = trace["blocks.0.attn.q"][0] + 3  # mostly positive
    qfig = figures.matrix_heatmap(q, labels, title="q", value_name="q")
    assert qfig.data[0].zmin == -qfig.data[0].zmax
    work = analysis.query_computation(trace, 0, 0, 5)
    wv = figures.query_weighted_values(work["weighted_v"], work["output"] + 10, labels, query_label="x")
    assert wv.data[0].zmin == -wv.data[0].zmax == wv.data[1].zmin == pytest.approx(-np.abs(work["output"] + 10).max())


def test_grid_tiles_sit_on_their_ticks_and_mark_the_chosen_head(trace):
    L, T = trace.n_layer, trace.n_tokens  # T = 10: smaller than a full tile
    fig = figures.layer_head_grid((analysis.layer_weights(trace, l) for l in range(L)), selected=(1, 0))
    side, pitch = fig.layout.meta["tile_side"], fig.layout.meta["tile_pitch"]
    assert side == T and pitch == T + 1
    markers = next(t for t in fig.data if t.type == "scatter")
    assert list(fig.layout.xaxis.tickvals) == sorted(set(markers.x))  # ticks at the tile centres
    assert list(fig.layout.yaxis.tickvals) == sorted(set(markers.y))
    assert fig.layout.xaxis.tickvals[0] == pytest.approx((T - 1) / 2)
    assert fig.layout.xaxis.constrain == fig.layout.yaxis.constrain == "domain"  # labels stay by the tiles
    (shape,) = fig.layout.shapes
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (-0.5, T - 0.5, pitch - 0.5, pitch + T - 0.5)
    again = mark_tile(fig, 0, 1)
    assert len(again.layout.shapes) == 2 and len(fig.layout.shapes) == 1  # the cached figure is not changed
    codes = np.asarray(fig.data[1].z)
    np.testing.assert_array_equal(codes[:T, :T] == 1, ~attention_mask(trace, 0))  # masked: grey
    assert "grey = masked" in fig.layout.title.subtitle.text
    assert fig.layout.height >= 80 * L + 150


def test_presentation_wraps_titles_and_turns_colourbar_titles(trace, labels):
    fig = figures.loss_bars(analysis.per_token_loss(trace["logits"], trace.token_ids), labels)
    title = fig.layout.title.text
    assert title.startswith("How surprised the model is by each prompt token") and len(title) > PRESENTATION_WRAP
    big = figures.presentation(fig)
    lines = big.layout.title.text.split("<br>")
    assert len(lines) >= 2 and all(len(line) <= PRESENTATION_WRAP for line in lines)
    assert " ".join(lines) == title  # wrapped, nothing cut
    assert big.layout.margin.t > fig.layout.margin.t
    assert big.data[0].marker.colorbar.title.side == "right"
    heat = figures.presentation(figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0), labels))
    assert heat.data[0].colorbar.title.side == "right"
    assert wrap("a <b>bold</b> word", 8) == "a <b>bold</b><br>word"


def test_token_text_never_becomes_plotly_markup():
    # Plotly reads <a href>, <br>, <b> in ticks and titles: a token from a hostile tokenizer stays text
    tokens = ['<a href="https://example.invalid">x</a>', "<br>", "a<b>c"]
    labels = figures.token_labels(tokens)
    assert all("<" not in label and ">" not in label for label in labels)
    assert labels[0] == '0 &lt;a href="https://example.invalid"&gt;x&lt;/a&gt;'
    top = analysis.top_k(np.array([3.0, 2.0, 1.0]), 3, display=lambda ids: [tokens[i] for i in ids])
    bars = figures.topk_bars(top, position_label=labels[0])
    assert not any("<a" in y or "<br>" in y for y in bars.data[0].y)


# --- text that must not collide or repeat (issue 20.7) ------------------------------------------
def test_colour_bar_titles_are_one_line_with_the_range_once(trace, labels):
    from gptviz.figures.style import colorbar_title

    assert colorbar_title("weight", 0, 1) == "weight, 0 … 1"
    assert (
        colorbar_title("A − B<br>(unitless)") == "A − B (unitless)"
        and colorbar_title("x", float("nan"), 1) == "x, NaN … 1"
    )
    heat = figures.attention_heatmap(analysis.attention_matrix(trace, 0, 0), labels)
    shown = figures.presentation(heat, False).data[0].colorbar.title.text
    assert "<br>" not in shown and shown.count("…") == 1 and "0–1" not in shown
    for fig in (heat, figures.loss_bars(analysis.per_token_loss(trace["logits"], trace.token_ids), labels)):
        for on in (False, True):
            for tr in figures.presentation(fig, on).data:
                bar = getattr(tr, "colorbar", None) or getattr(getattr(tr, "marker", None), "colorbar", None)
                if bar is not None and bar.title.text:
                    assert "<br>" not in bar.title.text


def test_the_query_lines_stop_short_of_their_labels(trace, labels):
    fig = figures.attention_lines(analysis.attention_matrix(trace, 0, 0)[5], labels, 5)
    lines = [tr for tr in fig.data if tr.mode == "lines"]
    texts = [tr for tr in fig.data if tr.mode == "text"]
    assert lines and all(min(tr.x) > 0 and max(tr.x) < 1 for tr in lines)
    assert {tr.x[0] for tr in texts} == {0, 1}  # the labels sit where the lines stop short


def test_patching_numbers_are_readable_or_left_to_the_hover():
    from gptviz.figures.style import FONT
    from gptviz.figures.whatif import MAX_TEXT_COLUMNS, patching_heatmap

    few = patching_heatmap(np.full((2, 10), 0.5), "resid_pre", [str(i) for i in range(10)])
    assert few.data[0].texttemplate == "%{text}" and few.data[0].textfont.size >= FONT - 2
    many = patching_heatmap(np.full((2, MAX_TEXT_COLUMNS + 1), 0.5), "resid_pre")
    assert many.data[0].text is None and "hover" in many.layout.title.subtitle.text


def test_residual_axis_titles_stay_short(trace):
    sites, grid = analysis.residual_stat_grid(trace, "std")
    fig = figures.residual_lines(sites, grid, "std", position=0, position_label="0 a")
    assert len(fig.layout.yaxis.title.text) <= 24 and "standard deviation" in fig.layout.title.text


def test_the_layer_head_grid_is_as_tall_as_its_tiles():
    """16 layers × 32 heads: the tiles are square and width-bound, so the figure is about half as tall
    as wide, not 80 px a layer with white space above and below."""
    T = 4
    w = np.tril(np.full((32, T, T), 1.0 / T))
    tall = figures.layer_head_grid(w for _ in range(16)).layout.height
    assert tall <= 150 + 1000 * 16 / 32 + 1
    few = figures.layer_head_grid(w[:4] for _ in range(4)).layout.height  # a narrow grid keeps 80 px a layer
    assert few == 80 * 4 + 150
