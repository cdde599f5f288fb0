"""Health checks of a checkpoint on one run: NaN / Inf, attention rows that do not sum to 1,
residual growth, collapsed, uniform and sink heads, the largest attention logit, embedding rows
that were never trained, and vocabulary the tokenizer cannot produce.

    findings = gptviz.health(model, trace, tokenizer)
    [str(f) for f in findings]     # "warn uniform_heads: 8 of 8 heads ..."

Each Finding says what it measured, the threshold, and what to do. "fail" means the numbers on
screen cannot be trusted (NaN, rows that are not distributions, a tokenizer that produces ids the
model cannot read); "warn" means something a person should look at. Every threshold is a named
constant below. Attention maps are rebuilt one layer at a time, never all at once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..errors import ArgumentError
from ..model import GPT
from ..names import ATTENTION_MAPS, point
from ..progress import ProgressFn, Reporter
from ..record import Trace
from .residual import GROWTH_LIMIT, NORM_LIMIT, residual_growth, residual_stat_grid
from .values import float64

# --- thresholds: every number a finding is judged by ---------------------------------------
ROW_SUM_TOL = 1e-3  # |Σ_j w_ij − 1| above this is not a softmax row (float32 rows are off by ~1e-7)


def row_sum_tol(dtype: torch.dtype) -> float:
    """ROW_SUM_TOL, or two units of the weights' own rounding at 1.0 when that is larger: a bf16 model's
    rows, each weight rounded to 8 bits, were off by up to 0.003 on a 1B model (bf16's unit is 0.0078).
    A row that is not a softmax output (NaN, every key hidden) is off by far more."""
    return max(ROW_SUM_TOL, 2 * torch.finfo(dtype).eps) if dtype.is_floating_point else ROW_SUM_TOL


COLLAPSED_ENTROPY = 0.1  # nats: a head whose every row (queries 1…T−1) stays below is one-hot everywhere
UNIFORM_RATIO = 0.98  # entropy ÷ log(allowed keys), mean over queries 1…T−1: above it a head averages
SINK_LIMIT = 0.4  # mean weight on key 0 over queries 1…T−1 (head_scores' `sink`); the label convention
ATTN_LOGIT_LIMIT = 100.0  # |q·k/√D| on a readable cell: e^−100 underflows float32's normal range
UNTRAINED_NORM_RATIO = 0.25  # an embedding row shorter than this × the median row looks untouched
PAD_MULTIPLE = 64  # nanoGPT pads GPT-2's 50,257 ids to 50,304, the next multiple of 64, for speed
PAD_MASS_LIMIT = 0.01  # probability the model may give such padding ids before it is worth a look
# GROWTH_LIMIT (per block, after block 0) and NORM_LIMIT (any residual norm) come from analysis.residual.

THRESHOLDS = {
    "ROW_SUM_TOL": ROW_SUM_TOL,
    "COLLAPSED_ENTROPY": COLLAPSED_ENTROPY,
    "UNIFORM_RATIO": UNIFORM_RATIO,
    "SINK_LIMIT": SINK_LIMIT,
    "ATTN_LOGIT_LIMIT": ATTN_LOGIT_LIMIT,
    "UNTRAINED_NORM_RATIO": UNTRAINED_NORM_RATIO,
    "PAD_MULTIPLE": PAD_MULTIPLE,
    "PAD_MASS_LIMIT": PAD_MASS_LIMIT,
    "GROWTH_LIMIT": GROWTH_LIMIT,
    "NORM_LIMIT": NORM_LIMIT,
}
STATUSES = ("ok", "warn", "fail")  # in order of severity
SHOWN = 8  # heads, rows or names listed in a message before "…"


@dataclass(frozen=True)
class Finding:
    """One health check: its name, "ok" | "warn" | "fail", the measured value (None where it could
    not be measured) and a message saying what was measured, the threshold and what to do."""

    name: str
    status: str
    value: float | int | None
    message: str

    def to_dict(self) -> dict:
        """Plain JSON types; a non-finite value becomes None (the message says what it was)."""
        d = asdict(self)
        if isinstance(self.value, float) and not math.isfinite(self.value):
            d["value"] = None
        return d

    def __str__(self) -> str:
        return f"{self.status} {self.name}: {self.message}"


def worst(findings: list[Finding]) -> str:
    """The most severe status among the findings ("ok" if there are none)."""
    return max((f.status for f in findings), key=STATUSES.index, default="ok")


def _listed(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f", … ({len(items)} in all)" if len(items) > SHOWN else "")


def _heads(pairs: list[tuple[int, int]]) -> str:
    return _listed([f"L{l} H{h}" for l, h in pairs])


def _counted(pairs: list[tuple[int, int]]) -> str:
    return f"{len(pairs)} ({_heads(pairs)})" if pairs else "none"


ROWS_AT_ONCE = 4096  # embedding rows read at a time: a 128k x 2,048 table is never copied whole (2 GB in float64)
HASHED_COLUMNS = 128  # of an embedding row, to find the rows that may be copies (then compared whole)


def _nonfinite(p: torch.Tensor) -> int:
    """How many of p's values are NaN or Inf. A NaN or an Inf anywhere makes the sum NaN or Inf, so a
    finite sum (one pass, no copy: 0.5 s for a 1B model's weights, where counting took 11 s) needs no count."""
    if bool(torch.isfinite(p.sum())):
        return 0
    return int((~torch.isfinite(p)).sum())  # a NaN or Inf, or a finite sum past the dtype's range


def _row_norms(w: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.linalg.vector_norm(rows, dim=1, dtype=torch.float64) for rows in w.split(ROWS_AT_ONCE)])


def _copied_rows(w: torch.Tensor, among: torch.Tensor) -> torch.Tensor:
    """Which rows of w (where `among`: finite rows, as NaN != NaN and a NaN row upsets torch.unique's sort)
    equal another such row. Only rows that share a 64-bit hash of the bits of HASHED_COLUMNS spread over
    the row (-0.0 read as 0.0, as == does) can be equal; torch.unique compares those few whole (on every
    row of a 128k x 2,048 table it took 9 s)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[w.element_size()]
    sample = w[:, :: max(1, -(-w.size(1) // HASHED_COLUMNS))]
    mix = torch.randint(-(2**62), 2**62, (sample.size(1),), generator=torch.Generator().manual_seed(0))
    # integer products and sums wrap around, in any order alike: equal rows always hash alike
    hashes = torch.cat([((rows + 0.0).view(ints).long() * mix).sum(1) for rows in sample.split(ROWS_AT_ONCE)])
    _, inverse, counts = torch.unique(hashes, return_inverse=True, return_counts=True)
    candidates = torch.nonzero((counts[inverse] > 1) & among).flatten()
    copies = torch.zeros(w.size(0), dtype=torch.bool)
    if candidates.numel():
        _, inverse, counts = torch.unique(float64(w[candidates]), dim=0, return_inverse=True, return_counts=True)
        copies[candidates] = counts[inverse] > 1
    return copies


def check_weights(model: GPT) -> Finding:
    bad = {n: _nonfinite(p) for n, p in model.named_parameters()}
    bad = {n: c for n, c in bad.items() if c}
    total = model.num_params()
    if not bad:
        return Finding("nonfinite_weights", "ok", 0, f"all {total:,} weights are finite (threshold: any NaN or Inf).")
    count = sum(bad.values())
    return Finding(
        "nonfinite_weights",
        "fail",
        count,
        f"{count:,} of {total:,} weights are NaN or Inf, in {_listed(list(bad))} (threshold: any). Every "
        "activation downstream is suspect: reload from an earlier checkpoint, and look for a learning-rate "
        "spike or a division by zero before this save.",
    )


def check_activations(trace: Trace) -> Finding:
    bad = []
    for name in trace.names:
        if name.endswith(ATTENTION_MAPS) or name.endswith("attn.mask"):
            continue  # maps are judged layer by layer in check_attention; the mask is bool
        if not torch.isfinite(trace.tensor(name)).all():
            bad.append(name)
    if not bad:
        return Finding(
            "nonfinite_activations", "ok", 0, "every captured activation is finite (threshold: any NaN or Inf)."
        )
    return Finding(
        "nonfinite_activations",
        "fail",
        len(bad),
        f"captured tensors holding NaN or Inf: {len(bad)}, first {bad[0]}: {_listed(bad)} (threshold: any). "
        "The first one named is where it starts: check the weights feeding it and the prompt's ids.",
    )


def _growth_said(means: np.ndarray, judged: dict[int, float], total: float) -> str:
    """The residual norm's growth in plain words: where it starts and ends, and what the block that
    grows it most (after block 0) does to it, which may be to shrink it."""
    said = (
        f"the mean residual norm is {means[0]:.3g} at the embedding and {means[-1]:.3g} after the last block "
        f"({total:.2f} times as large)"
    )
    if not judged:
        return said
    block, most = max(judged.items(), key=lambda kv: kv[1])
    if most <= 1:
        return said + f"; no block after block 0 grows it (each keeps or shrinks it; the most is ×{most:.2f})"
    return said + f"; the block after block 0 that grows it most is block {block}, ×{most:.2f}"


def check_residual(trace: Trace) -> Finding:
    """Per-block growth of the mean residual norm (blocks after the first) and the largest norm."""
    _, norms = residual_stat_grid(trace, "norm")  # [1 + 2L, T]: embed, then l.mid, l.post
    if not np.isfinite(norms).all():
        return Finding(
            "residual_growth",
            "warn",
            None,
            "not judged: the residual stream holds NaN or Inf (see nonfinite_activations).",
        )
    means = norms.mean(1)
    growth = [means[2 * l + 2] / means[2 * l] if means[2 * l] > 0 else math.inf for l in range(trace.n_layer)]
    judged = {l: g for l, g in enumerate(growth) if l >= 1}
    top = float(norms.max())
    over = [f"block {l} ×{g:.1f}" for l, g in judged.items() if not g <= GROWTH_LIMIT]
    worst_growth = max(judged.values(), default=None)
    measured = f"{_growth_said(means, judged, residual_growth(trace))}; the largest norm is {top:.4g}"
    rule = f"(thresholds: ×{GROWTH_LIMIT:g} per block after block 0, any norm above {NORM_LIMIT:g})"
    if not over and top <= NORM_LIMIT:
        return Finding("residual_growth", "ok", worst_growth, f"{measured} {rule}. Block 0 is not judged by growth.")
    said = f"{', '.join(over)} multiplies the norm" if over else f"a norm above {NORM_LIMIT:g}"
    return Finding(
        "residual_growth",
        "warn",
        worst_growth if worst_growth is not None else top,
        f"{measured}; {said} {rule}. Runaway growth precedes overflow in float16 and loss spikes: look at "
        "the Residual stream page for the block, and at its output projections' weight norms.",
    )


def _per_head(trace: Trace, n_layer: int, progress: ProgressFn | None = None) -> dict[str, np.ndarray]:
    """[L, H] summaries of every head's attention, computed one layer's maps at a time. The maps stay
    in their own precision (float32: half the memory and time of float64 at T = 1024); row sums and
    means accumulate in float64, and every threshold is far above float32's rounding."""
    out: dict[str, list] = {k: [] for k in ("row_dev", "row_tol", "max_entropy", "uniformity", "sink", "logit")}
    reporter = Reporter(progress, "layers", total=n_layer)
    reporter.start()
    for l in range(n_layer):
        w = trace.tensor(point("attn.weights", l))  # [H, T, T]
        out["row_tol"].append(torch.full(w.shape[:1], row_sum_tol(w.dtype), dtype=torch.float64))
        w = w.float()
        mask = trace.tensor(point("attn.mask", l)).to(w.device)  # [T, T]
        H, T = w.shape[:2]
        dev = (w.sum(-1, dtype=torch.float64) - 1).abs()  # [H, T]
        out["row_dev"].append(dev.nan_to_num(nan=math.inf).amax(-1))
        if T > 1:
            ent = -torch.special.xlogy(w[:, 1:], w[:, 1:]).sum(-1, dtype=torch.float64)  # [H, T-1] nats
            allowed = mask[1:].sum(-1, dtype=torch.float64)  # [T-1]; query 0 reads one key and is left out
            out["max_entropy"].append(ent.amax(-1))
            out["uniformity"].append((ent / allowed.log()).mean(-1))
            out["sink"].append(w[:, 1:, 0].double().mean(-1))
        else:
            for k in ("max_entropy", "uniformity", "sink"):
                out[k].append(torch.full((H,), math.nan, dtype=torch.float64, device=w.device))
        del w
        s = trace.tensor(point("attn.scores", l)).float()  # [H, T, T]
        s = torch.where(mask & torch.isfinite(s), s.abs(), 0.0)  # only cells a query reads count
        out["logit"].append(s.flatten(1).amax(-1).double())
        del s  # one layer's maps at a time
        reporter.tick()
    return {k: torch.stack([x.to("cpu") for x in v]).numpy() for k, v in out.items()}


def check_attention(trace: Trace, n_layer: int, progress: ProgressFn | None = None) -> list[Finding]:
    """Rows that are not distributions, collapsed, uniform and sink heads, the largest logit.
    progress: reports each layer's maps read (the costly part: every map is rebuilt)."""
    s = _per_head(trace, n_layer, progress)
    T = trace.n_tokens
    findings = []
    bad = np.argwhere(~(s["row_dev"] <= s["row_tol"]))
    worst_dev = float(np.max(s["row_dev"]))
    tol = float(np.max(s["row_tol"]))
    rule = f"(threshold: |Σ_j w_ij − 1| > {tol:g}" + (", the weights' own rounding)" if tol > ROW_SUM_TOL else ")")
    if len(bad):
        findings.append(
            Finding(
                "attention_rows",
                "fail",
                worst_dev,
                f"heads with attention rows that do not sum to 1: {len(bad)} ("
                + ("some rows are NaN" if not math.isfinite(worst_dev) else f"worst off by {worst_dev:.3g}")
                + f"), "
                f"{_heads([tuple(x) for x in bad])} {rule}. These are not softmax outputs: look for NaN in "
                "q or k, or a mask that hides every key of a row.",
            )
        )
    else:
        findings.append(
            Finding(
                "attention_rows",
                "ok",
                worst_dev,
                f"every attention row of every head sums to 1 (largest gap {worst_dev:.2g}) {rule}.",
            )
        )
    if T < 2:
        for name in ("collapsed_heads", "uniform_heads", "sink_heads"):
            findings.append(Finding(name, "ok", None, "not judged: a prompt of one token has one key to read."))
    else:
        collapsed = [tuple(x) for x in np.argwhere(s["max_entropy"] < COLLAPSED_ENTROPY)]
        rule = f"(threshold: every row of queries 1…T−1 below {COLLAPSED_ENTROPY:g} nats)"
        findings.append(
            Finding(
                "collapsed_heads",
                "warn" if collapsed else "ok",
                len(collapsed),
                (
                    f"heads one-hot at every query (all attention on one key): {len(collapsed)}, "
                    f"{_heads(collapsed)} {rule}. A positional head (previous token, first token) may "
                    "legitimately do this; many at once, with large attention logits, suggests logit growth."
                )
                if collapsed
                else f"no head is one-hot at every query {rule}.",
            )
        )
        uniform = [tuple(x) for x in np.argwhere(s["uniformity"] > UNIFORM_RATIO)]
        rule = f"(threshold: mean entropy above {UNIFORM_RATIO:g} × log(keys it may read), queries 1…T−1)"
        findings.append(
            Finding(
                "uniform_heads",
                "warn" if uniform else "ok",
                len(uniform),
                (
                    f"heads spreading their attention evenly over every key they may read: {len(uniform)} of "
                    f"{s['sink'].size}, {_heads(uniform)} {rule}. Such a head only averages the prefix: expected "
                    "in an untrained model, a sign of a head that learned nothing in a trained one."
                )
                if uniform
                else f"no head averages evenly over its keys {rule}.",
            )
        )
        sinks = [tuple(x) for x in np.argwhere(s["sink"] >= SINK_LIMIT)]
        baseline = float(np.mean(1.0 / np.arange(2, T + 1)))  # what uniform attention puts on key 0
        layers = [l for l in range(n_layer) if all(s["sink"][l] >= SINK_LIMIT)]
        judged = baseline < SINK_LIMIT
        rule = f"(threshold: mean weight on key 0 ≥ {SINK_LIMIT:g}; uniform attention would give {baseline:.2f})"
        message = f"sink heads (most attention on the first token): {_counted(sinks)} {rule}."
        if not judged:
            message += " The prompt is too short to tell a sink from even attention: use a longer one."
        elif layers:
            message += (
                f" Every head of layer(s) {', '.join(map(str, layers))} does: that layer's attention reads "
                "almost nothing from the prompt. Check its training, or whether the first token is special."
            )
        else:
            message += " Sink heads are common in trained GPTs (a place to put attention that is not needed)."
        findings.append(Finding("sink_heads", "warn" if judged and layers else "ok", len(sinks), message))
    top = float(s["logit"].max())
    l, h = np.unravel_index(int(np.argmax(s["logit"])), s["logit"].shape)
    rule = f"(threshold: {ATTN_LOGIT_LIMIT:g})"
    findings.append(
        Finding(
            "max_attention_logit",
            "warn" if top > ATTN_LOGIT_LIMIT else "ok",
            top,
            f"the largest |q·k/√D| on a cell a query may read is {top:.4g}, in L{l} H{h} {rule}."
            + (
                " Attention-logit growth is a known precursor of loss divergence (Dehghani et al. 2023, Wortsman "
                "et al. 2023): lower the learning rate, or normalise q and k (QK-layernorm)."
                if top > ATTN_LOGIT_LIMIT
                else ""
            ),
        )
    )
    return findings


def check_embeddings(model: GPT, tokenizer=None) -> Finding:
    """Rows of wte that look untouched: exactly zero, exact copies of another row, or far shorter
    than the median row (where an init of std 0.02 sits when trained rows have grown)."""
    w = model.transformer.wte.weight.detach().cpu()  # [V, C]
    norms = _row_norms(w)
    finite = torch.isfinite(norms)
    median = float(norms[finite].median()) if finite.any() else math.nan
    zero = norms == 0
    copies = _copied_rows(w, finite & ~zero)
    short = finite & ~zero & (norms < UNTRAINED_NORM_RATIO * median)
    flagged = zero | copies | short
    n = int(flagged.sum())
    V = w.size(0)
    rule = (
        "(threshold: zero, an exact copy of another row, or shorter than "
        f"{UNTRAINED_NORM_RATIO:g} × the median {median:.3g})"
    )
    beyond = ""
    if tokenizer is not None and tokenizer.vocab_size < V:
        outside = int(flagged[tokenizer.vocab_size :].sum())
        beyond = f"; {outside} of them lie beyond the tokenizer's {tokenizer.vocab_size:,} ids"
    if not n:
        return Finding("untrained_embeddings", "ok", 0, f"no row of the {V:,} token embeddings looks untrained {rule}.")
    ids = torch.nonzero(flagged).flatten().tolist()
    kinds = f"{int(zero.sum())} zero, {int(copies.sum())} copies, {int(short.sum())} short"
    return Finding(
        "untrained_embeddings",
        "warn",
        n,
        f"{n} of {V:,} token-embedding rows look untrained ({kinds}), ids {_listed(list(map(str, ids)))}{beyond} "
        f"{rule}. Tokens never seen in training (nanoGPT pads GPT-2's 50,257 ids to 50,304) keep their init: "
        "harmless if the tokenizer cannot produce them, otherwise those tokens' activations mean nothing.",
    )


def check_vocabulary(model: GPT, trace: Trace, tokenizer=None) -> Finding:
    V = model.config.vocab_size
    if tokenizer is None:
        return Finding("unreachable_vocab", "ok", None, "not checked: no tokenizer was given.")
    n = tokenizer.vocab_size
    if n > V:
        return Finding(
            "unreachable_vocab",
            "fail",
            n - V,
            f"the tokenizer produces {n:,} ids but the model has {V:,} embedding rows (threshold: tokenizer ≤ "
            "model): some text encodes to ids the model cannot read. Use the tokenizer the model was trained with.",
        )
    if n == V:
        return Finding("unreachable_vocab", "ok", 0, f"the tokenizer produces exactly the model's {V:,} ids.")
    p = torch.softmax(float64(trace.tensor("logits")[-1]), -1)[n:].sum().item()
    if V % PAD_MULTIPLE == 0 and V - n < PAD_MULTIPLE and p < PAD_MASS_LIMIT:
        # padding for speed, and the model has learnt that those ids never come: nothing to look at
        return Finding(
            "unreachable_vocab",
            "ok",
            V - n,
            f"the model's {V:,} ids are the tokenizer's {n:,} padded to a multiple of {PAD_MULTIPLE} (as nanoGPT "
            f"pads GPT-2's to 50,304), and the model gives the {V - n} padding ids {p:.3g} of its probability at the "
            f"last position (threshold: {PAD_MASS_LIMIT:g}).",
        )
    return Finding(
        "unreachable_vocab",
        "warn",
        V - n,
        f"the model has {V:,} ids but the tokenizer produces only {n:,}: {V - n:,} ids can never be read or "
        f"decoded, and the model gives them {p:.3g} of its probability at the last position (threshold: "
        "tokenizer < model). Padding for speed (nanoGPT's 50,304) is fine; mask those logits when sampling.",
    )


@torch.no_grad()
def health(model: GPT, trace: Trace, tokenizer=None, progress: ProgressFn | None = None) -> list[Finding]:
    """Every health finding for `model` on the run `trace`, in a fixed order. tokenizer (optional)
    lets the vocabulary and embedding checks compare the model's ids with the ones it can produce.
    progress: reports each layer's attention maps checked ("layers"), the bulk of the work."""
    if tokenizer is not None and not isinstance(getattr(tokenizer, "vocab_size", None), int):
        raise ArgumentError(f"tokenizer must be a gptviz tokenizer or None, got {type(tokenizer).__name__}")
    n_layer = model.config.n_layer
    return [
        check_weights(model),
        check_activations(trace),
        *check_attention(trace, n_layer, progress),
        check_residual(trace),
        check_embeddings(model, tokenizer),
        check_vocabulary(model, trace, tokenizer),
    ]
