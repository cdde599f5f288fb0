"""A slide's highlight frames its cells without covering them (issue 27: a 4 px outline hid the very
row it pointed at on 42-60 token heatmaps). Checked on the figure spec, drawn by hand: each line of
the frame placed in pixels the way Plotly places it (a pixel-sized line is `y0` pixels above its
anchor), for plot areas from 160 px to 900 px, must lie off the highlighted cells and inside the plot
area (Plotly clips shapes to it). The browser test (tests/e2e/test_slides.py) measures the same on
the drawn slides."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz.lessons import Highlight, content


def to_px(lo: float, hi: float, v: float, length: float, reverse: bool) -> float:
    """Pixels from the top (y) or the left (x) of a plot area whose axis shows [lo, hi]."""
    f = (v - lo) / (hi - lo)
    return length * (1 - f) if reverse else length * f


def frame(T: int, h: Highlight, width: float, height: float):
    """(lines, cells, plot) in pixels: each line's stroke box, the framed boxes, the plot area."""
    fig = content.small_heatmap(np.full((T, T), 1 / T), [f"t{i}" for i in range(T)], "w", None)
    content.mark(fig, h, T)
    xr, yr = fig.layout.xaxis.range, fig.layout.yaxis.range
    reverse_y = yr[0] > yr[1]  # the first query on top
    ylo, yhi = min(yr), max(yr)

    def px_x(v):
        return to_px(xr[0], xr[1], v, width, False)

    def px_y(v):
        # a reversed axis puts its low values on top; Plotly's pixel offsets point up (hence the minus)
        return to_px(ylo, yhi, v, height, not reverse_y)

    lines = []  # a line's stroke is as wide as the line across it, and ends at its ends (SVG's butt caps)
    for s in fig.layout.shapes:
        half = s.line.width / 2
        if s.ysizemode == "pixel":
            y = px_y(s.yanchor) - s.y0
            lines.append((min(px_x(s.x0), px_x(s.x1)), max(px_x(s.x0), px_x(s.x1)), y - half, y + half))
        else:
            x = px_x(s.xanchor) + s.x0
            ys = sorted((px_y(s.y0), px_y(s.y1)))
            lines.append((x - half, x + half, ys[0], ys[1]))
    i = min(h.at[0], T - 1)
    if h.kind == "cell":
        j = min(h.at[1], T - 1)
        boxes = [(i, i, j, j)]
    else:
        boxes = [(i, i, 0, T - 1)] + ([(0, T - 1, i, i)] if h.kind == "token" else [])
    cells = []
    for r0, r1, c0, c1 in boxes:
        ys = sorted((px_y(r0 - 0.5), px_y(r1 + 0.5)))
        cells.append((px_x(c0 - 0.5), px_x(c1 + 0.5), ys[0], ys[1]))
    return lines, cells


def apart(a, b) -> bool:
    """Two boxes (left, right, top, bottom) that share no area (touching edges is apart)."""
    return a[1] <= b[0] + 1e-6 or b[1] <= a[0] + 1e-6 or a[3] <= b[2] + 1e-6 or b[3] <= a[2] + 1e-6


@pytest.mark.parametrize("T", [3, 4, 42, 60])
@pytest.mark.parametrize("kind", ["cell", "row", "token"])
@pytest.mark.parametrize("side", [160, 300, 900])
def test_the_frame_lies_off_its_cells_and_inside_the_plot(T, kind, side):
    for at in {0, T // 2, T - 1}:  # the first and last rows too: their frame must not be clipped
        h = Highlight(kind, (at, max(at - 1, 0)) if kind == "cell" else (at,))
        lines, cells = frame(T, h, side, side)
        assert len(lines) >= 4 * len(cells)
        for line in lines:
            for c in cells:
                assert apart(line, c), (kind, at, line, c)
            l, r, t, b = line
            assert l >= -1e-6 and t >= -1e-6 and r <= side + 1e-6 and b <= side + 1e-6, (kind, at, line)
        for c in cells:  # a line on each side of each box: above, below, left, right
            assert any(line[3] <= c[2] + 1e-6 for line in lines) and any(line[2] >= c[3] - 1e-6 for line in lines)
            assert any(line[1] <= c[0] + 1e-6 for line in lines) and any(line[0] >= c[1] - 1e-6 for line in lines)


def test_no_highlight_leaves_the_figure_as_it_was():
    fig = content.small_heatmap(np.eye(3), ["a", "b", "c"], "w", None)
    before = fig.to_json()
    assert content.mark(fig, None, 3).to_json() == before
