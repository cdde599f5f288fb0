"""Behaviour across data: run a corpus through the model once and keep what questions about
behaviour need (loss per token, head scores per window, each neuron's strongest contexts).

    scan = gptviz.scan(model, "corpus/", tokenizer, window=128, k=20, out="scan-out")
    scan.windows, scan.tokens, scan.neurons, scan.heads, scan.summary
    again = gptviz.load_scan("scan-out")

Flow: corpus.py reads and cuts the data, reduce.py runs and reduces one batch, local.py and
ray_engine.py are the two engines (same Partials, same merge), store.py reads and writes a folder.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analysis.heads import SCORES
from ..checks import whole
from ..errors import GptvizError
from ..features.sites import check_fits
from ..progress import ProgressFn, Reporter
from .corpus import Corpus, ScanDataError, read_corpus
from .features import FeatureScan, sae_readers, transcoder_readers
from .local import default_batch_size, run_local
from .reduce import EXTRAS, Partial
from .store import COLUMNS, OPTIONAL, ScanFolderError, check_space, estimate_bytes, read, write
from .validate import check

ENGINES = ("local", "ray")
DEFAULT_WINDOW = 128
__all__ = ["Scan", "scan", "load_scan", "transcoder_record", "ScanDataError", "ScanFolderError"]


@dataclass
class Scan:
    """A scan's tables (see docs/architecture.md, "The corpus scan"). head_windows: every window's head scores,
    of which `heads` is the mean (the page draws their distribution)."""

    windows: pd.DataFrame
    tokens: pd.DataFrame
    neurons: pd.DataFrame
    heads: pd.DataFrame
    summary: dict
    head_windows: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["head_windows"])))
    # per window and head, what HeadVis's metrics and samples need (reduce.EXTRAS; gptviz.scanning.heads)
    head_attention: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["head_attention"])))
    # with saes=[...]: each feature's strongest contexts, and how often it fires (scanning/features.py)
    features: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["features"])))
    feature_density: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["feature_density"]))
    )
    # with transcoders=tcs: the same per layer's transcoder (summary["transcoders"] names the set)
    transcoder_features: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["transcoder_features"]))
    )
    transcoder_density: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(COLUMNS["transcoder_density"]))
    )

    def tables(self) -> dict[str, pd.DataFrame]:
        return {
            "windows": self.windows,
            "tokens": self.tokens,
            "neurons": self.neurons,
            "heads": self.heads,
            "head_windows": self.head_windows,
            "head_attention": self.head_attention,
            **({"features": self.features, "feature_density": self.feature_density} if len(self.features) else {}),
            **(
                {"transcoder_features": self.transcoder_features, "transcoder_density": self.transcoder_density}
                if len(self.transcoder_features)
                else {}
            ),
        }


def transcoder_record(tcs) -> dict:
    """What a scan's summary says of the transcoder set it read: its folder (absolute, or None for a set
    made in memory), a name, its layers and fingerprint (TranscoderSet.fingerprint: how a page finds the
    scan of the set it shows, from whatever folder either was read)."""
    path = getattr(tcs, "path", None)
    name = tcs.meta.get("model_name") if isinstance(tcs.meta.get("model_name"), str) else None
    return {
        "path": str(Path(path).expanduser().resolve()) if path else None,
        "name": Path(path).name if path else (name or "transcoders in memory"),
        "layers": [int(l) for l in tcs.layers],
        "d_tc": int(tcs[tcs.layers[0]].d_tc),
        "fingerprint": tcs.fingerprint(),
    }


def _model_and_tokenizer(model, tokenizer, device):
    """A GPT, a Bundle or a checkpoint path -> (GPT in eval mode, tokenizer, checkpoint path or None)."""
    from ..formats import Bundle, load

    if isinstance(model, (str, Path)):
        path = str(model)
        bundle = load(path, device=device or "cpu")
        return bundle.model, tokenizer or bundle.tokenizer, path
    if isinstance(model, Bundle):
        m = model.model if device is None else model.model.to(device)
        return m, tokenizer or model.tokenizer, str(model.report.path)
    if device is not None:
        model = model.to(device)
    return model, tokenizer, None


def tables(corpus: Corpus, part: Partial, L: int, H: int) -> dict[str, pd.DataFrame]:
    """The scan's tables from the corpus and the merged Partial of every window."""
    by_id = {w.window: w for w in corpus.windows}
    wins = [by_id[int(i)] for i in part.window]
    windows = pd.DataFrame(
        {
            "window": part.window,
            "doc": np.array([w.doc for w in wins], dtype=np.int64),
            "start": np.array([w.start for w in wins], dtype=np.int64),
            "n_tokens": part.n_tokens,
            "loss": part.loss,
            "token_ids": [w.ids.tolist() for w in wins],
        }
    )
    predicted = part.n_tokens - 1
    tokens = pd.DataFrame(
        {
            "window": np.repeat(part.window, predicted),
            "position": np.concatenate([np.arange(1, n + 1) for n in predicted]).astype(np.int64),
            "token_id": np.concatenate([w.ids[1:] for w in wins]),
            "loss": part.token_loss.astype(np.float32),
        }
    )
    Ln, Fn, K = part.top_value.shape
    neurons = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(Ln), Fn * K),
            "neuron": np.tile(np.repeat(np.arange(Fn), K), Ln),
            "rank": np.tile(np.arange(K), Ln * Fn),
            "value": part.top_value.reshape(-1),
            "window": part.top_window.reshape(-1),
            "position": part.top_position.reshape(-1).astype(np.int64),
        }
    )
    W = len(part.window)
    head_windows = pd.DataFrame(
        {
            "window": np.repeat(part.window, L * H),
            "layer": np.tile(np.repeat(np.arange(L), H), W),
            "head": np.tile(np.arange(H), W * L),
            **{s: part.heads[..., i].reshape(-1) for i, s in enumerate(SCORES)},
        }
    )
    heads = head_windows.drop(columns="window").groupby(["layer", "head"], as_index=False).mean()
    head_attention = pd.DataFrame(
        {
            "window": head_windows["window"],
            "layer": head_windows["layer"],
            "head": head_windows["head"],
            **{e: part.head_extra[..., i].reshape(-1) for i, e in enumerate(EXTRAS)},
            "induction_queries": np.repeat(part.induction_queries, L * H),
        }
    )
    return {
        "windows": windows,
        "tokens": tokens,
        "neurons": neurons,
        "heads": heads,
        "head_windows": head_windows,
        "head_attention": head_attention,
    }


def scan(
    model,
    data,
    tokenizer=None,
    window: int = DEFAULT_WINDOW,
    k: int = 20,
    engine: str = "local",
    out: str | Path | None = None,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    ray_address: str | None = None,
    ray_timeout: float | None = None,
    progress: ProgressFn | None = None,
    saes: Sequence = (),
    transcoders=None,
    threads: int | None = None,
) -> Scan:
    """Scan a corpus (see docs/architecture.md, "The corpus scan").

    model: a GPT, a Bundle or a checkpoint path (its tokenizer is used when tokenizer is None).
    data: a .txt file, a folder of .txt files, a .jsonl or .parquet file with a `text` column, a
    list of strings, or a list of token-id lists. engine: "local" (this process) or "ray" (Ray
    Data: the cluster RAY_ADDRESS or ray_address names, else a Ray started here and stopped after).
    ray_timeout: seconds to wait for that cluster (default $GPTVIZ_RAY_TIMEOUT, else 30).
    progress: called with a gptviz.Progress after each batch of windows (raise Cancelled to stop).
    device: where the model runs.
    window: tokens per window (the default 128 is cut to the model's block_size; a larger one given
    on purpose is an error). k: contexts kept per neuron.
    threads: torch CPU threads: of this process for the local engine (its own setting comes back after), of
    each worker for Ray (default 2, or a node's cores if fewer); every Ray worker's OpenMP waits passively.
    The summary records the threads used (`threads`; with Ray, `ray_workers` as the workers reported them).
    saes: SAEs (gptviz.load_sae) read in the same pass: `scan.features` (feature, rank, value, window,
    position, and `sae`, its index in saes) and `scan.feature_density` (how often each fires).
    transcoders: a TranscoderSet (gptviz.load_transcoders), read in the same pass (each
    layer's transcoder at blocks.{l}.mlp.in): `scan.transcoder_features` (layer, feature, rank, value,
    window, position) and `scan.transcoder_density`; summary["transcoders"] names the set.
    """
    if engine not in ENGINES:
        raise GptvizError(f"unknown engine {engine!r}; choose local or ray")
    started = time.perf_counter()
    source = model
    model, tokenizer, checkpoint = _model_and_tokenizer(model, tokenizer, device)
    cfg = model.config
    if not isinstance(window, int) or window < 2:
        raise GptvizError(f"window must be an integer of at least 2 tokens, got {window!r}")
    if window == DEFAULT_WINDOW:  # the default adapts to a model that reads fewer tokens
        window = min(window, cfg.block_size)
    if window > cfg.block_size:
        raise GptvizError(f"window {window} is longer than the model reads (block_size={cfg.block_size})")
    if not isinstance(k, int) or k < 1:
        raise GptvizError(f"k must be a positive integer, got {k!r}")
    saes = list(saes)
    if (saes or transcoders is not None) and engine != "local":
        raise GptvizError("a scan with saes= or transcoders= runs on the local engine for now")
    for sae in saes:
        check_fits(sae, model)
    if transcoders is not None:  # each transcoder is applied where the activations are (Transcoder.on)
        transcoders.check_fits(model)
    readers = sae_readers(saes) + (transcoder_readers(transcoders) if transcoders is not None else [])
    corpus = read_corpus(data, tokenizer, window, cfg.vocab_size)
    n_neurons = model.transformer.h[0].mlp.c_proj.in_features
    if out is not None:  # before the model runs: a corpus too large for the disk costs nothing
        n_features = sum(r.width for r in readers)
        need = estimate_bytes(corpus.tokens, len(corpus.windows), cfg.n_layer, n_neurons, cfg.n_head, k, n_features)
        check_space(Path(out), need)
    # a batch of 0 or -1 made no batches (or failed deep in NumPy); None means the default
    batch_size = default_batch_size(window) if batch_size is None else whole(batch_size, "batch_size", low=1)
    reporter = Reporter(progress, "windows", len(corpus.windows))
    step = reporter.tick
    reporter.start()
    features = FeatureScan(readers, k) if readers else None
    threads = None if threads is None else whole(threads, "threads", low=1)
    ran: dict = {}
    if engine == "local":
        before = torch.get_num_threads()
        try:
            if threads:
                torch.set_num_threads(threads)
            ran["threads"] = torch.get_num_threads()
            acc = run_local(model, corpus.windows, k, batch_size, step, features)
        finally:
            torch.set_num_threads(before)
    else:
        from .ray_engine import run_ray

        acc, workers = run_ray(
            checkpoint if isinstance(source, (str, Path)) else model,
            corpus.windows,
            k,
            batch_size,
            step,
            ray_address=ray_address,
            ray_timeout=ray_timeout,
            device=device,
            threads=threads,
        )
        ran = {"threads": max(workers["threads"], default=0), "ray_workers": workers}
    part = acc.result()
    result = tables(corpus, part, cfg.n_layer, cfg.n_head)
    predicted = int((part.n_tokens - 1).sum())
    summary = {
        "docs": corpus.docs,
        "windows": len(corpus.windows),
        "tokens": corpus.tokens,
        "loss": float(part.token_loss.astype(np.float64).sum() / predicted),
        "seconds": round(time.perf_counter() - started, 3),
        "engine": engine,
        "window": window,
        "k": k,
        "checkpoint": checkpoint,
        "data": str(data) if isinstance(data, (str, Path)) else f"a list of {corpus.docs} documents",
        "doc_names": corpus.names[:1000],  # where each document came from (the first 1,000)
        **ran,
    }
    s = Scan(**result, summary=summary)
    for name, table in (features.tables() if features is not None else {}).items():
        setattr(s, name, table)
    if saes:
        summary["saes"] = [getattr(sae, "path", None) or repr(sae) for sae in saes]
    if transcoders is not None:
        summary["transcoders"] = transcoder_record(transcoders)
    if out is not None:
        if Path(out).is_dir():  # a previous scan's feature tables in this folder would be read as this one's
            for name in set(OPTIONAL[2:]) - set(s.tables()):
                (Path(out) / f"{name}.parquet").unlink(missing_ok=True)
        summary["tables"] = sorted(s.tables())  # as write() records them: the summary read back is this one
        write(Path(out), s.tables(), summary)
    return s


def load_scan(folder: str | Path) -> Scan:
    """A scan written with out= (or `python -m gptviz scan --out`), read back and checked."""
    found, summary = read(Path(folder))
    check(Path(folder).expanduser(), found, summary)  # what the tables hold, against the contract
    return Scan(
        found["windows"],
        found["tokens"],
        found["neurons"],
        found["heads"],
        summary,
        *(found.get(name, pd.DataFrame(columns=list(COLUMNS[name]))) for name in OPTIONAL),
    )
