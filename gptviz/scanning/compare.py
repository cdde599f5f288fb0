"""Two scans of one corpus side by side (two checkpoints of one run, or any two models that read it):
what changed in the loss of each document, in each head's scores, and in each neuron's strongest
contexts. Pure functions of two Scans; no Streamlit, no model runs.

    a, b = gptviz.load_scan("scan-step-2500"), gptviz.load_scan("scan-step-3000")
    check_same_corpus(a, b)          # ScanCompareError (one line) when they cannot be compared
    document_losses(a, b)            # doc, document, tokens_a, tokens_b, loss_a, loss_b, change
    head_changes(a, b, "induction")  # layer, head, name, a, b, change
    neuron_overlap(a, b)             # layer, neuron, k, shared, overlap, top_a, top_b, ...

Every change is B minus A. The document losses are means over each document's predicted tokens (a
window's loss weighted by the tokens it predicts), so scans cut into different windows still compare.
A neuron's top contexts compare only between scans cut into the same windows (the same tokenizer and
window): its overlap is the share of its top-k windows found in both, lowest first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import GptvizError
from ..figures.corpus import head_label
from .heads import NoHeadData, head_metrics


class ScanCompareError(GptvizError, ValueError):
    """Two scans that cannot be compared (another corpus, another model shape); the message says why."""


def _names(scan, docs: int) -> list[str]:
    names = list(scan.summary.get("doc_names") or [])
    return [str(names[d]) if d < len(names) else f"document {d}" for d in range(docs)]


def check_same_corpus(a, b) -> None:
    """ScanCompareError unless a and b are scans of the same documents (their count and names)."""
    da, db = int(a.summary["docs"]), int(b.summary["docs"])
    if da != db:
        raise ScanCompareError(f"the scans read different corpora: {da:,} documents against {db:,}")
    na, nb = a.summary.get("doc_names") or [], b.summary.get("doc_names") or []
    shared = min(len(na), len(nb))
    differ = [i for i in range(shared) if na[i] != nb[i]]
    if differ:
        i = differ[0]
        raise ScanCompareError(
            f"the scans read different corpora: document {i} is {str(na[i])[:60]!r} in one, "
            f"{str(nb[i])[:60]!r} in the other"
        )


def same_windows(a, b) -> bool:
    """Whether a and b cut the corpus into the same windows (window ids name the same tokens in both)."""
    cols = ["window", "doc", "start", "n_tokens"]
    wa, wb = a.windows.sort_values("window"), b.windows.sort_values("window")
    if len(wa) != len(wb) or not np.array_equal(wa[cols].to_numpy(), wb[cols].to_numpy()):
        return False
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(wa["token_ids"], wb["token_ids"]))


def _per_document(scan) -> pd.DataFrame:
    w = scan.windows
    predicted = (w["n_tokens"] - 1).astype(np.float64)
    df = pd.DataFrame({"doc": w["doc"], "tokens": predicted, "nats": w["loss"].astype(np.float64) * predicted})
    g = df.groupby("doc").sum()
    return pd.DataFrame(
        {"tokens": g["tokens"].astype(np.int64), "loss": g["nats"] / g["tokens"].where(g["tokens"] > 0)}
    )


def document_losses(a, b) -> pd.DataFrame:
    """doc, document, tokens_a, tokens_b, loss_a, loss_b, change: each document's mean loss over its
    predicted tokens in both scans (nats), the largest change either way first."""
    check_same_corpus(a, b)
    pa, pb = _per_document(a), _per_document(b)
    docs = pa.index.union(pb.index)
    pa, pb = pa.reindex(docs), pb.reindex(docs)
    names = _names(a, int(a.summary["docs"]))
    out = pd.DataFrame(
        {
            "doc": docs.to_numpy(np.int64),
            "document": [names[d] if 0 <= d < len(names) else f"document {d}" for d in docs],
            "tokens_a": pa["tokens"].to_numpy(),
            "tokens_b": pb["tokens"].to_numpy(),
            "loss_a": pa["loss"].to_numpy(),
            "loss_b": pb["loss"].to_numpy(),
        }
    )
    out["change"] = out["loss_b"] - out["loss_a"]
    return _by_size_of_change(out)


def _by_size_of_change(df: pd.DataFrame) -> pd.DataFrame:
    order = np.lexsort((np.arange(len(df)), -df["change"].abs().fillna(-1).to_numpy()))
    return df.iloc[order].reset_index(drop=True)


def head_table(scan) -> pd.DataFrame:
    """Every head's mean scores (the heads table) and, when the scan kept them, HeadVis's metrics."""
    try:
        return scan.heads.merge(head_metrics(scan), on=["layer", "head"])
    except NoHeadData:  # a scan written before head_attention was kept
        return scan.heads.copy()


def comparable_scores(a, b) -> list[str]:
    """The head scores and metrics both scans have."""
    ta, tb = head_table(a), head_table(b)
    return [c for c in ta.columns if c not in ("layer", "head") and c in tb.columns]


def head_changes(a, b, score: str) -> pd.DataFrame:
    """layer, head, name, a, b, change: one head score in both scans, the largest change either way first."""
    ta, tb = head_table(a), head_table(b)
    shape = lambda t: (int(t["layer"].max()) + 1, int(t["head"].max()) + 1)  # noqa: E731
    if shape(ta) != shape(tb):
        (la, ha), (lb, hb) = shape(ta), shape(tb)
        raise ScanCompareError(f"the models differ in shape: {la} layers x {ha} heads against {lb} x {hb}")
    if score not in ta or score not in tb:
        raise ScanCompareError(
            f"{score!r} is not a head score both scans have; choose one of {comparable_scores(a, b)}"
        )
    m = ta[["layer", "head", score]].merge(tb[["layer", "head", score]], on=["layer", "head"], suffixes=("_a", "_b"))
    out = pd.DataFrame(
        {
            "layer": m["layer"].astype(np.int64),
            "head": m["head"].astype(np.int64),
            "name": [head_label(l, h) for l, h in zip(m["layer"], m["head"])],  # as the heads tab names them
            "a": m[f"{score}_a"].astype(np.float64),
            "b": m[f"{score}_b"].astype(np.float64),
        }
    )
    out["change"] = out["b"] - out["a"]
    return _by_size_of_change(out)


def neuron_overlap(a, b) -> pd.DataFrame:
    """layer, neuron, k, shared, overlap, value_a, value_b, window_a, window_b: per neuron, how many of
    its top-k windows (k: the smaller of the two scans' ranks kept) both scans share, and that as a
    share of k; its strongest value and window in each. Lowest overlap first (then the larger change of
    the strongest value). ScanCompareError unless both scans cut the corpus into the same windows."""
    check_same_corpus(a, b)
    if not same_windows(a, b):
        raise ScanCompareError(
            "neuron contexts compare only between scans cut into the same windows (the same tokenizer and "
            "window size); these two were cut differently"
        )
    na, nb = a.neurons, b.neurons
    if (na["layer"].max(), na["neuron"].max()) != (nb["layer"].max(), nb["neuron"].max()):
        raise ScanCompareError("the models differ in shape: another number of layers or neurons")
    k = int(min(na["rank"].max(), nb["rank"].max())) + 1
    ta, tb = na[na["rank"] < k], nb[nb["rank"] < k]
    key = ["layer", "neuron", "window"]
    shared = ta[key].drop_duplicates().merge(tb[key].drop_duplicates(), on=key).groupby(["layer", "neuron"]).size()
    held = pd.concat([ta.groupby(["layer", "neuron"]).size(), tb.groupby(["layer", "neuron"]).size()], axis=1).max(
        axis=1
    )
    top_a = ta[ta["rank"] == 0].set_index(["layer", "neuron"])
    top_b = tb[tb["rank"] == 0].set_index(["layer", "neuron"])
    idx = held.index
    out = pd.DataFrame(
        {
            "layer": idx.get_level_values(0).astype(np.int64),
            "neuron": idx.get_level_values(1).astype(np.int64),
            "k": held.to_numpy(np.int64),
            "shared": shared.reindex(idx, fill_value=0).to_numpy(np.int64),
        }
    )
    out["overlap"] = out["shared"] / out["k"]
    out["value_a"] = top_a["value"].reindex(idx).to_numpy(np.float64)
    out["value_b"] = top_b["value"].reindex(idx).to_numpy(np.float64)
    out["window_a"] = top_a["window"].reindex(idx).to_numpy()
    out["window_b"] = top_b["window"].reindex(idx).to_numpy()
    moved = -(out["value_b"] - out["value_a"]).abs().to_numpy()
    order = np.lexsort((out["neuron"].to_numpy(), out["layer"].to_numpy(), moved, out["overlap"].to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def summary_changes(a, b) -> dict:
    """The two scans' mean losses over every predicted token, and the change."""
    return {"loss_a": float(a.summary["loss"]), "loss_b": float(b.summary["loss"]),
            "change": float(b.summary["loss"]) - float(a.summary["loss"])}  # fmt: skip
