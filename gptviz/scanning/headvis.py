"""`gptviz scan --headvis DIR`: a scan's heads as the HeadVis data tree that Neuronpedia's HeadVis
loaders read (hijohnnylin/neuronpedia, utils/neuronpedia-utils/neuronpedia_utils/headvis/:
load-head-metrics.py, load-head-sequences.py) and the HeadVis frontend serves:

    DIR/config.json            frontend config, with the run's provenance under "pipeline_config"
    DIR/scatter_data.json      one row per head: layer, head and the six metrics (heads.HEADVIS_METRICS)
    DIR/server_config.json     {} (static-only)
    DIR/attributions/manifest.json   {}
    DIR/heads/L{layer}H{head}.json   sampled windows with sparse attention, the q-k distance histogram,
                                     top query / key tokens, the max-attention histogram, statistics

The metrics and every window's max attention come from the scan (one pass over the corpus). Only the
sampled windows' maps are needed for the sparse attention: they are rebuilt here, in batches, from the
model, one layer at a time, and reduced at once to each row's strongest keys.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..capture import edited
from ..names import point
from .heads import HEADVIS_METRICS, head_metrics, head_samples, window_values
from .local import BATCH_TOKENS
from .reduce import batch_maps

N_INTERVALS = 5  # Neuronpedia's defaults (compute-head-metrics.py)
SAMPLES_PER_INTERVAL = 3
SAMPLES_PER_TOP_INTERVAL = 10
TOPK_PER_ROW = 8
THRESHOLD = 0.005
HISTOGRAM_BINS = 50
QK_BIN_EDGES = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
TOP_TOKENS = 50
DESCRIPTIONS = {
    "self_attention_score": "Mean attention from each query position to itself (the diagonal).",
    "prev_token_score": "Mean attention to the immediately preceding token. High values mark previous-token heads.",
    "pattern_entropy": "Mean Shannon entropy of each row of the attention map. High = dispersed; low = peaked.",
    "qk_distance": "Mean |q - k| weighted by attention: how far back a head looks on average.",
    "qk_distance_variance": "Variance of |q - k| weighted by attention.",
    "induction_score": "Mean attention from a token to the one after an earlier copy of it. High = induction head.",
}


def _round(x: float | None, decimals: int = 4) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), decimals)


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text).replace("/", "-")).strip("-") or "gptviz"


@torch.no_grad()
def sparse_maps(
    model, ids: dict[int, np.ndarray], wanted: dict[int, set[tuple[int, int]]], topk: int, threshold: float
):
    """{(window, layer, head): (flat indices q·n + k int32, values float32)}: each query row's `topk`
    strongest keys of at least `threshold` (rounded to 4 places, ordered by q then k), for the heads
    `wanted` names per window, from the maps the model builds for those windows."""
    out: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
    order = sorted(wanted, key=lambda w: (-len(ids[w]), w))
    per_batch = max(1, BATCH_TOKENS // max(len(ids[w]) for w in order)) if order else 1
    device = model.device
    last = model.config.n_layer - 1
    for start in range(0, len(order), per_batch):
        group = order[start : start + per_batch]
        lengths = [len(ids[w]) for w in group]
        idx = torch.zeros(len(group), max(lengths), dtype=torch.long)
        for b, w in enumerate(group):
            idx[b, : lengths[b]] = torch.tensor(ids[w], dtype=torch.long)  # a copy: the table's arrays are read-only
        state: dict[str, torch.Tensor] = {}

        def keep_q(q, state=state):
            state["q"] = q
            return q

        def reduce(layer, spec):
            def hook(k, group=group, lengths=lengths, state=state):
                q = state.pop("q")  # [B, H, T, D]
                if k.size(1) != q.size(1):  # grouped-query attention
                    k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
                for n in sorted(set(lengths)):  # the windows of one length together
                    rows = [b for b, w in enumerate(group) if lengths[b] == n and any(l == layer for l, _ in wanted[w])]
                    if not rows:
                        continue
                    m = batch_maps(q[rows, :, :n].float(), k[rows, :, :n].float(), spec)  # [G, H, n, n]
                    v, key = torch.topk(m, k=min(topk, n), dim=-1)  # [G, H, n, topk]
                    by_key = key.argsort(dim=-1)  # each row's kept keys in key order, as HeadVis stores them
                    v, key = v.gather(-1, by_key).cpu().numpy(), key.gather(-1, by_key).cpu().numpy()
                    flat_all = np.arange(n)[:, None] * n + key  # [G, H, n, topk]
                    for g, b in enumerate(rows):
                        for l, h in wanted[group[b]]:
                            if l == layer:
                                keep = v[g, h] >= threshold  # [n, topk], row-major: q, then k ascending
                                vals = np.round(v[g, h][keep].astype(np.float64), 4)
                                out[(group[b], layer, h)] = (flat_all[g, h][keep].astype(np.int64), vals)
                if layer == last:  # nothing after the last layer's maps is needed: skip the rest and the logits
                    raise _Enough
                return k

            return hook

        hooks: dict[str, Any] = {}
        for l in range(model.config.n_layer):
            hooks[point("attn.q", l)] = keep_q
            hooks[point("attn.k", l)] = reduce(l, model.transformer.h[l].attn.spec)
        with edited(model, hooks), contextlib.suppress(_Enough):
            model(idx.to(device))
    return out


class _Enough(Exception):
    """Raised from the last layer's hook: the rest of the forward pass is not needed."""


def qk_histogram(kept: list[tuple[np.ndarray, np.ndarray, int]]) -> dict:
    """|q - k| of every kept entry (flat indices, values, n) in QK_BIN_EDGES's bins, weighted by attention."""
    values = np.zeros(len(QK_BIN_EDGES) - 1)
    for flat, v, n in kept:
        b = np.searchsorted(QK_BIN_EDGES, np.abs(flat // n - flat % n), side="right") - 1
        ok = (b >= 0) & (b < len(values))
        values += np.bincount(b[ok], weights=v[ok], minlength=len(values))
    return {"bin_edges": list(QK_BIN_EDGES), "bin_values": [round(float(x), 4) for x in values]}


def top_tokens(kept: list[tuple[np.ndarray, np.ndarray, int]], tokens: list[list[str]], side: str) -> list[dict]:
    """The TOP_TOKENS token strings holding the most kept attention as queries (side="query") or keys."""
    mass: dict[str, float] = defaultdict(float)
    for (flat, v, n), strings in zip(kept, tokens):
        pos = flat // n if side == "query" else flat % n
        per = np.bincount(pos, weights=v, minlength=n)
        for p in np.flatnonzero(per):
            mass[strings[p]] += float(per[p])
    ranked = sorted(mass.items(), key=lambda kv: -kv[1])[:TOP_TOKENS]
    return [{"token": t, "weight": round(w, 4)} for t, w in ranked]


def _activation_histogram(values: np.ndarray) -> dict:
    bins = np.clip((values.astype(np.float32) * HISTOGRAM_BINS).astype(np.int64), 0, HISTOGRAM_BINS - 1)
    counts = np.bincount(bins, minlength=HISTOGRAM_BINS)
    edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    return {"bin_edges": [round(float(e), 4) for e in edges], "bin_values": [int(c) for c in counts]}


def _dump(path: Path, payload, indent=None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=indent, allow_nan=False) + "\n")


def write_headvis(
    model,
    scan,
    out,
    tokenizer=None,
    *,
    model_name: str | None = None,
    n_intervals: int = N_INTERVALS,
    samples_per_interval: int = SAMPLES_PER_INTERVAL,
    samples_per_top_interval: int = SAMPLES_PER_TOP_INTERVAL,
    topk_per_row: int = TOPK_PER_ROW,
    threshold: float = THRESHOLD,
    seed: int = 0,
) -> Path:
    """Write the HeadVis tree of a scan (see the module's docstring) into out; returns out.
    model: the GPT the scan ran (its maps are rebuilt for the sampled windows only)."""
    out = Path(out)
    cfg = model.config
    L, H = cfg.n_layer, cfg.n_head
    summary = scan.summary
    model_name = model_name or str(summary.get("checkpoint") or "gptviz-model")
    dataset = str(summary.get("data") or "corpus")
    ids = {int(w): np.asarray(t, dtype=np.int64) for w, t in zip(scan.windows["window"], scan.windows["token_ids"])}
    samples = {
        (l, h): head_samples(
            scan, l, h, "max_attention", n_intervals, samples_per_interval, samples_per_top_interval, seed
        )
        for l in range(L)
        for h in range(H)
    }
    wanted: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for (l, h), s in samples.items():
        for w in s["window"]:
            wanted[int(w)].add((l, h))
    maps = sparse_maps(model, ids, wanted, topk_per_row, threshold)

    def text(i: int) -> str:
        return tokenizer.decode([int(i)]) if tokenizer is not None else str(int(i))

    strings: dict[int, list[str]] = {w: [text(i) for i in ids[w]] for w in wanted}
    metrics = head_metrics(scan).set_index(["layer", "head"])
    rows = [
        {"layer": l, "head": h, **{m: _round(metrics.at[(l, h), m]) for m in HEADVIS_METRICS}}
        for l in range(L)
        for h in range(H)
    ]
    _dump(out / "scatter_data.json", rows)
    for (l, h), s in samples.items():
        seqs, kept = [], []
        for r in s.itertuples():
            flat, vals = maps[(int(r.window), l, h)]
            kept.append((flat, vals, len(ids[int(r.window)])))
            seqs.append(
                {
                    "sequence_id": int(r.window),
                    "interval": int(r.interval),
                    "tokens": strings[int(r.window)],
                    "attention_indices": flat.tolist(),
                    "attention_values": vals.tolist(),
                    "seq_len": len(ids[int(r.window)]),
                    "max_activation": _round(r.value),
                }
            )
        every = window_values(scan, l, h, "max_attention")["value"].to_numpy()
        _dump(
            out / "heads" / f"L{l}H{h}.json",
            {
                "sequences": seqs,
                "qk_distance_histogram": qk_histogram(kept),
                "top_query_tokens": top_tokens(kept, [q["tokens"] for q in seqs], "query"),
                "top_key_tokens": top_tokens(kept, [q["tokens"] for q in seqs], "key"),
                "histogram": _activation_histogram(every),
                "statistics": {"n_samples": len(seqs), "mean_max_activation": _round(float(every.mean()))},
            },
        )
    _dump(out / "server_config.json", {})
    _dump(out / "attributions" / "manifest.json", {})
    pipeline = {
        "model_name": model_name,
        "np_model_id": _name(Path(model_name).name),
        "dataset_name": dataset,
        "dataset_config_name": None,
        "dataset_split": "all",
        "dataset_text_field": "text",
        "n_sequences": int(summary["windows"]),
        "seq_len": int(summary.get("window") or max(len(v) for v in ids.values())),
        "batch_size": 0,
        "exports_dir": str(out.parent),
        "output_run_dir": str(out),
        "device": str(model.device),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "attn_implementation": "eager",  # explicit softmax maps, as HF's eager attention returns them
        "induction_attention_threshold": 0.01,
        "trust_remote_code": False,
        "min_free_vram_gb": 0.0,
        "streaming": False,
        "model_cache_dir": "",
        "delete_model_cache": False,
        "revision": None,
        "dataset_revision": None,
        "n_intervals": n_intervals,
        "samples_per_interval": samples_per_interval,
        "samples_per_top_interval": samples_per_top_interval,
        "sparse_topk_per_row": topk_per_row,
        "sparse_threshold": threshold,
        "sample_seed": seed,
        "warmup_size": int(summary["windows"]),  # the intervals come from every window, not a warm-up
        "created_at": datetime.now(timezone.utc).isoformat(),
        "actual_sequences_processed": int(summary["windows"]),
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "attention_layer_indices": list(range(L)),
        "source": "gptviz scan --headvis",
    }
    config = {
        "model_name": model_name,
        "np_model_id": pipeline["np_model_id"],
        "dataset_name": dataset,
        "heads": [[l, h] for l in range(L) for h in range(H)],
        "n_layers": L,
        "n_heads": H,
        "n_intervals": n_intervals,
        "metrics": list(HEADVIS_METRICS),
        "metric_descriptions": dict(DESCRIPTIONS),
        "head_data_pattern": "L{layer}H{head}.json",
        "has_umap": False,
        "umap_heads": [],
        "custom_plots": [
            {"key": "qk_distance_histogram", "label": "Q-K distance"},
            {"key": "histogram", "label": "Activation distribution"},
        ],
        "custom_tables": [
            {"key": "top_query_tokens", "label": "Top query tokens"},
            {"key": "top_key_tokens", "label": "Top key tokens"},
        ],
        "statistics_display": {
            "n_samples": {"label": "Samples kept", "format": "default"},
            "mean_max_activation": {"label": "Mean max activation", "format": "default"},
        },
        "pipeline_config": pipeline,
    }
    _dump(out / "config.json", config, indent=2)
    return out
