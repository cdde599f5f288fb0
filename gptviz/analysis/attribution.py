"""Direct logit attribution: what each component writes into one token's logit at one position.

The residual stream entering the final norm is a sum of parts: the embedding, every head (its
slice of c_proj applied to its own attn.z), every attention c_proj bias, every MLP (mlp.out minus
its c_proj bias) and every MLP bias. The final norm is not linear, so its scale is FROZEN at the
real run's value at that position: each part x_i becomes (x_i − mean_i) · γ / σ, where σ (and, for
LayerNorm, the centring) is the real run's and mean_i is the part's own mean over C. The norm's
bias β is one more part. Through the LM head (no bias) the parts then sum to the real logit
exactly, up to float rounding. Frozen means: this says what each part contributes given the
scale the whole stream had; removing a part would also change σ, and so every other part.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from ..checks import whole
from ..errors import PromptError
from ..model import GPT
from ..names import point
from ..precision import RMSNorm
from ..progress import ProgressFn, Reporter
from ..record import Trace
from .values import float64

COLUMNS = ["component", "layer", "head", "value"]
# component names: one row each, in forward order
EMBED, HEAD, ATTN_BIAS, MLP, MLP_BIAS, NORM_BIAS = "embed", "head", "attn_bias", "mlp", "mlp_bias", "ln_f_bias"


def _token(model: GPT, token: int, what: str) -> int:
    V = model.config.vocab_size
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= int(token) < V:
        raise PromptError(f"{what} must be a token id in [0, {V - 1}], got {token!r}")
    return int(token)


def _weight(p: Tensor | None, device: torch.device) -> Tensor | None:
    return None if p is None else float64(p.detach().to(device))


def frozen_norm(norm: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """(σ, γ, β) of the final norm on the real residual x [C], in float64: σ = sqrt(var + eps) for
    LayerNorm (population variance, as LayerNorm), sqrt(mean(x²) + eps) for RMSNorm."""
    eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps  # nn.RMSNorm's default
    if isinstance(norm, (nn.RMSNorm, RMSNorm)):
        sigma = (x.pow(2).mean() + eps).sqrt()
    else:
        sigma = (x.var(correction=0) + eps).sqrt()
    gamma = _weight(norm.weight, x.device)
    if gamma is None:  # a norm without a learned scale (OLMo 1)
        gamma = torch.ones_like(x)
    elif getattr(norm, "plus_one", False):  # Gemma scales by 1 + w
        gamma = 1.0 + gamma
    return sigma, gamma, _weight(getattr(norm, "bias", None), x.device)


def check_linear(model: GPT) -> None:
    """Refuse, in one sentence, a model whose logit is not a sum of its parts' contributions."""
    cfg = model.config
    if cfg.post_norm:
        raise PromptError(
            "logit attribution is undefined for this model: a norm after each sub-layer (Gemma 2/3, OLMo 2) "
            "mixes the heads non-linearly before they reach the residual stream"
        )
    if cfg.final_softcap:
        raise PromptError(
            "logit attribution is undefined for this model: its logits are soft-capped (tanh), so they are "
            "not a sum of the parts' contributions"
        )


@torch.no_grad()
def logit_attribution(
    model: GPT,
    trace: Trace,
    target: int,
    position: int = -1,
    baseline: int | None = None,
    progress: ProgressFn | None = None,
) -> pd.DataFrame:
    """What each component writes into logit(target) − logit(baseline) (or logit(target) alone) at
    `position`, through the final norm with its scale frozen at the real run's value there.

    Rows in forward order: `embed`; per layer l, one `head` row per head, `attn_bias` (c_proj's bias),
    `mlp` (mlp.out minus c_proj's bias: what the neurons write) and `mlp_bias`; last `ln_f_bias`. Bias
    rows appear only where the model has biases. Columns `component, layer, head, value` (layer and
    head are nullable integers, NA where they do not apply). The values sum to the real logit
    (difference) to float rounding; df.attrs holds `logit` (the real one, from the Trace), `sigma`
    (the frozen scale), `position`, `target`, `baseline`. progress: called with a gptviz.Progress
    after each layer (raise gptviz.Cancelled from it to stop).
    """
    check_linear(model)
    T = trace.n_tokens
    position = whole(position, "position")  # 1.5 would pass the range check and fail as an index
    if not -T <= position < T:
        raise PromptError(f"position {position} is outside the prompt's {T} tokens")
    pos = position % T
    target = _token(model, target, "target")
    baseline = None if baseline is None else _token(model, baseline, "baseline")
    cfg = model.config
    H, D = cfg.n_head, cfg.head_dim
    dev = trace.tensor("embed").device

    unembed = model.lm_head.weight.detach()
    d = float64(unembed[target].to(dev))  # [C]: the direction whose dot product is the logit (difference)
    if baseline is not None:
        d = d - float64(unembed[baseline].to(dev))
    x = float64(trace.tensor(point("resid_post", cfg.n_layer - 1))[pos])  # [C]: what the final norm read
    norm = model.transformer.ln_f
    sigma, gamma, beta = frozen_norm(norm, x)
    u = gamma * d / sigma  # [C]: each part's logit is its (centred) value · u
    if not isinstance(norm, (nn.RMSNorm, RMSNorm)):
        u = u - u.mean()  # (x_i − mean(x_i)) · v = x_i · (v − mean(v)): centring moves onto u

    def dot(v: Tensor) -> float:
        return float(float64(v) @ u)

    rows: list[tuple[str, int | None, int | None, float]] = [(EMBED, None, None, dot(trace.tensor("embed")[pos]))]
    reporter = Reporter(progress, "layers", cfg.n_layer)
    reporter.start()
    for l, block in enumerate(model.transformer.h):
        z = float64(trace.tensor(point("attn.z", l))[:, pos])  # [H, D]
        w_o = _weight(block.attn.c_proj.weight, dev).view(-1, H, D)  # [C, H, D]: head h reads columns hD…(h+1)D
        heads = torch.einsum("c,chd,hd->h", u, w_o, z).tolist()  # [H]
        rows += [(HEAD, l, h, v) for h, v in enumerate(heads)]
        attn_b = _weight(block.attn.c_proj.bias, dev)
        if attn_b is not None:
            rows.append((ATTN_BIAS, l, None, dot(attn_b)))
        mlp_b = _weight(block.mlp.c_proj.bias, dev)
        out = float64(trace.tensor(point("mlp.out", l))[pos])  # [C]
        rows.append((MLP, l, None, dot(out - mlp_b if mlp_b is not None else out)))
        if mlp_b is not None:
            rows.append((MLP_BIAS, l, None, dot(mlp_b)))
        reporter.tick()
    if beta is not None:
        rows.append((NORM_BIAS, None, None, float(beta @ d)))  # added after the scale: not divided by σ

    df = pd.DataFrame(rows, columns=COLUMNS)
    df["layer"] = df["layer"].astype("Int64")
    df["head"] = df["head"].astype("Int64")
    logits = trace.part("logits", pos).astype(np.float64)  # [V]
    df.attrs.update(
        logit=float(logits[target] - (logits[baseline] if baseline is not None else 0.0)),
        sigma=float(sigma),
        position=pos,
        target=target,
        baseline=baseline,
    )
    return df


def head_matrix(df: pd.DataFrame, n_layer: int, n_head: int) -> np.ndarray:
    """The `head` rows of a logit_attribution as an [L, H] array."""
    m = np.full((n_layer, n_head), np.nan)
    heads = df[df["component"] == HEAD]
    m[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)] = heads["value"].to_numpy(float)
    return m


def component_labels(df: pd.DataFrame) -> list[str]:
    """A short readable name per row: 'embed', 'L0 H3', 'L0 attn bias', 'L1 MLP', 'ln_f bias'."""
    names = {ATTN_BIAS: "attn bias", MLP: "MLP", MLP_BIAS: "MLP bias"}
    out = []
    for c, l, h in zip(df["component"], df["layer"], df["head"]):
        if c == HEAD:
            out.append(f"L{l} H{h}")
        elif c in names:
            out.append(f"L{l} {names[c]}")
        else:
            out.append({EMBED: "embed", NORM_BIAS: "ln_f bias"}.get(c, str(c)))
    return out
