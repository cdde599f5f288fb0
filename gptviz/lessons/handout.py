"""A lesson as one self-contained HTML file, for students to keep: every slide's title, note, input
table, numbers and interactive Plotly figure, with plotly.js written into the file itself, so it
opens from disk with no server and no network.

Everything from the lesson file (titles, notes) and from the model (token text in tables) is
HTML-escaped; figures go through Plotly's own JSON (token labels are escaped by the figure builders).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..errors import OutputError
from . import Lesson, Slide, content
from .class_round import Round, round_lines, round_table
from .drawing import Content

CSS = """
body { font-family: Inter, 'Source Sans Pro', Arial, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #262730; padding: 0 1rem; }
section { border-top: 2px solid #e6e6e6; padding: 1rem 0 2rem; }
.note { font-size: 1.25rem; }
.cols { display: flex; gap: 2rem; align-items: flex-start; flex-wrap: wrap; }
.left { flex: 1 1 320px; } .right { flex: 1.4 1 480px; min-width: 0; }
table { border-collapse: collapse; font-size: 0.95rem; }
td, th { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
.caption { color: #666; font-size: 0.9rem; }
/* Printed (the browser's Print, or `gptviz handout --pdf`): each slide on its own landscape page, and
   no figure, table or list of numbers split across two; a heading stays with what follows it. */
@page { size: A4 landscape; margin: 12mm; }
@media print {
  body { margin: 0; max-width: none; padding: 0; }
  section { break-before: page; border-top: none; padding: 0; }
  section:first-of-type { break-before: auto; }
  .figure, table, ul, .note { break-inside: avoid; }
  h1, h2, h3 { break-after: avoid; }
}
"""
FIGURE_WIDTH = 600  # px: beside its table on a printed landscape page; alone on a portrait one


def render(lesson: Lesson, contents: Sequence[Content | str], rounds: Mapping[int, Round] | None = None) -> str:
    """The handout of a lesson whose slides have these contents (a str: why a slide could not be shown);
    rounds: the room's guesses on predict slides (by slide index, from 0), scored by the model."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(lesson.title)}</title><style>{CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',  # inlined: opens without a network
        "</head><body>",
        f"<h1>{e(lesson.title)}</h1>",
    ]
    if lesson.description:
        parts.append(f"<p>{e(lesson.description)}</p>")
    for i, (slide, c) in enumerate(zip(lesson.slides, contents), start=1):
        parts.append(f'<section id="slide-{i}"><h2>{i}. {e(slide.title)}</h2>')
        if slide.note:
            parts.append(f'<p class="note">{e(slide.note)}</p>')
        if isinstance(c, str):
            parts.append(f"<p><em>This slide could not be drawn: {e(c)}</em></p></section>")
            continue
        parts.append('<div class="cols"><div class="left">')
        parts.append(f"<h3>{e(c.table_title)}</h3>")
        if c.table is not None:
            plain_index = isinstance(c.table.index, pd.RangeIndex)  # 0, 1, 2 … says nothing
            parts.append(c.table.to_html(escape=True, border=0, index=not plain_index))
        parts.append("<ul>" + "".join(f"<li>{e(k)}: <b>{e(v)}</b></li>" for k, v in c.facts) + "</ul>")
        parts.append('</div><div class="right">')
        figure = _for_page(c.figure).to_html(
            full_html=False, include_plotlyjs=False, div_id=f"figure-{i}", default_width=FIGURE_WIDTH
        )
        parts.append(f'<div class="figure">{figure}</div>')
        parts.append(f'<p class="caption">{e(c.caption)}</p></div></div>')
        r = (rounds or {}).get(i - 1)
        if r is not None:
            parts.append(_round(r))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _for_page(fig: go.Figure) -> go.Figure:
    """A slide's figure at the handout's width: a figure of panels (subplot titles) gets its own title
    above them, in the figure (at 600 px the title sat on the panels' titles, its start cut off)."""
    if not fig.layout.annotations:
        return fig
    out = go.Figure(fig)
    top = max(int(out.layout.margin.t or 0), 100)
    out.update_layout(
        margin_t=top,
        title=dict(y=1, yref="container", yanchor="top", pad_t=12, x=0.02, xref="container", xanchor="left"),
    )
    return out


def _round(r: Round) -> str:
    """The room's guesses of a predict slide, as the reveal showed them."""
    e = html.escape
    table = round_table(r).to_html(escape=True, border=0, index=False) if r.guesses else "<p>No guesses.</p>"
    lines = "".join(f"<li>{e(line)}</li>" for line in round_lines(r))
    return f'<div class="round"><h3>The room\'s guesses</h3>{table}<ul>{lines}</ul></div>'


def contents(lesson: Lesson, runs: Callable[[Slide], Content | str]) -> list[Content | str]:
    return [runs(s) for s in lesson.slides]


def local_runs(checkpoints: Path) -> Callable[[Slide], Content | str]:
    """A slide's content from the checkpoints in a folder, each loaded once (for the CLI and scripts)."""
    from ..capture import trace
    from ..errors import GptvizError
    from ..formats import load
    from ..tokenizers import encode_prompt

    loaded: dict = {}

    def build(slide: Slide) -> Content | str:
        if not content.real_model(slide):
            return content.build(slide)
        name = slide.checkpoint or "shakespeare-char"
        try:
            if name not in loaded:
                loaded[name] = load(checkpoints / name)
            bundle = loaded[name]
            prompt = slide.prompt or (bundle.card or {}).get("preset_prompt") or ""
            ids = encode_prompt(bundle.tokenizer, prompt, bundle.model.config.block_size, keep_last=True)
            sae = _sae(slide, checkpoints / name / "saes", bundle)
            steer = [slide.steer.intervention(bundle, sae=sae)] if slide.steer is not None else []
            return content.build(slide, bundle, trace(bundle.model, ids, bundle.tokenizer, steer), sae)
        except (GptvizError, OSError) as err:
            return str(err).splitlines()[0][:300]

    return build


def _sae(slide: Slide, folder: Path, bundle):
    """The SAE a features slide (or one steering with a feature) reads: its `sae` in the checkpoint's
    saes/ folder, else the first there; None for a slide that reads none."""
    from ..features import SAEError, load_sae

    if slide.page != "features" and (slide.steer is None or slide.steer.kind != "feature"):
        return None
    names = sorted(p.name for p in folder.iterdir() if (p / "cfg.json").is_file()) if folder.is_dir() else []
    name = slide.sae or (names[0] if names else None)
    if name not in names:
        raise SAEError(f"{folder.parent.name} ships no SAE {name or ''}".rstrip())
    return load_sae(folder / name, model=bundle.model)


def write(lesson: Lesson, runs: Callable[[Slide], Content | str], out: str | Path) -> Path:
    """Write the handout to `out` (exactly this path) and return it."""
    out = Path(out)
    text = render(lesson, contents(lesson, runs))
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise OutputError(f"cannot write the handout to {out}: {err.strerror or err}") from None
    return out
