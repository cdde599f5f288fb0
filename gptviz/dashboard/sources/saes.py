"""The SAE in the sidebar: one choice every page that reads features shares (Features, the steering
panel, Interventions, Generate), kept in the URL like the checkpoint (?sae=NAME | PATH | upload | none).

A shipped SAE is a folder checkpoints/<checkpoint>/saes/<name> and is picked by its name; a path is
typed (a class server opens only its data roots, classmode.py); an upload is cfg.json +
sae_weights.safetensors (SAELens) or params.npz / params.safetensors (Gemma Scope), held in the
session's memory like an uploaded checkpoint (uploads.py), sized before anything is read. A Gemma
Scope file says nothing of where it reads: unless its path does (layer_12/, -res), two boxes under
it name the layer and the site, as load_sae's site= does. Nothing is loaded here: a page that reads
features asks features.require_sae, which loads and checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import streamlit as st

from ...errors import CheckpointError, GptvizError
from ...features.files import CFG, GEMMA_FILES, WEIGHTS, gemma_site
from ...formats.safe import shown_name
from ...names import point
from .. import keys
from ..caches import SAEKey
from ..widgets import plain
from . import uploads
from .checkpoints import UPLOAD_LIMIT_ENV, upload_limit_mb
from .classmode import UPLOADS_ENV, allowed_path, class_mode, upload_total_bytes, uploads_allowed
from .sae_choice import URL_WORDS, SAEPick, default_sae, shipped_path, shipped_saes

SAE_FILES = (CFG, WEIGHTS, *GEMMA_FILES)  # the only names an SAE upload may hold
SAE_HELP = (
    "A sparse autoencoder on this checkpoint: SAELens's format (cfg.json + sae_weights.safetensors) or "
    "Gemma Scope's params.npz. The Features page, the steering panel, Interventions and Generate read it."
)


# Gemma Scope's three kinds of SAE (its folders' -res, -mlp, -att) and the sites they read (files.gemma_site)
GEMMA_SITES = {"resid_post": "residual stream (res)", "mlp.out": "MLP output (mlp)", "attn.z": "attention (att)"}


def _owner() -> uploads.SessionUploads:
    return uploads.session_owner(keys.SAE_UPLOADS)  # its own: an SAE upload does not replace the checkpoint's


def _upload(layers: Callable[[], int | None]) -> tuple[SAEKey | None, str]:
    limit = upload_limit_mb()
    if limit == 0 or not uploads_allowed():
        why = f"{UPLOAD_LIMIT_ENV}=0" if limit == 0 else f"a class server; its teacher can set {UPLOADS_ENV}=1"
        st.sidebar.info(f"Uploads are off on this server ({why}): pick a shipped SAE.")
        return None, ""
    files = st.sidebar.file_uploader(
        f"SAE files (up to {limit} MB)",
        accept_multiple_files=True,
        key="sae_upload",
        max_upload_size=limit,
        on_change=uploads.forget_carried,
        args=("sae_upload",),
    )
    if not files:
        if uploads.refusal("sae_upload"):
            st.sidebar.error(f"SAE upload not used: {plain(uploads.refusal('sae_upload'))}")
            return None, ""
        upload = uploads.carried_over("sae_upload", _owner())
        if upload is None:
            return None, ""
        st.sidebar.caption(plain(uploads.carried_note(upload)))
    else:
        odd = [f.name for f in files if f.name not in SAE_FILES]
        try:
            if odd:
                raise CheckpointError(f"{odd[0][:60]!r} is not an SAE file; upload {', '.join(SAE_FILES)}")
            upload = _owner().save(files, limit, UPLOAD_LIMIT_ENV, upload_total_bytes() if class_mode() else None)
        except GptvizError as e:
            uploads.refuse("sae_upload", files, str(e))  # its bytes go now, not when the session ends
            st.sidebar.error(f"SAE upload not used: {plain(e)}")
            return None, ""
    key = SAEKey(upload.source, _owner().token)
    if CFG in upload.names:  # SAELens's cfg.json names its own site
        return key, upload.label
    return _with_site(key, layers), upload.label


def _gemma_without_site(path: str) -> bool:
    """Whether a typed path is a Gemma Scope file (or a folder of one) whose path names no layer."""
    try:
        p = allowed_path(path)
        if p.is_dir():
            gemma = not (p / CFG).is_file() and any((p / n).is_file() for n in GEMMA_FILES)
        else:
            gemma = p.name in GEMMA_FILES or p.suffix == ".npz"
    except (CheckpointError, OSError, ValueError):
        return False  # the loader says what is wrong with it
    return gemma and gemma_site(p) is None


def _with_site(key: SAEKey, layers: Callable[[], int | None]) -> SAEKey | None:
    """A Gemma Scope SAE's site from the two boxes under it, one under the other (its file says no
    layer); None, with one line saying why, until they name a layer of this model. layers(): the
    model's layer count (None: no model loaded)."""
    n = layers()
    state = st.session_state
    layer = state.get("sae_layer")
    if n is not None and isinstance(layer, int) and layer >= n:  # picked for a deeper model
        del state["sae_layer"]
        st.sidebar.error(f"Layer {layer} is not a layer of this model (0 … {n - 1}): pick the SAE's layer again.")
    layer = st.sidebar.number_input(
        "SAE's layer",
        min_value=0,
        max_value=None if n is None else n - 1,
        value=None,
        step=1,
        key="sae_layer",
        placeholder="0 …" if n is None else f"0 … {n - 1}",
        help="Gemma Scope's params.npz does not say where it reads: the layer (layer_N in its folder's name)",
    )
    # a row of its own: beside the layer box it was too narrow for its labels ("residual stream (r")
    site = st.sidebar.selectbox("Reads", tuple(GEMMA_SITES), key="sae_site", format_func=GEMMA_SITES.__getitem__)
    if layer is None:
        st.sidebar.warning(
            "Say which layer this Gemma Scope SAE reads" + (f" (0 … {n - 1})." if n is not None else ".")
        )
        return None
    return replace(key, site=point(site, int(layer)))


def pick_sae(source: str, layers: Callable[[], int | None] = lambda: None) -> tuple[SAEKey | None, str, str]:
    """The sidebar's SAE control for a checkpoint source: (the SAE picked or None, how the page names
    it, what ?sae= says: "" for the default). layers(): the model's layer count, asked only when a
    Gemma Scope file needs its layer named."""
    names = shipped_saes(source)
    options = [*names, *SAEPick]
    if st.session_state.get("sae_choice") not in options:  # a new checkpoint: its own default
        st.session_state["sae_choice"] = default_sae(source)
    choice = st.sidebar.selectbox(
        "SAE (features)",
        options,
        key="sae_choice",
        format_func=lambda o: o.value if isinstance(o, SAEPick) else f"{o} (shipped)",
        help=SAE_HELP,
    )
    url = "" if choice == default_sae(source) else URL_WORDS.get(choice, choice if isinstance(choice, str) else "")
    if choice is SAEPick.NONE:
        return None, "", url
    if choice is SAEPick.UPLOAD:
        key, label = _upload(layers)
        return key, label, url
    if choice is SAEPick.PATH:
        st.session_state.setdefault("sae_path", "")
        path = st.sidebar.text_input("SAE path", key="sae_path", help=SAE_HELP).strip()
        if not path:
            return None, "", ""
        key = SAEKey(path, version=sae_version(path))
        return (_with_site(key, layers) if _gemma_without_site(path) else key), shown_name(path), path
    path = shipped_path(source, choice)
    return SAEKey(path, version=sae_version(path)), choice, url


def sae_version(path: str) -> str:
    """When the SAE's files last changed ("" for a path that cannot be read: the loader says why)."""
    try:
        p = allowed_path(path)
        files = [p / n for n in SAE_FILES] if p.is_dir() else [p]
        stamps = [(f.name, f.stat()) for f in files if f.is_file()]
    except (CheckpointError, OSError, ValueError):
        return ""
    return ",".join(f"{name}:{s.st_mtime_ns}:{s.st_size}" for name, s in stamps)


def sae_name(path: str) -> str:
    return Path(path).name
