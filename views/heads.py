"""Heads: what every attention head does on this prompt, as scores and a label; open one in Attention."""

import streamlit as st

from gptviz import figures
from gptviz.analysis.heads import LABEL_NAMES, LABEL_THRESHOLDS, SCORES
from gptviz.dashboard import keys, pages, progress, state, widgets
from gptviz.dashboard.panels import heads_lens

OPEN_FLAG = keys.HEADS_OPEN_ATTENTION
if st.session_state.pop(OPEN_FLAG, False):  # set by a click below, with layer and head already chosen
    state.switch_page(pages.page_file("attention"))

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Heads")
rules = ", ".join(f"{LABEL_NAMES[k]} ≥ {limit:g}" for k, limit in LABEL_THRESHOLDS.items())
st.caption(
    "Each head's attention on this prompt, scored against the pattern of a known kind of head: the share of "
    "all its attention on the pattern's cells (TransformerLens's detect_head, 'mul' measure, nothing excluded). "
    "**previous token**: key i−1 for query i. **duplicate token**: an earlier copy of the query's token. "
    "**induction**: the token right after an earlier copy of the query's token. **sink**: mean weight on key 0 "
    "(queries 1…T−1). **self**: mean weight on the query's own position. **entropy**: mean spread of a query's "
    "weights, in nats (0 = all on one key)."
)
st.info(
    f"**Labels.** A head is labelled when a score reaches its threshold: {rules} (0.4 is the common convention). "
    "When several do, the highest score names the head. A label describes this prompt only: try a prompt with "
    "repeats to find duplicate-token and induction heads."
)

scores = progress.waited("Scoring every head", "heads", v.key, lambda report: heads_lens.head_table(v.key, report))


def open_head(layer: int, head: int) -> None:
    st.session_state["layer"], st.session_state["head"] = layer, head
    st.session_state[OPEN_FLAG] = True


def open_clicked() -> None:
    points = st.session_state["heads_grid"].selection.get("points") or []
    picked = figures.clicked_head(points[0]) if points else None
    if picked is not None:
        open_head(*picked)


score = st.selectbox(
    "Colour the grid by",
    SCORES,
    key="heads_score",
    format_func=lambda s: s.replace("_", " "),
    help="Scores are shares of attention (0–1); entropy is in nats, from 0 to ln T",
)
widgets.chart(
    figures.head_score_grid(scores, score, selected=(v.layer, v.head), n_tokens=t.n_tokens),
    key="heads_grid",
    on_select=open_clicked,
    selection_mode="points",
)
st.caption("Click a head to open its attention in the Attention page.")

c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
ranked = scores.sort_values(score, ascending=score == "entropy", kind="stable")
choices = [f"{l}.{h}" for l, h in zip(ranked["layer"], ranked["head"])]  # "layer.head": plain, stable options
by_head = scores.set_index(["layer", "head"])


def describe(choice: str) -> str:
    l, h = map(int, choice.split("."))
    row = by_head.loc[(l, h)]
    kind = f" · {LABEL_NAMES[row['label']]}" if row["label"] else ""
    return f"layer {l}, head {h} · {score.replace('_', ' ')} {row[score]:.3f}{kind}"


pick = c1.selectbox(
    f"Or pick a head (best {score.replace('_', ' ')} first)", choices, key="heads_pick", format_func=describe
)
c2.button(
    "Open in Attention", key="heads_open", on_click=open_head, args=tuple(map(int, pick.split("."))), width="stretch"
)

st.subheader("Every head")
table = scores.assign(label=scores["label"].map(lambda s: LABEL_NAMES.get(s, s)))
number = st.column_config.NumberColumn(format="%.3f")
st.dataframe(
    table,
    key="heads_table",
    hide_index=True,
    width="stretch",
    column_config=dict.fromkeys(SCORES, number),
)
st.caption("Click a column header to sort by it.")
widgets.download("head scores (CSV)", lambda: scores, "head_scores.csv", key="heads_dl")
