"""Caches for the Heads and Logit lens pages: each result computed once per run (RunKey) and what was
asked, shared by every session like the Trace it comes from. Nothing re-runs the model."""

from __future__ import annotations

import pandas as pd

from ... import analysis
from ...analysis.lens import LogitLens
from ...progress import ProgressFn
from ..caches import RUN_ENTRIES, RunKey, bundle_for, cached, run_trace


@cached(max_entries=RUN_ENTRIES, show_spinner=False)  # the page's progress.waited bar says more
def head_table(key: RunKey, _progress: ProgressFn | None = None) -> pd.DataFrame:
    """analysis.head_scores of one run (every layer's maps rebuilt once, one layer at a time).
    Shared between sessions: callers copy before changing it. _progress: each layer (not in the key)."""
    return analysis.head_scores(run_trace(key), progress=_progress)


@cached(max_entries=4 * RUN_ENTRIES, show_spinner=False)  # the page's own progress bar says more
def lens(
    key: RunKey, positions: tuple[int, ...], k: int, target: int | None = None, _progress: ProgressFn | None = None
) -> LogitLens:
    """analysis.logit_lens of one run at the given positions: a window of the prompt costs that
    window, not T × V per site. _progress: reports each site (not part of the cache key)."""
    model, t = bundle_for(key.model).model, run_trace(key)
    return analysis.logit_lens(model, t, k=k, target=target, positions=positions, progress=_progress)


@cached(max_entries=4 * RUN_ENTRIES, show_spinner=False)  # the page's own progress bar says more
def attribution(
    key: RunKey, target: int, position: int, baseline: int | None, _progress: ProgressFn | None = None
) -> pd.DataFrame:
    """analysis.logit_attribution of one run: computed once per (run, target, position, baseline), not on
    every rerun of the page (a 1B model rebuilds every layer's MLP output for it). Read-only, shared:
    callers copy before changing it. _progress: reports each layer (not part of the cache key)."""
    model, t = bundle_for(key.model).model, run_trace(key)
    return analysis.logit_attribution(model, t, target, position, baseline, progress=_progress)
