"""The process-wide caches. One model per checkpoint version and device, one Trace per run, each
shared by every browser session: all of them are read-only (a Trace's arrays refuse writes), so
one object serves every session without the pickle round trip st.cache_data would pay per rerun.

A RunKey names a run: the checkpoint (source, device, version) and the token ids. Widgets that
only change the view (layer, head, position, temperature, page) never change the key, so they
never re-run the model.

Memory is bounded by the entry counts below and nothing else holds a Trace once a script run is
over (download buttons copy what they offer; the View is dropped at the end of each run), so the
server's memory plateaus at about models × model size + runs × Trace size. Set the counts with
$GPTVIZ_CACHE_MODELS and $GPTVIZ_CACHE_RUNS before the server starts (README, "Memory").
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from .. import analysis, figures
from ..analysis.attention import attention_mask, attention_row
from ..analysis.map_blocks import MapBlocks
from ..capture import select, trace
from ..errors import CheckpointError, GptvizError
from ..figures.attention import GRID_TILE, MAX_CELLS, mark_tile
from ..formats import Bundle, MemoryPath, load
from ..formats.demo import demo_bundle
from ..progress import Cancelled, ProgressFn, Reporter
from ..record import Trace
from .memory import fix_mmap_threshold
from .pages import run_names
from .sources import uploads
from .sources.checkpoints import DEMO, checkpoint_path

fix_mmap_threshold()  # before the first Trace: evicted ones must leave the process

log = logging.getLogger("gptviz.dashboard")


def _entries(env: str, default: int) -> int:
    raw = os.environ.get(env, "").strip()
    return max(1, int(raw)) if raw.isascii() and raw.isdigit() else default


MODELS_ENV, RUNS_ENV = "GPTVIZ_CACHE_MODELS", "GPTVIZ_CACHE_RUNS"
MODEL_ENTRIES = _entries(MODELS_ENV, 4)  # loaded checkpoints (and remembered load failures)
RUN_ENTRIES = _entries(RUNS_ENV, 4)  # Traces; the per-run grid and loss caches keep as many


def text_bytes(text: str) -> bytes:
    """A string as the caches hash it, whatever it holds: a file name that is not valid UTF-8 comes
    from a folder listing as lone surrogates, which str.encode() (Streamlit's own hashing) refuses."""
    return text.encode("utf-8", "surrogatepass")


def key_bytes(key: ModelKey | RunKey | SAEKey) -> bytes:
    """A key as the caches hash it: its repr names every field (strings quoted), in a hundredth of the
    time Streamlit takes to walk the dataclass field by field (0.2 ms a call, a dozen calls a run)."""
    return text_bytes(repr(key))


def cached(**kwargs):
    """st.cache_resource for every cache of the dashboard, hashing any string (text_bytes) and key.
    Such a function must not be called while its thread holds FORWARD: Streamlit computes a value
    under a lock of that key, which every other path takes before FORWARD, so the reverse order could
    leave two sessions waiting on each other for good (two students generating the same text). The
    call raises instead."""

    def wrap(fn):
        cache = st.cache_resource(hash_funcs=HASH_FUNCS, **kwargs)(fn)

        @functools.wraps(fn)
        def call(*args, **kw):
            if FORWARD._is_owned():  # RLock's own check (CPython's threading.Condition uses it)
                raise RuntimeError(f"{fn.__name__} was called holding caches.FORWARD: take it after, not around")
            return cache(*args, **kw)

        call.clear = cache.clear
        return call

    return wrap


@dataclass(frozen=True)
class ModelKey:
    source: str  # a shipped name, "demo", a path, or "upload:<content hash>"
    device: str
    version: str = ""  # sources.version: the files' times, so a rewritten checkpoint loads again
    owner: str = ""  # an upload's session token (sources/uploads.py): only that session's keys reach its model
    dtype: str = "auto"  # what the model computes in: one model per dtype


@dataclass(frozen=True)
class RunKey:
    model: ModelKey
    ids: tuple[int, ...]
    names: tuple[str, ...] | None = None  # what the run keeps (gptviz.trace's names=); None: every name


@dataclass(frozen=True)
class SAEKey:
    """An SAE the sidebar picked (dashboard/sources/saes.py): a path (a shipped SAE's folder, or typed) or an
    upload held in its session's memory, named like a checkpoint's (sources/uploads.py)."""

    source: str  # a path, or "upload:<content hash>"
    owner: str = ""  # an upload's session token: only that session's keys reach its SAE
    version: str = ""  # the files' times, so an SAE trained again in place loads again
    site: str = ""  # where a Gemma Scope SAE reads, named in the sidebar (load_sae's site=); "": its files say


HASH_FUNCS = {str: text_bytes, ModelKey: key_bytes, RunKey: key_bytes, SAEKey: key_bytes}


@cached(max_entries=MODEL_ENTRIES, show_spinner="Loading the checkpoint…")
def load_bundle(key: ModelKey, _progress: ProgressFn | None = None) -> Bundle | str:
    """One model per (checkpoint, device, dtype, version) per process, shared by every session: read-only
    (an upload's only by its own session). A checkpoint that cannot be loaded gives the one-line
    reason instead, remembered like a model, so a bad file is not read again on every rerun (a new
    version of it is tried afresh). Raises CheckpointError only for an upload that this session
    does not hold (not remembered). _progress: gptviz.load's reports (not part of the key; the
    sidebar's progress.bar draws them); a Cancelled passes through, not remembered."""
    label = ""  # an upload's files in memory and their names; else the path is checkpoint_path's
    path: MemoryPath | None = None
    if uploads.is_upload(key.source):
        upload = uploads.owned(key.owner, key.source)
        if upload is None:
            raise CheckpointError(
                "this session holds no such upload: choose 'upload a checkpoint…' and upload the files"
            )
        path, label = upload.path, upload.label
    try:
        if key.source == DEMO:
            return demo_bundle(key.device)
        bundle = load(
            path if path is not None else checkpoint_path(key.source), key.device, key.dtype, progress=_progress
        )
    except Cancelled:
        raise  # not a reason to remember: the next visit loads it again
    except GptvizError as e:
        return str(e)
    except Exception as e:  # a loader bug or an out-of-memory must not become a page of traceback
        log.exception("loading %s failed", key.source)
        return f"{type(e).__name__} while loading: {str(e)[:300]}"
    if label:
        bundle = replace(bundle, report=replace(bundle.report, path=label))
    return bundle


def bundle_for(key: ModelKey, progress: ProgressFn | None = None) -> Bundle:
    """The loaded bundle, or CheckpointError with the remembered reason. progress: the load's reports,
    where it is not cached yet."""
    loaded = load_bundle(key, _progress=progress)
    if isinstance(loaded, str):
        raise CheckpointError(loaded)
    return loaded


# One forward pass at a time in this process. torch already spreads one over every core; passes run
# side by side from many sessions' threads hand the GIL back and forth at every operation, and the
# handing over cost more than the passes: 30 students' prompts at once took 2.5 times the CPU of the
# same runs one after another. Taken by run_trace, the what-if runs (panels/edited_runs.py), a real model's slide and
# the leaky model's report, and each of Generate's steps (30 students pressing Generate 20 at once: p95
# 4.0-4.4 -> 2.2-2.7 s, gptviz bench --classroom -- --generate); a long job (a patching sweep) does not take it. Nothing
# cached is called while it is held (cached() says why).
FORWARD = threading.RLock()


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the model…")
def run_trace(key: RunKey, _progress: ProgressFn | None = None) -> Trace:
    """The Trace of one run. It holds the activations (attention maps are rebuilt from q and k
    when a view asks), so a few entries stay small. _progress: the blocks run (not part of the key)."""
    bundle = bundle_for(key.model)
    with FORWARD:
        t = trace(bundle.model, list(key.ids), bundle.tokenizer, names=key.names, progress=_progress)
    _remember(key, t)
    return t


# --- a page's run: what it reads, or any cached run of the prompt that holds it -------------------
# A full Trace of a 1B model at T = 1,024 holds 0.5 GB, the Overview's run 0.18 GB (bench --trace-memory).
# Below this many MB a run keeps every name, so one run serves every page (a small model's full Trace
# is smaller than what a second run would cost); above, each page's run keeps what the page reads, and
# a page switch runs the model again only when no cached run of the prompt holds what the new page reads.
FULL_RUN_ENV, FULL_RUN_MB = "GPTVIZ_FULL_RUN_MB", 128


def full_run_limit() -> int:
    """Bytes up to which a run keeps every name (read at each run, so a test or a server can set it)."""
    raw = os.environ.get(FULL_RUN_ENV, "").strip()
    return (int(raw) if raw.isascii() and raw.isdigit() else FULL_RUN_MB) * 2**20


def full_run_bytes(config, n_tokens: int, itemsize: int) -> int:
    """About what a Trace of every name holds: per block resid_pre, q, k, v, z (resid_post is the next
    block's resid_pre; the maps, the sub-layer outputs and the logits are rebuilt), plus embed and ln_f."""
    C, q, kv = config.n_embd, config.n_head * config.head_dim, config.kv_heads * config.head_dim
    return n_tokens * (config.n_layer * (C + 2 * q + 2 * kv) + 2 * C) * itemsize


_runs_lock = threading.Lock()
_runs: OrderedDict[RunKey, frozenset[str]] = OrderedDict()  # recent runs -> the names their Trace answers


def _remember(key: RunKey, t: Trace) -> None:
    with _runs_lock:
        _runs[key] = frozenset(t.names)
        _runs.move_to_end(key)
        while len(_runs) > 4 * RUN_ENTRIES:  # the cache's own entries, and a few it may have let go
            _runs.popitem(last=False)


def page_run_key(model: ModelKey, ids: tuple[int, ...], reads: tuple[str, ...] | None, config, itemsize: int) -> RunKey:
    """The run a page reads: a full one when it is small (full_run_limit), else a recent run of the same
    prompt that answers every name the page reads, else a new one of what the page reads (and what that
    holds anyway: capture.answerable). reads: the page's PageSpec.reads; None: every name."""
    if reads is None or full_run_bytes(config, len(ids), itemsize) <= full_run_limit():
        return RunKey(model, ids)
    needed = select(reads, config.n_layer)
    with _runs_lock:
        for key in reversed(_runs):  # the most recent first
            if key.model == model and key.ids == ids and (key.names is None or needed <= _runs[key]):
                return key
    return RunKey(model, ids, run_names(reads, config.n_layer))


def clear_runs() -> None:
    """Forget the recent runs (with st.cache_resource.clear(): a cold start)."""
    with _runs_lock:
        _runs.clear()


@cached(max_entries=RUN_ENTRIES, show_spinner="Summarising every head…")
def layer_head_grid(key: RunKey, _progress: ProgressFn | None = None) -> go.Figure:
    """The layer × head overview of one run, built once: every layer's maps in tiles of block means,
    made from q and k a band of query rows at a time (never a whole map held). _progress: each layer
    (not part of the key; the page's progress.waited bar draws it)."""
    t = run_trace(key)
    b = analysis.block_side(t.n_tokens, GRID_TILE)
    reporter = Reporter(_progress, "layers", total=t.n_layer)
    reporter.start()

    def layers() -> Iterator[MapBlocks]:
        for l in range(t.n_layer):
            yield analysis.weight_blocks(t, l, b)
            reporter.tick()

    return figures.layer_head_grid(layers())


@cached(max_entries=RUN_ENTRIES, show_spinner=False)
def prompt_loss(key: RunKey) -> pd.DataFrame:
    """The per-token loss of one run, built once: a pass over all T × V logits (0.4 s at T = 1024
    with GPT-2's vocabulary) that a temperature or top-k change must not repeat. Read-only."""
    t = run_trace(key)
    return analysis.per_token_loss(t.tensor("logits"), t.token_ids)


# --- figures, built and styled once per process -------------------------------------------------
# A page view with a cached run spent most of its server time building Plotly figures and styling
# them (tens of ms each): pure work on a read-only Trace. The figures a class opens together are
# built once here for every session, keyed by the run and the choices; st.plotly_chart only
# serialises them. Read-only: nothing may change a figure it gets from here.
FIGURE_ENTRIES = 4 * RUN_ENTRIES  # per kind of figure: a class looks at a few heads of one run
# A builder names the tokens with what the page holds with the run (View.labels: its axis labels,
# View.display: any id as its tokenizer shows it), never by looking the checkpoint up again. Both are
# functions of the run's key, so they are not part of the cache key (Streamlit hashes no argument
# whose name starts with an underscore).
Display = Callable[[Sequence[int]], list[str]]


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def topk_figure(key: RunKey, k: int, presentation: bool, _labels: Sequence[str], _display: Display) -> go.Figure:
    """The next-token bars at the last position of one run."""
    top = analysis.top_k(run_trace(key).part("logits", -1), k, display=_display)
    return figures.presentation(figures.topk_bars(top, position_label=_labels[-1]), presentation)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def head_figure(
    key: RunKey, layer: int, head: int, height: int, presentation: bool, _labels: Sequence[str]
) -> go.Figure:
    """One head's attention weights on one run."""
    t = run_trace(key)
    fig = figures.attention_heatmap(
        analysis.weight_blocks(t, layer, analysis.block_side(t.n_tokens, MAX_CELLS), heads=[head]),
        list(_labels),
        title=f"Layer {layer}, head {head}: attention weights",
        height=height,
    )
    return figures.presentation(fig, presentation)


HEAD_GRID_CELLS = 64  # a side of each head's tile in a layer's small multiples (figures.head_grid's default)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)  # the page's progress.waited bar says more
def attention_figures(
    key: RunKey,
    layer: int,
    head: int,
    kind: str,
    skip_first: bool,
    presentation: bool,
    _labels: Sequence[str],
    _progress: ProgressFn | None = None,
):
    """The Attention page's head heatmap (of `kind`) and its layer's every head, for one run.
    _progress: each of the two maps made (not part of the key)."""
    t = run_trace(key)
    reporter = Reporter(_progress, "maps", total=2)
    reporter.start()
    labels, T, mask = list(_labels), t.n_tokens, None
    b = analysis.block_side(T, MAX_CELLS)
    m: MapBlocks | np.ndarray  # block means (which carry their mask), or every cell the Trace holds
    if kind == "weights":
        m = analysis.weight_blocks(t, layer, b, heads=[head])
    elif b > 1:  # a band of rows at a time: a Trace's scores would be the layer's every [T, T] map
        m = analysis.score_blocks(t, layer, b, heads=[head], kind=kind)
    else:
        m, mask = analysis.attention_matrix(t, layer, head, kind), attention_mask(t, layer)
    reporter.tick()
    # the weights as block means made a band of rows at a time: no layer's [H, T, T] maps held
    every_head = analysis.weight_blocks(t, layer, analysis.block_side(T, HEAD_GRID_CELLS))
    reporter.tick()
    title = f"Layer {layer}, head {head}: {kind}"
    model = bundle_for(key.model).model
    spec = model.transformer.h[layer].attn.spec  # this layer's own scale and soft-cap
    rule = analysis.score_rule(spec.scale, spec.softcap, model.config.head_dim)
    one = figures.attention_heatmap(
        m, labels, kind=kind, skip_first_key=skip_first, title=title, mask=mask, score_rule=rule, clickable=True
    )
    every = figures.head_grid(every_head, labels, layer=layer, cols=2 if presentation else 4)
    return figures.presentation(one, presentation), figures.presentation(every, presentation)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def lines_figure(
    key: RunKey, layer: int, head: int, position: int, presentation: bool, _labels: Sequence[str]
) -> go.Figure:
    """Where one query looks: the Attention page's line view (that query's row alone is made)."""
    row = attention_row(run_trace(key), layer, head, position)
    return figures.presentation(figures.attention_lines(row, list(_labels), position), presentation)


@cached(max_entries=FIGURE_ENTRIES, show_spinner=False)
def marked_grid(key: RunKey, layer: int, head: int, presentation: bool) -> go.Figure:
    """The layer × head overview with the head on view outlined, styled."""
    return figures.presentation(mark_tile(layer_head_grid(key), layer, head), presentation)


def attention_arrays(key: RunKey, layer: int, head: int, kind: str, texts: tuple[str, ...]) -> dict[str, np.ndarray]:
    """One head's whole [T, T] matrix of `kind` and the tokens, as its download offers them: made when the
    button is pressed (widgets.download_later), from the run the caches hold (run again if they let it go)."""
    matrix = analysis.attention_matrix(run_trace(key), layer, head, kind)
    return {kind.replace(" ", "_"): matrix, "tokens": np.array(texts)}
