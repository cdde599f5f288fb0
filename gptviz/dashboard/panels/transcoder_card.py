"""What the Graph page says of a transcoder set besides the graph: its fidelity first (how well the
replacement model stands in for this one, before any graph is drawn from it) and, for one feature, its
strongest contexts from a corpus scan made with the same set.

Fidelity: the held-out numbers train_transcoders stored in the set's config.yaml when the set was trained
on this checkpoint (nothing to compute), else tcs.fidelity on the sample corpus's first FIDELITY_TOKENS
tokens, once per process. Scans: the shipped ones, the Corpus page's own, or a folder typed here, whose
summary.json names the set by its fingerprint (gptviz.scanning.transcoder_record).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import streamlit as st

from ...errors import GptvizError
from ...figures import corpus as cfig
from ...scanning import Scan, queries
from ...scanning.validate import against_model
from ...shipped import shipped_dir
from ...transcoders.fidelity import warning
from ..caches import FORWARD, ModelKey, bundle_for, cached
from ..corpus import scans as cp
from ..corpus.compare_tab import page_scans
from ..corpus.scan_form import scan_folder
from ..widgets import plain

SAMPLE_CORPUS = "shakespeare"  # samples/<this>: the text fidelity is measured on when the set stores none
FIDELITY_TOKENS = 2048  # enough for top-1 agreement to ±2 % on a small model; two batched forward passes
SAMPLE_CHARS = 8 * FIDELITY_TOKENS  # of its first file: at least FIDELITY_TOKENS tokens for any tokenizer
CONTEXTS = 8  # a feature's strongest contexts shown


def _stored(meta: dict, checkpoint: Path) -> dict | None:
    """The held-out fidelity train_transcoders wrote in config.yaml, if it was measured on this checkpoint
    (by name) and holds plain numbers; None otherwise (a config is someone else's file)."""
    training = meta.get("gptviz_training")
    card = training.get("held_out_fidelity") if isinstance(training, dict) else None
    name = meta.get("model_name")
    if not isinstance(card, dict) or not isinstance(name, str) or Path(name).name != checkpoint.name:
        return None
    try:
        agree, kl = float(card["top1_agreement"]), float(card["kl"])
        nmse, dead = ({int(l): float(x) for l, x in card[key].items()} for key in ("nmse", "dead"))
        tokens = int(card.get("tokens") or 0)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not nmse or not all(math.isfinite(x) and x >= 0 for x in (agree, kl, *nmse.values(), *dead.values())):
        return None
    return {"top1_agreement": agree, "kl": kl, "nmse": nmse, "dead": dead, "tokens": tokens}


@cached(max_entries=8, show_spinner="Measuring the transcoders' fidelity on the sample corpus…")
def _measured(tcs_path: str, version: str, model: ModelKey, _tcs) -> dict | str:
    bundle = bundle_for(model)
    if bundle.tokenizer is None:
        return "this checkpoint has no tokenizer to read the sample corpus with"
    try:
        first = sorted((shipped_dir("samples") / SAMPLE_CORPUS).glob("*.txt"))[0]
        with open(first, encoding="utf-8") as f:  # only the start is measured: tokenizing all would cost more
            text = f.read(SAMPLE_CHARS)
        with FORWARD:
            return _tcs.fidelity(bundle.model, [text], tokenizer=bundle.tokenizer, max_tokens=FIDELITY_TOKENS)
    except (GptvizError, OSError, IndexError, UnicodeDecodeError) as e:
        return str(e) or "the sample corpus cannot be read"


def fidelity(tcs, tcs_path: str, version: str, model: ModelKey, checkpoint: Path) -> tuple[dict | str, str]:
    """(the set's fidelity on this model, or why it could not be measured; where the numbers come from)."""
    stored = _stored(tcs.meta, checkpoint)
    if stored is not None:
        data = (tcs.meta.get("gptviz_training") or {}).get("data")
        return stored, f"measured when they were trained, on {stored['tokens']:,} held-out tokens of {data}"
    got = _measured(tcs_path, version, model, tcs)
    tokens = got["tokens"] if isinstance(got, dict) else FIDELITY_TOKENS
    where = f"measured here on {tokens:,} tokens of the sample corpus ({SAMPLE_CORPUS})"
    return got, where


def show_fidelity(result: dict | str, where: str) -> None:
    """Fidelity first: the four numbers, NMSE and dead share per layer, and a plain warning when poor."""
    st.subheader("Fidelity first")
    if isinstance(result, str):
        st.warning(f"The transcoders' fidelity could not be measured: {plain(result)}")
        return
    worst = max(result["nmse"].items(), key=lambda kv: kv[1])
    m = st.columns(4)
    agree = "Share of tokens where the replacement model (every MLP its transcoder) predicts the model's top token"
    m[0].metric("Top-1 agreement", f"{100 * result['top1_agreement']:.1f} %", help=agree)
    m[1].metric("KL (nats / token)", f"{result['kl']:.3f}", help="KL(model ‖ replacement)")
    m[2].metric("NMSE (worst layer)", f"{worst[1]:.3f}", help=f"layer {worst[0]}: squared error / variance of mlp.out")
    m[3].metric("Dead share (most)", f"{100 * max(result['dead'].values()):.1f} %")
    layers = sorted(result["nmse"])
    per_layer = pd.DataFrame(
        {"layer": layers, "NMSE": [result["nmse"][l] for l in layers], "dead": [result["dead"].get(l) for l in layers]}
    )
    st.caption(f"The replacement model against this one, {where}.")
    with st.expander("Per layer", expanded=False):
        st.dataframe(per_layer, hide_index=True, key="graph_fidelity_layers")
    poor = warning(result)
    if poor:
        st.warning(f"Poor fidelity: {plain(poor)}.")


# --- a feature's strongest contexts ------------------------------------------------------------------
def _candidates() -> list[Path]:
    """The scans the page looks in by itself: the Corpus page's this session may open (newest first; on a
    class server only this session's), then the shipped ones."""
    return [*map(Path, page_scans()), *queries.shipped_scans()]


@cached(max_entries=16, show_spinner=False)
def _matching(fingerprint: str, versions: tuple[tuple[str, float], ...]) -> tuple[str, float] | None:
    found = queries.scans_of_transcoders(fingerprint, [Path(f) for f, _ in versions])
    return next(((f, s) for f, s in versions if found and Path(f) == found[0]), None)


def scan_for(tcs, typed: str) -> tuple[str, float] | str | None:
    """(folder, version) of a scan made with this set: the typed folder (if any), else the newest found;
    a one-line reason when the typed folder is not one; None when there is none."""
    fingerprint = _fingerprint(tcs)
    if typed:
        try:
            version = queries.scan_version(scan_folder(typed))  # a class server: its roots only
        except GptvizError as e:
            return str(e)
        if not queries.scans_of_transcoders(fingerprint, [Path(version[0])]):
            return "that folder is not a scan made with these transcoders (its summary.json names another set, or none)"
        return version
    return _matching(fingerprint, tuple(queries.scan_version(f) for f in _candidates()))


def _fingerprint(tcs) -> str:
    """The set's fingerprint, worked out once per loaded set (the page's cache holds the set)."""
    if "_fingerprint" not in tcs.__dict__:
        tcs.__dict__["_fingerprint"] = tcs.fingerprint()
    return tcs.__dict__["_fingerprint"]


def show_contexts(found: tuple[str, float], model: ModelKey, layer: int, feature: int, tok) -> None:
    """The feature's strongest contexts in the scan, the firing token highlighted, with its density."""
    try:
        scan: Scan = cp.scan_at(*found)
    except GptvizError as e:
        st.error(f"Scan not opened: {plain(e)}")
        return
    mismatch = against_model(scan, bundle_for(model).model.config, cp.max_token_id(*found))
    if mismatch:
        st.error(mismatch)
        return
    rows = queries.transcoder_contexts(scan, layer, feature).head(CONTEXTS)
    density = queries.transcoder_density(scan, layer, feature)
    fires = "" if density is None else f"; it fires on {100 * density:.2f} % of its {scan.summary['tokens']:,} tokens"
    st.caption(f"From the scan {plain(found[0])} of {plain(scan.summary.get('data', 'a corpus'))}{fires}.")
    if rows.empty:
        st.caption("It fires nowhere in that scan.")
        return
    for r in rows.itertuples():
        ids = queries.window_ids(scan, int(r.window)).tolist()
        st.html(cfig.ranked_context_html(r.rank, r.value, r.window, queries.token_texts(tok, ids), int(r.position)))


def how_to_scan(tcs_path: str, checkpoint: str, shipped: bool) -> None:
    """What the page shows when no scan with this set exists: where to run one, and the command."""
    page = "on the Corpus page (run a new scan, with these transcoders) or " if shipped else ""
    st.info(
        f"No corpus scan with these transcoders yet, so no contexts to show. Run one {page}with the command "
        "below, and give its folder here."
    )
    st.code(f"gptviz scan --checkpoint {checkpoint} --data CORPUS --transcoders {tcs_path} --out DIR", language="bash")
