"""Caches and choices of the Compare and Timeline pages.

Compare draws one head's maps of two runs and their difference as block means made a band of query
rows at a time (head_figures), and its per-position tables once per pair of runs (token_tables): a long
prompt costs what the page draws, never two runs' every [T, T] map.

A timeline runs the prompt through every checkpoint of a run (one at a time): it is built once per
(folder, its contents, prompt, device) and shared read-only by every session, like the Traces in
caches.py. What a rerun costs is bounded whatever else the folder holds: the folder's own stat,
then a stat of each step's files (folder_stamp, steps_version); the listing itself is read once
per change of the folder, within gptviz.listing's bounds. A step's attention and a second
checkpoint's Trace go through caches.run_trace, so they share its limits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from ... import figures
from ...analysis import compare
from ...analysis.map_blocks import block_side, difference_blocks, weight_blocks
from ...errors import GptvizError
from ...figures.attention import MAX_CELLS, attention_heatmap
from ...figures.compare import attention_difference_heatmap
from ...figures.style import wrap_name
from ...formats import Bundle
from ...formats.native import is_native
from ...formats.safe import read_json
from ...progress import Cancelled, ProgressFn, Reporter
from ...timeline import RunScan, RunStep, Timeline, is_run_folder, load_run_step, scan_run, timeline
from ...tokenizers import Tokenizer
from ..caches import RUN_ENTRIES, ModelKey, RunKey, bundle_for, cached, run_trace
from ..sources.checkpoints import checkpoint_path, checkpoints_dir, path_version, shipped, version
from ..sources.classmode import allowed_path

TIMELINE_ENTRIES = 2  # each holds a few small tables: steps × heads rows


# (folder, its stamp) -> whether it is a run folder: asked on every rerun of Compare and Timeline
_RUN_FOLDERS: dict[tuple[str, str], bool] = {}


def run_folders() -> list[str]:
    """The shipped checkpoints that are run folders (step-NNNNNN/ snapshots inside); each folder is
    listed again only when it changes."""
    names = []
    for name in shipped():
        folder = checkpoints_dir() / name
        key = (str(folder), folder_stamp(folder))
        if key not in _RUN_FOLDERS:
            if len(_RUN_FOLDERS) > 256:  # stale stamps of folders that changed
                _RUN_FOLDERS.clear()
            _RUN_FOLDERS[key] = is_run_folder(folder)
        if _RUN_FOLDERS[key]:
            names.append(name)
    return names


def folder_path(choice: str) -> Path:
    """A shipped run's name -> its folder; anything else is a path as typed, or CheckpointError in
    one line for one no folder can have (a NUL byte) or one a class server does not open."""
    return checkpoints_dir() / choice if choice in shipped() else allowed_path(choice)


def folder_stamp(folder: Path) -> str:
    """What changes when a run saves another step: the folder's own time (an entry added, removed or
    renamed changes it). One stat, however many files the folder holds."""
    try:
        st_ = folder.stat()
    except (OSError, ValueError):
        return ""
    return f"{st_.st_mtime_ns}:{st_.st_ino}"


@cached(max_entries=8, show_spinner="Listing the run's checkpoints…")
def scan_of(folder: str, stamp: str) -> RunScan | str:
    """The run's steps and notes, or the one-line reason it is no run (remembered, like a failed load)."""
    try:
        return scan_run(folder)
    except GptvizError as e:
        return str(e)


def steps_of(folder: str, stamp: str) -> list[RunStep] | str:
    """The run's steps, or the one-line reason it is no run."""
    scan = scan_of(folder, stamp)
    return scan if isinstance(scan, str) else scan.steps


def steps_version(steps: list[RunStep]) -> str:
    """When the steps' own files last changed (a checkpoint rewritten in place): a few stats per step."""
    return "|".join(path_version(s.path) for s in steps)


@cached(max_entries=4, show_spinner="Loading the run's first checkpoint…")
def first_bundle(folder: str, stamp: str, steps_stamp: str = "") -> Bundle | str:
    """The first step's checkpoint: its tokenizer encodes the timeline's prompt."""
    steps = steps_of(folder, stamp)
    if isinstance(steps, str):
        return steps
    try:
        return load_run_step(steps[0], folder)
    except GptvizError as e:
        return str(e)


@cached(max_entries=TIMELINE_ENTRIES, show_spinner=False)  # the page's own progress bar says more
def run_timeline(
    folder: str,
    stamp: str,
    ids: tuple[int, ...],
    device: str,
    steps_stamp: str = "",
    _progress: ProgressFn | None = None,
) -> Timeline | str:
    """The timeline of one run on one prompt, or the one-line reason there is none. _progress: reports
    each checkpoint scored (not part of the cache key; the page's progress.step draws it with a Cancel)."""
    scan = scan_of(folder, stamp)
    if isinstance(scan, str):
        return scan
    try:
        return timeline(folder, list(ids), device, progress=_progress, scan=scan)
    except Cancelled:
        raise  # not a reason to remember: the next visit runs it again
    except GptvizError as e:
        return str(e)


# --- Compare: what the page draws of two runs, made once per pair (and head), never a whole map ----------
@cached(max_entries=4 * RUN_ENTRIES, show_spinner=False)  # the page's progress.waited bar says more
def head_figures(
    key_a: RunKey,
    key_b: RunKey,
    layer: int,
    head: int,
    names: tuple[str, str],
    presentation: bool,
    _labels: tuple[Sequence[str], Sequence[str]],
    _progress: ProgressFn | None = None,
) -> tuple[go.Figure, go.Figure, go.Figure]:
    """One head's weights in A and in B, and A − B over A's mask, styled: block means (at most MAX_CELLS a
    side) made a band of query rows at a time from each run's q and k, as the Attention page's heatmap,
    never from [T, T] maps. names: the runs' titles; _labels: each run's token labels (functions of the
    keys). _progress: each of the three maps (not part of the key)."""
    a, b = run_trace(key_a), run_trace(key_b)
    side = block_side(a.n_tokens, MAX_CELLS)
    reporter = Reporter(_progress, "maps", total=3)
    reporter.start()
    made = []
    for trace, labels, name in zip((a, b), _labels, names, strict=True):
        blocks = weight_blocks(trace, layer, side, [head])
        made.append(attention_heatmap(blocks, list(labels), title=wrap_name(name), height=520))
        reporter.tick()
    diff = difference_blocks(a, b, layer, side, [head])
    made.append(attention_difference_heatmap(diff, list(_labels[0]), title="A − B"))
    reporter.tick()
    one, other, both = (figures.presentation(f, presentation) for f in made)
    return one, other, both


@cached(max_entries=RUN_ENTRIES, show_spinner="Comparing the next tokens…")
def token_tables(key_a: RunKey, key_b: RunKey) -> tuple[pd.DataFrame, pd.DataFrame]:
    """next_token_divergence (named by A's tokenizer) and loss_comparison of two runs of the same length,
    once per pair: passes over T × V logits that a window or head choice must not repeat. Read-only, shared."""
    a, b = run_trace(key_a), run_trace(key_b)
    tokenizer = bundle_for(key_a.model).tokenizer
    return compare.next_token_divergence(a, b, tokenizer), compare.loss_comparison(a, b)


def attention_change(key_a: RunKey, key_b: RunKey) -> pd.DataFrame:
    """analysis.compare.attention_change of two runs, for the page's download (made when it is pressed)."""
    return compare.attention_change(run_trace(key_a), run_trace(key_b))


def step_run_key(step: RunStep, device: str, ids: tuple[int, ...]) -> RunKey:
    """The cache key of one step's Trace (caches.run_trace loads the step's folder by path)."""
    source = str(step.path)
    return RunKey(ModelKey(source, device, version(source)), ids)


def shape_of(source: str) -> tuple[int, int, int] | None:
    """(layers, heads, vocabulary) of a gptviz-format checkpoint (a shipped name or a folder path)
    from its config.json alone, no weights read: how Compare finds a B that fits A without loading
    every candidate. None for another format or a config that does not read."""
    try:
        folder = checkpoint_path(source)
        if not is_native(folder):
            return None
        config = read_json(folder / "config.json")["config"]
        shape = (config["n_layer"], config["n_head"], config["vocab_size"])
    except (GptvizError, OSError, AttributeError, KeyError, TypeError):
        return None
    return shape if all(isinstance(n, int) for n in shape) else None


def probe_prompt(tokenizer: Tokenizer | None, vocab_size: int, length: int = 12, seed: int = 0) -> str:
    """A random sequence of the vocabulary's plain symbols said twice: the prompt that shows an
    induction head (it can only predict the second half by finding the first). Ids when there is no
    tokenizer."""
    rng = random.Random(seed)
    if tokenizer is None:
        ids = [rng.randrange(vocab_size) for _ in range(length)]
        return ", ".join(map(str, ids + ids))
    plain = [
        i for i in range(min(vocab_size, 5000)) if tokenizer.decode([i]).strip() and len(tokenizer.decode([i])) == 1
    ]
    pool = plain or list(range(vocab_size))
    half = "".join(tokenizer.decode([rng.choice(pool)]) for _ in range(length))
    return half + half
