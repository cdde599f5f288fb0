"""The caches of the Features page and the steering panel: SAEs loaded once per process (and
checked against the model), feature-edited and steered runs, sweeps, and a scan of the sample
corpus with an SAE. Keys are plain values (paths, a RunKey, numbers), never tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..capture import trace
from ..errors import GptvizError
from ..features import SAE, load_sae
from ..features.edits import edit_features
from ..generation import generate
from ..record import Trace
from ..scanning import Scan, scan
from ..shipped import shipped_dir
from ..steering import steer, steering_sweep, steering_vector
from .caches import FORWARD, RUN_ENTRIES, ModelKey, RunKey, bundle_for, cached
from .sources import checkpoints_dir

SAMPLE_CORPUS = "shakespeare"  # samples/<this>: the corpus a feature's contexts come from


def shipped_saes(source: str) -> list[str]:
    """The SAEs shipped beside a shipped checkpoint (checkpoints/<name>/saes/<sae>), as paths."""
    folder = checkpoints_dir() / source / "saes"
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.iterdir() if (p / "cfg.json").is_file())


@cached(max_entries=8, show_spinner="Loading the SAE…")
def sae_for(model: ModelKey, path: str) -> SAE | str:
    """The SAE at path, checked against the model (its site and width); or the one-line reason."""
    try:
        return load_sae(path, model=bundle_for(model).model)
    except GptvizError as e:
        return str(e)


def _sae(model: ModelKey, path: str) -> SAE:
    got = sae_for(model, path)
    if isinstance(got, str):
        raise GptvizError(got)
    return got


@cached(max_entries=RUN_ENTRIES, show_spinner="Running with the features edited…")
def feature_edit_run(key: RunKey, path: str, features: tuple[int, ...], how: str | float) -> Trace:
    bundle, sae = bundle_for(key.model), _sae(key.model, path)
    with FORWARD:
        return trace(bundle.model, list(key.ids), bundle.tokenizer, [edit_features(sae, list(features), how)])


@cached(max_entries=2, show_spinner="Scanning the sample corpus with the SAE (once per process)…")
def sample_scan(model: ModelKey, path: str) -> Scan:
    """The shipped sample corpus scanned with the SAE: each feature's strongest contexts and density."""
    bundle = bundle_for(model)
    return scan(bundle.model, shipped_dir("samples") / SAMPLE_CORPUS, bundle.tokenizer, k=8, saes=[_sae(model, path)])


def vector_from_pairs(model: ModelKey, pairs: tuple[tuple[str, str], ...], site: str) -> np.ndarray:
    bundle = bundle_for(model)
    with FORWARD:
        return steering_vector(bundle.model, pairs, site, bundle.tokenizer)


@cached(max_entries=RUN_ENTRIES, show_spinner="Steering every layer at every strength…")
def sweep(key: RunKey, vector: tuple[float, ...], site: str, coeffs: tuple[float, ...], target: int | None):
    bundle = bundle_for(key.model)
    with FORWARD:
        return steering_sweep(bundle.model, list(key.ids), np.asarray(vector, np.float32), site, coeffs, target)


def continuations(
    key: RunKey, vector: tuple[float, ...], site: str, coeff: float, n: int
) -> tuple[list[int], list[int]]:
    """(unsteered, steered) greedy continuations of the run's prompt, n tokens each."""
    bundle = bundle_for(key.model)
    iv = steer(site, np.asarray(vector, np.float32), coeff)
    # the lock per step, as Generate takes it
    run: dict[str, Any] = dict(temperature=0, crop_context=True, step_lock=FORWARD)
    plain = generate(bundle.model, list(key.ids), n, **run)
    steered = generate(bundle.model, list(key.ids), n, **run, interventions=[iv])
    return plain.new_ids, steered.new_ids


@cached(max_entries=RUN_ENTRIES, show_spinner="Running the steered model…")
def steered_run(key: RunKey, vector: tuple[float, ...], site: str, coeff: float) -> Trace:
    bundle = bundle_for(key.model)
    with FORWARD:
        return trace(
            bundle.model, list(key.ids), bundle.tokenizer, [steer(site, np.asarray(vector, np.float32), coeff)]
        )


def sae_label(path: str) -> str:
    return Path(path).name
