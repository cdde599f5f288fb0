"""The Graph page's logic: which transcoders (shipped beside the checkpoint, a folder, an upload), the
attribution graph of the run (cached per run, transcoders and choices, computed with a progress bar
and Cancel), a node's logit effect, and a run with one feature zeroed or clamped (its error kept).

Shipped transcoders live in checkpoints/<checkpoint>/transcoders (one set) or its subfolders (several),
each in circuit-tracer's layout (config.yaml + layer_{l}.safetensors). An upload is those files, sized
by the uploader and checked by name, written to a private folder of this process named by their hash.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import streamlit as st
import torch

from ...capture import trace
from ...circuits import Graph, attribution_graph
from ...circuits.export import graph_json
from ...errors import GptvizError
from ...features.edits import edit_features
from ...progress import ProgressFn
from ..caches import FORWARD, ModelKey, RunKey, bundle_for, cached, run_trace
from ..sources.checkpoints import checkpoint_path, checkpoints_dir, shipped, upload_limit_mb
from ..sources.classmode import allowed_path, uploads_allowed
from ..widgets import plain

CONFIG = "config.yaml"
LAYER_FILE = re.compile(r"layer_\d{1,4}\.safetensors")
PATH, UPLOAD = "a transcoder folder…", "upload transcoders…"
_UPLOADS = Path(tempfile.mkdtemp(prefix="gptviz-transcoders-"))  # this process's uploaded sets, by hash


def shipped_sets(source: str) -> dict[str, str]:
    """Name -> folder of the transcoder sets shipped beside a shipped checkpoint."""
    if source not in shipped():
        return {}
    root = checkpoints_dir() / source / "transcoders"
    if (root / CONFIG).is_file():
        return {"transcoders": str(root)}
    try:
        return {p.name: str(p) for p in sorted(root.iterdir()) if (p / CONFIG).is_file() and p.name.isprintable()}
    except OSError:
        return {}


def checkpoint_of(source: str) -> Path:
    """The sidebar's checkpoint as a folder path (a shipped name's folder; an upload's own name)."""
    try:
        return checkpoint_path(source)
    except GptvizError:
        return Path(source)


def set_version(path: str) -> str:
    """When a transcoder folder's files last changed: part of every cache key of the set."""
    try:
        return str(max(p.stat().st_mtime_ns for p in Path(path).iterdir()))
    except (OSError, ValueError):
        return ""


def _save_upload(files) -> str:
    """The uploaded files (already sized by the uploader) in a folder named by their hash; raises
    GptvizError, one line, for names that are not a transcoder set's."""
    names = [f.name for f in files]
    odd = [n for n in names if n != CONFIG and not LAYER_FILE.fullmatch(n)]
    if odd or CONFIG not in names:
        what = repr(odd[0][:60]) if odd else "config.yaml"
        raise GptvizError(f"{what}: a transcoder set is config.yaml and layer_N.safetensors files")
    ordered = sorted(files, key=lambda f: f.name)
    digest = hashlib.sha256(b"".join(f.name.encode() + f.getvalue() for f in ordered)).hexdigest()
    folder = _UPLOADS / digest[:32]
    if not folder.is_dir():
        part = Path(tempfile.mkdtemp(dir=_UPLOADS))
        for f in files:
            (part / f.name).write_bytes(f.getvalue())
        part.rename(folder)
    return str(folder)


def pick_transcoders(source: str) -> tuple[str | None, str]:
    """The page's transcoder control: (the folder to load, how the page names it), or (None, "")."""
    sets = shipped_sets(source)
    options = [*sets, PATH, UPLOAD]
    choice = st.selectbox(
        "Transcoders",
        options,
        key="graph_tcs",
        format_func=lambda o: f"{o} (shipped)" if o in sets else o,
        help="One transcoder per MLP layer, in circuit-tracer's layout (config.yaml + layer_N.safetensors): "
        "trained with gptviz transcoders train, or downloaded",
    )
    if choice in sets:
        return sets[choice], choice
    if choice == PATH:
        path = st.text_input("Transcoder folder", key="graph_tcs_path").strip()
        if not path:
            return None, ""
        try:
            return str(allowed_path(path)), path
        except GptvizError as e:
            st.error(f"Cannot use that folder: {plain(e)}")
            return None, ""
    if not uploads_allowed() or upload_limit_mb() == 0:
        st.info("Uploads are off on this server: pick shipped transcoders or a folder.")
        return None, ""
    files = st.file_uploader(
        f"Transcoder files (up to {upload_limit_mb()} MB)",
        accept_multiple_files=True,
        key="graph_tcs_upload",
        max_upload_size=upload_limit_mb(),
    )
    if not files:
        return None, ""
    try:
        return _save_upload(files), "upload: " + ", ".join(f.name for f in files[:4])
    except GptvizError as e:
        st.error(f"Transcoders not used: {plain(e)}")
        return None, ""


@cached(max_entries=4, show_spinner="Loading the transcoders…")
def _load(path: str, version: str, model: ModelKey):
    from ...transcoders import load_transcoders

    try:
        tcs = load_transcoders(path)
        bundle = bundle_for(model)
        tcs.check_fits(bundle.model)
        return tcs.to(bundle.model.device)
    except (GptvizError, OSError, ValueError) as e:
        return str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def transcoders_for(path: str, model: ModelKey):
    """The transcoders at `path` for this model, loaded once per process; or why not, in one line."""
    return _load(path, set_version(path), model)


@cached(max_entries=4, show_spinner=False)  # the page's own progress bar says more
def graph(
    key: RunKey,
    tcs_path: str,
    targets: tuple[int, ...] | None,
    node_threshold: float,
    edge_threshold: float,
    max_feature_nodes: int | None,
    _progress: ProgressFn | None = None,
) -> Graph | str:
    """attribution_graph of one run under the transcoders at tcs_path; or why not, in one line."""
    tcs = transcoders_for(tcs_path, key.model)
    if isinstance(tcs, str):
        return tcs
    bundle = bundle_for(key.model)
    try:
        return attribution_graph(
            bundle.model,
            tcs,
            list(key.ids),
            targets=None if targets is None else list(targets),
            node_threshold=node_threshold,
            edge_threshold=edge_threshold,
            progress=_progress,
            tokenizer=bundle.tokenizer,
            max_feature_nodes=max_feature_nodes,
        )
    except GptvizError as e:
        return str(e)


def logit_effect(key: RunKey, tcs_path: str, layer: int, feature: int, k: int = 8) -> tuple[list, list]:
    """A feature's decoder row through the unembedding: its top promoted and suppressed token ids with values."""
    tcs = transcoders_for(tcs_path, key.model)
    model = bundle_for(key.model).model
    with torch.no_grad():
        effect = model.lm_head.weight.float() @ tcs[layer].W_dec[feature].float().to(model.device)
    up, down = torch.topk(effect, k), torch.topk(-effect, k)
    return list(zip(up.indices.tolist(), up.values.tolist())), list(zip(down.indices.tolist(), (-down.values).tolist()))


@cached(max_entries=8, show_spinner="Running with the feature edited…")
def edited_top(key: RunKey, tcs_path: str, layer: int, feature: int, pos: int, how: str | float, k: int = 8):
    """(top k before, top k after) at the last position: (token id, probability) pairs, with feature
    `feature` of layer `layer` at position `pos` zeroed or clamped (the transcoder's error kept)."""
    tcs = transcoders_for(tcs_path, key.model)
    bundle = bundle_for(key.model)
    base = run_trace(key)
    with FORWARD:
        edited = trace(
            bundle.model, list(key.ids), bundle.tokenizer, [edit_features(tcs[layer], [feature], how, [pos])]
        )

    def top(t) -> list[tuple[int, float]]:
        logits = torch.tensor(np.array(t.part("logits", -1)), dtype=torch.float64)
        p = torch.softmax(logits, -1)
        best = torch.topk(p, k)
        return list(zip(best.indices.tolist(), best.values.tolist()))

    return top(base), top(edited)


def open_clicked_node(chart_key: str):
    """An on_select callback for the graph: the clicked marker's node id (its customdata) becomes the node shown."""

    def open_it() -> None:
        points = st.session_state[chart_key].selection.get("points") or []
        data = points[0].get("customdata") if points else None
        if isinstance(data, str):
            st.session_state["graph_node"] = data

    return open_it


def download_json(g: Graph, key: str) -> None:
    """A button that saves the graph as circuit-tracer's graph JSON (Neuronpedia's viewer opens it)."""
    text = json.dumps(graph_json(g, "gptviz-graph", "gptviz"), ensure_ascii=False)
    st.download_button(
        "⬇ graph (circuit-tracer JSON)",
        text,
        file_name="attribution_graph.json",
        mime="application/json",
        key=key,
        on_click="ignore",
    )
