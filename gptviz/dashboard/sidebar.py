"""The shared sidebar: checkpoint, device, prompt and what to look at. It loads and runs what is
asked for and builds the View the pages read; every expected failure is a message in the page."""

from __future__ import annotations

import streamlit as st

from ..devices import COMPUTE_DTYPES, DEVICES, device_status, resolve_device
from ..errors import GptvizError, PromptError, UnknownCharacterError
from ..formats import Bundle
from ..formats.safe import shown_name
from ..progress import Cancelled
from ..tokenizers import encode_prompt, parse_ids
from . import keys, progress, uploads
from .caches import ModelKey, bundle_for, page_run_key, run_trace
from .classmode import UPLOADS_ENV, class_mode, upload_total_bytes, uploads_allowed
from .layout import sidebar_for
from .saes import pick_sae
from .sources import (
    CHECKPOINT_HELP,
    DEMO,
    UPLOAD_LIMIT_ENV,
    checkpoints_dir,
    default_checkpoint,
    listing,
    shipped_note,
    upload_limit_mb,
    version,
)
from .state import Pick, View, read_url, set_view, write_url
from .widgets import load_banner, plain

PRESENTATION_ROOT_PX = 21  # Streamlit's default root font is 16 px


def _session_uploads() -> uploads.SessionUploads:
    return uploads.session_owner(keys.UPLOADS)


def _pick_checkpoint() -> tuple[str | None, str]:
    """The chosen source and how the page names it."""
    names, unreadable = listing()
    options = [*names, *Pick]
    if st.session_state.get("ckpt_choice") not in options:
        st.session_state["ckpt_choice"] = default_checkpoint() if default_checkpoint() in names else Pick.PATH
    choice = st.sidebar.selectbox(
        "Checkpoint",
        options,
        key="ckpt_choice",
        format_func=lambda o: o.value if isinstance(o, Pick) else f"{o} (shipped)",
    )
    if unreadable:  # a name that is not text cannot be an option, a URL or a cache key: say so, once
        st.sidebar.caption(
            f"Left out of this list: {plain(', '.join(unreadable[:3]))}"
            f"{' …' if len(unreadable) > 3 else ''} in {plain(shown_name(str(checkpoints_dir())))} "
            "(a folder name that is not valid UTF-8 text); rename it to pick it."
        )
    if shipped_note():  # the checkpoints folder holds more entries than one listing reads
        st.sidebar.warning(plain(shipped_note()))
    if not names:
        st.sidebar.warning(
            f"No shipped checkpoint in {plain(shown_name(str(checkpoints_dir())))}: train one "
            "(README) or pick a path. The demo model has random weights."
        )
    if choice is Pick.PATH:
        st.session_state.setdefault("ckpt_path", "")
        path = st.sidebar.text_input("Checkpoint path", key="ckpt_path", help=CHECKPOINT_HELP).strip()
        if uploads.is_upload(path) or path in (DEMO, *names):  # typed text is always a path, never a token
            path = "./" + path
        return path or None, path
    if choice is Pick.UPLOAD:
        limit = upload_limit_mb()
        if limit == 0 or not uploads_allowed():  # a server shared with a class: no session's upload takes its memory
            why = f"{UPLOAD_LIMIT_ENV}=0" if limit == 0 else f"a class server; its teacher can set {UPLOADS_ENV}=1"
            st.sidebar.info(f"Uploads are off on this server ({why}): pick a checkpoint.")
            return None, ""
        total = upload_total_bytes() if class_mode() else None
        files = st.sidebar.file_uploader(
            f"Checkpoint files (up to {limit} MB)",
            accept_multiple_files=True,
            key="ckpt_upload",
            max_upload_size=limit,
            help=CHECKPOINT_HELP,
            on_change=uploads.forget_carried,
            args=("ckpt_upload",),
        )
        if not files:
            kept = uploads.carried_over("ckpt_upload", _session_uploads())
            if kept is not None:
                st.sidebar.caption(plain(uploads.carried_note(kept)))
                return kept.source, kept.label
            names = st.session_state.get(keys.UPLOAD_NAMES)
            if names:
                st.info(f"This link showed an upload of {plain(names)}: upload those files again to see it.")
            return None, ""
        try:
            upload = _session_uploads().save(files, limit, UPLOAD_LIMIT_ENV, total)
        except GptvizError as e:
            st.error(f"Upload not used: {plain(e)}")
            return None, ""
        st.session_state[keys.UPLOAD_NAMES] = ", ".join(upload.names)
        return upload.source, upload.label
    source = DEMO if choice is Pick.DEMO else choice
    return source, source


def _pick_device() -> str:
    status = device_status()
    st.session_state.setdefault("device", "cpu")
    captions = ["always available" if not status[d] else f"not available: {status[d]}" for d in DEVICES]
    return st.sidebar.radio("Device", DEVICES, key="device", horizontal=False, captions=captions, format_func=str.upper)


def _pick_dtype() -> str:
    st.session_state.setdefault("dtype", "auto")
    return st.sidebar.selectbox(
        "Compute dtype",
        COMPUTE_DTYPES,
        key="dtype",
        help="auto: float32 (exact) unless the model does not fit the free memory, then its stored half precision. "
        "bfloat16 and float16 take half the memory; their numbers are rounded.",
    )


def _offer(label: str, key: str, flag: str, prompt: str) -> None:
    def apply():
        st.session_state[flag] = prompt

    st.button(label, key=key, on_click=apply, type="primary")


def _encode(bundle: Bundle, prompt: str) -> list[int] | None:
    """The prompt as ids, or None after showing what is wrong and how to fix it."""
    block = bundle.model.config.block_size
    tok = bundle.tokenizer
    vocab = bundle.model.config.vocab_size
    if tok is None:  # a checkpoint without a tokenizer: the prompt is token ids
        try:
            ids = parse_ids(prompt, vocab)
        except PromptError as e:
            st.error(f"This checkpoint has no tokenizer, so the prompt is token ids: {plain(e)}")
            return None
        if len(ids) > block and st.session_state.get("fix_long") != prompt:
            st.error(f"Prompt not run: {len(ids)} ids, but the model reads at most {block}")
            _offer(f"Keep the last {block} tokens and run", "fix_long_btn", "fix_long", prompt)
            return None
        return ids[-block:]
    drop = st.session_state.get("fix_unknown") == prompt
    keep_last = st.session_state.get("fix_long") == prompt
    try:
        ids = encode_prompt(tok, prompt, block, unknown="drop" if drop else "error", keep_last=keep_last)
    except UnknownCharacterError as e:  # the library's message speaks to API users; say it for the page
        shown = ", ".join(repr(c) for c in e.chars[:20]) + (", …" if len(e.chars) > 20 else "")
        st.error(
            f"Prompt not run: the tokenizer does not know {len(e.chars)} "
            f"character(s): {plain(shown)}. Remove them, or drop them here:"
        )
        _offer(f"Drop the {len(e.chars)} unknown character(s) and run", "fix_unknown_btn", "fix_unknown", prompt)
        return None
    except PromptError as e:
        st.error(f"Prompt not run: {plain(e)}")
        if prompt and len(tok.encode(prompt, unknown="drop")) > block:
            _offer(f"Keep the last {block} tokens and run", "fix_long_btn", "fix_long", prompt)
        return None
    if drop:
        missing = sorted({c for c in prompt if not tok.encode(c, unknown="drop")})
        st.info(f"Dropped {len(missing)} unknown character(s): {plain(', '.join(map(repr, missing[:20])))}")
    if keep_last and len(tok.encode(prompt, unknown="drop")) > block:
        st.info(f"The prompt was longer than the model's context: showing its last {block} tokens")
    return ids


VIEW_CONTROLS = ("layer", "head", "position")


def _choose_view(v: View, on_page: tuple[str, ...] | None = None) -> None:
    """Layer, head and position, clamped to this model and prompt: in the sidebar, or, when on_page
    names them, at the top of the page (presentation mode folds the sidebar away, and a teacher must
    not have to open it); there only the controls the page reads, the others keep their values."""
    L, H = v.trace.n_layer, v.bundle.model.config.n_head
    T = v.trace.n_tokens
    asked = st.session_state.pop(keys.URL_VIEW, {})  # the link's values, held to this model once
    fitted = []
    for key, n in (("layer", L), ("head", H)):
        if not 0 <= st.session_state.get(key, 0) < n:
            if key in asked:
                fitted.append(f"{key} {asked[key]:,} as 0 (the model has {n})")
            st.session_state[key] = 0
        st.session_state.setdefault(key, 0)
    if (
        st.session_state.get(keys.POSITION_FOR) != (v.source, v.prompt)
        or not 0 <= st.session_state.get("position", -1) < T
    ):
        if "position" in asked and asked["position"] >= T:
            fitted.append(f"position {asked['position']:,} as {T - 1} (the prompt has {T} tokens)")
        st.session_state["position"] = T - 1  # a new prompt starts at its last token: the next-token view
        st.session_state[keys.POSITION_FOR] = (v.source, v.prompt)
    if fitted:
        st.warning(f"The link's view did not fit this model and prompt: it reads {'; '.join(fitted)}.")
    shown = on_page if on_page is not None else VIEW_CONTROLS
    if on_page is not None:
        widths = {"layer": 3, "head": 4.5, "position": 3.5}
        places = dict(zip(shown, st.columns([widths[k] for k in shown], vertical_alignment="bottom"))) if shown else {}
    else:
        st.sidebar.subheader("View")
        places = dict.fromkeys(VIEW_CONTROLS, st.sidebar)
    for key in VIEW_CONTROLS:  # a control not drawn keeps its value (Streamlit drops an undrawn widget's)
        if key not in shown:
            st.session_state[key] = st.session_state[key]
    v.layer, v.head, v.position = (st.session_state[k] for k in VIEW_CONTROLS)
    for key, n in (("layer", L), ("head", H)):
        if key in shown:
            setattr(v, key, _picker(places[key], key, n))
    if T == 1:
        v.position = 0
    elif "position" in shown:
        texts = v.texts  # as a person reads them: a widget shows its text as it is
        v.position = places["position"].select_slider(
            "Position (query token)", options=list(range(T)), key="position", format_func=lambda i: texts[i]
        )


MAX_RADIO = 12  # a row of radio buttons up to this many; a 32-layer or 32-head model gets a slider


def _picker(place, key: str, n: int) -> int:
    """The layer or head control: radio buttons for a few, a slider for many (32 layers × 32 heads)."""
    if n <= MAX_RADIO:
        return place.radio(key.title(), list(range(n)), key=key, horizontal=True)
    return place.select_slider(f"{key.title()} (of {n})", options=list(range(n)), key=key)


def _model_key(source: str, device: str, dtype: str) -> ModelKey:
    owner = _session_uploads().token if uploads.is_upload(source) else ""  # only this session's upload
    return ModelKey(source, device, version(source), owner, dtype)


def _layers(source: str | None, device: str, dtype: str) -> int | None:
    """The model's layer count, for the SAE's layer box: the bundle the sidebar loads next (cached);
    None when it cannot load (the page says why)."""
    if source is None:
        return None
    try:
        return bundle_for(_model_key(source, "cpu" if device_status()[device] else device, dtype)).model.config.n_layer
    except GptvizError:
        return None


def sidebar(view_controls: tuple[str, ...] = VIEW_CONTROLS, reads: tuple[str, ...] | None = None) -> View:
    """Draw the shared sidebar, load and run what it asks for, and return the View for the pages.
    Every expected failure is shown as a message in the page; the View then has no Trace.
    view_controls: which of layer, head and position the page reads (in presentation mode they go on it).
    reads: the names the page reads of the run (PageSpec.reads); None: every name."""
    read_url()
    st.sidebar.header("gptviz")
    source, label = _pick_checkpoint()
    device = _pick_device()
    dtype = _pick_dtype()
    with st.sidebar.form("prompt_form", border=False):
        st.text_area(
            "Prompt", key="prompt", height=100, help="Several lines are fine. Press Ctrl+Enter or Run to run the model"
        )
        st.form_submit_button("Run", key="run_btn", type="primary")
    # under the prompt: Run stays in a 1280 × 720 screen, and the SAE is read by a few pages only
    sae, sae_label, sae_url = pick_sae(source or "", lambda: _layers(source, device, dtype))
    presentation = st.sidebar.toggle("Presentation mode (larger fonts)", key="presentation")
    sidebar_for(presentation)  # fold the sidebar away on turning it on (layout.py)
    if presentation:  # Streamlit sizes its text in rem: a larger root font scales the whole page
        st.html(f"<style>html {{ font-size: {PRESENTATION_ROOT_PX}px; }}</style>")
    prompt = st.session_state.get("prompt", "")
    v = View(source=source or "", device=device, prompt=prompt, presentation=presentation, label=label, dtype=dtype)
    v.sae, v.sae_label, v.sae_url = sae, sae_label, sae_url
    set_view(v)
    if source is None:
        st.info("Choose a checkpoint in the sidebar: a local path, or upload its files.")
        return v
    if device_status()[device]:
        try:
            resolve_device(device)
        except GptvizError as e:
            st.error(f"Device not available: {plain(e)}. Showing results on CPU.")
        v.device = "cpu"
    model_key = _model_key(source, v.device, dtype)
    try:
        with progress.bar("Loading the checkpoint", "load", model_key, "Load again") as report:
            v.bundle, v.model_key = bundle_for(model_key, report), model_key  # a failure is remembered per version
    except Cancelled:
        v.cancelled = True  # the bar's place says so, with a button to load it again
        return v
    except GptvizError as e:
        st.error(f"Checkpoint not loaded: {plain(e)}")
        return v
    load_banner(v.bundle.report)
    ids = _encode(v.bundle, v.prompt)
    if ids is None:
        return v
    try:
        # a small model's one run serves every page (tests/test_app.py: switching pages never re-runs it); a
        # large one's keeps what the page reads, or is a cached run of the prompt that holds it (caches.py)
        model = v.bundle.model
        key = page_run_key(model_key, tuple(ids), reads, model.config, model.dtype.itemsize)
        with progress.bar("Running the model", "first_run", key, "Run again") as report:
            v.trace, v.key = run_trace(key, _progress=report), key
    except Cancelled:
        v.cancelled = True
        return v
    except GptvizError as e:
        st.error(f"Prompt not run: {plain(e)}")
        return v
    _choose_view(v, on_page=view_controls if presentation else None)
    write_url(v)
    return v
