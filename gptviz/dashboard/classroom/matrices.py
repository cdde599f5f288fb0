"""The Worked examples page's matrices: an editable input (st.data_editor) and a computed result shown to
4 decimals with its shape, optionally beside its heatmap; the reset of every input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from ...analysis import worked
from ...lessons import content
from .. import widgets

NUM = st.column_config.NumberColumn(format="%.4f")


def cols(n: int, name: str = "c") -> list[str]:
    return [f"{name}{i}" for i in range(n)]


def edit(label: str, default, key: str, rows: list[str] | None = None, columns: list[str] | None = None) -> np.ndarray:
    """An editable input matrix; an emptied cell counts as 0 (and says so)."""
    a = worked.arr(default)
    a = a.reshape(1, -1) if a.ndim == 1 else a
    df = pd.DataFrame(a, index=rows or cols(a.shape[0], "r"), columns=columns or cols(a.shape[1]))
    df.index.name = label
    st.markdown(f"**{label}** · shape {tuple(a.shape)} · edit any cell")
    out = st.data_editor(df, key=key, num_rows="fixed", column_config=dict.fromkeys(df.columns, NUM), width="content")
    values = out.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(values).any():
        st.caption("An empty cell counts as 0.")
        values = np.nan_to_num(values)
    return values


def qk(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Row and column labels of a query × key matrix."""
    return [f"query {t}" for t in tokens], [f"key {t}" for t in tokens]


def show(
    label: str,
    a,
    note: str = "",
    rows: list[str] | None = None,
    columns: list[str] | None = None,
    heat: list[str] | None = None,
    causal: bool = True,
) -> None:
    """A computed matrix with its shape, to 4 decimals (the index name is the step's label).
    A value that rounds to 0 is sent as 0 (never −0.0000); a matrix with −∞ in it is written as text
    (−∞, not -Infinity). heat: the tokens of a weights matrix, drawn as a heatmap beside it."""
    a = np.asarray(a)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    if a2.dtype.kind == "f":
        if np.isinf(a2).any():
            a2 = np.vectorize(content.num, otypes=[object])(a2)
        else:
            a2 = np.where(np.abs(a2) < 5e-5, 0.0, a2)
    df = pd.DataFrame(a2, index=rows or cols(a2.shape[0], "r"), columns=columns or cols(a2.shape[1]))
    df.index.name = label
    place = st.columns([1, 1], vertical_alignment="center") if heat else [st.container()]
    with place[0]:
        st.markdown(f"**{label}** · shape {tuple(a.shape)}" + (f" · {note}" if note else ""))
        config = dict.fromkeys(df.columns, NUM) if a2.dtype.kind == "f" else None
        st.dataframe(df, column_config=config, width="content")
    if heat:
        T = len(heat)
        mask = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
        fig = content.small_heatmap(
            a, heat, label, mask, height=320, axis_titles=("key", "query"), margin=dict(t=50, b=40)
        )
        with place[1]:
            widgets.chart(fig, key=f"heat_{label}")


RESET_PREFIXES = ("w0_", "w4_")


def reset() -> None:
    """Every input back to the teaching text's numbers, every switch back on."""
    for key in [k for k in st.session_state if str(k).startswith(RESET_PREFIXES)]:
        del st.session_state[key]


def mass(label: str, value: float) -> None:
    st.metric(label, f"{value:.4f}")
