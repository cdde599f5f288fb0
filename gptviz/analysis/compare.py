"""Two Traces of the same model shape side by side: two prompts of the same length on one
checkpoint, or one prompt on two checkpoints (for example two steps of one training run).

Every difference is A − B. The next-token divergence is KL(A ‖ B) = Σ p_A (log p_A − log p_B), in
nats, per position: how much B is surprised by A's distribution. Attention maps grow as L·H·T², so
the differences are made one layer at a time (`attention_difference`), and `attention_change` keeps
only one number per head, made a band of query rows at a time: it never holds a whole map.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..errors import GptvizError
from ..names import point
from .heads import SCORES, head_scores
from .map_blocks import weight_bands
from .next_token import nan_logits, per_token_loss


class CompareError(GptvizError, ValueError):
    """Two Traces that cannot be compared position by position (other shapes or lengths)."""


def check_comparable(a, b) -> None:
    """Raise CompareError unless a and b have the same layers, heads, vocabulary and length."""
    if a.n_tokens != b.n_tokens:
        raise CompareError(f"the prompts have {a.n_tokens} and {b.n_tokens} tokens; a comparison needs the same length")
    if a.n_layer != b.n_layer:
        raise CompareError(f"the models have {a.n_layer} and {b.n_layer} layers; compare models of the same shape")
    for name in (point("attn.q", 0), "logits"):
        sa, sb = tuple(a.tensor(name).shape), tuple(b.tensor(name).shape)
        if sa != sb:
            what = "heads × head size" if name != "logits" else "vocabulary"
            raise CompareError(f"the models differ in {what} ({sa} vs {sb}); compare models of the same shape")


def check_models(config_a, tokenizer_a, config_b, tokenizer_b, n_tokens: int, names=("A", "B")) -> None:
    """Before B runs A's token ids: raise CompareError, one line naming both checkpoints, unless B has
    A's layers, heads and vocabulary (the same size, and the same token behind each id when both
    have a tokenizer) and a context that holds the prompt. Run on the loaded configs, so another
    vocabulary is said as such, not as "token id 58 is outside the vocabulary"."""
    a, b = names
    shape_a = (config_a.n_layer, config_a.n_head, config_a.vocab_size)
    shape_b = (config_b.n_layer, config_b.n_head, config_b.vocab_size)
    if shape_a != shape_b:
        raise CompareError(
            f"{a} has {shape_a[0]} layers × {shape_a[1]} heads and a vocabulary of {shape_a[2]:,}; {b} has "
            f"{shape_b[0]} × {shape_b[1]} and {shape_b[2]:,}: choose a checkpoint B of the same shape and vocabulary"
        )
    if tokenizer_a is not None and tokenizer_b is not None:
        ids = range(config_a.vocab_size)
        if tokenizer_a.token_strings(ids) != tokenizer_b.token_strings(ids):
            raise CompareError(
                f"{a} and {b} have vocabularies of the same size but other tokens behind the same ids: "
                "choose a checkpoint B of the same shape and vocabulary"
            )
    if n_tokens > config_b.block_size:
        raise CompareError(f"the prompt has {n_tokens} tokens and {b} reads at most {config_b.block_size}")


def _log_probs(logits) -> torch.Tensor:
    return torch.log_softmax(
        torch.as_tensor(np.asarray(logits) if not torch.is_tensor(logits) else logits).double(), -1
    )


def kl_divergence(logits_a, logits_b) -> np.ndarray:
    """KL(softmax(a) ‖ softmax(b)) in nats along the last axis: [..., V] logits -> [...]."""
    la, lb = _log_probs(logits_a), _log_probs(logits_b).to(_log_probs(logits_a).device)
    kl = (la.exp() * (la - lb)).sum(-1)
    return kl.clamp_min(0.0).cpu().numpy()  # rounding can leave -1e-17 where the two are equal


def attention_difference(a, b, layer: int) -> np.ndarray:
    """A's attention weights minus B's in one layer: [H, T, T], each cell in [-1, 1]."""
    check_comparable(a, b)
    name = point("attn.weights", layer)
    wa, wb = a.tensor(name).float(), b.tensor(name).float()
    return (wa - wb.to(wa.device)).cpu().numpy()


def attention_change(a, b) -> pd.DataFrame:
    """One row per (layer, head): the largest |A − B| over the map, the mean |A − B| over the causal
    cells, and the total variation between the rows (half the L1 distance), averaged over queries.
    Made a band of query rows at a time (map_blocks.weight_bands), never a whole map of either run."""
    check_comparable(a, b)
    rows, T = [], a.n_tokens
    causal = T * (T + 1) / 2
    for layer in range(a.n_layer):
        top, sums = [], []
        for (_, wa, _, _), (_, wb, _, _) in zip(weight_bands(a, layer), weight_bands(b, layer), strict=True):
            keys = min(wa.size(-1), wb.size(-1))  # a rebuilt band reads only the keys its rows may see
            d = (wa[..., :keys].float() - wb[..., :keys].float().to(wa.device)).abs()  # [H, rows, keys]
            top.append(d.amax(dim=(-2, -1)))
            sums.append(d.sum(dim=(-2, -1)))  # [H]: each row's L1 distance, summed over the band's rows
        biggest = torch.stack(top).amax(0)  # NaN anywhere stays NaN
        total = torch.stack(sums).sum(0)
        tv = 0.5 * total
        for head in range(biggest.numel()):
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "max_abs_diff": float(biggest[head]),
                    "mean_abs_diff": float(total[head] / causal),
                    "row_tv": float(tv[head] / T),
                }
            )
    return pd.DataFrame(rows, columns=["layer", "head", "max_abs_diff", "mean_abs_diff", "row_tv"])


def head_score_change(a, b) -> pd.DataFrame:
    """Head scores of both Traces and their change: one row per (layer, head) with, for every score
    of gptviz.head_scores, `<score>_a`, `<score>_b` and `<score>_change` (= b − a: how the head moved
    from A to B, e.g. from an early checkpoint to a later one), plus both labels."""
    check_comparable(a, b)
    return score_change(head_scores(a), head_scores(b))


def score_change(sa: pd.DataFrame, sb: pd.DataFrame) -> pd.DataFrame:
    """head_score_change of two head_scores tables already made (a page's cached ones)."""
    out = sa[["layer", "head"]].copy()
    for s in SCORES:
        out[f"{s}_a"] = sa[s].to_numpy()
        out[f"{s}_b"] = sb[s].to_numpy()
        out[f"{s}_change"] = sb[s].to_numpy() - sa[s].to_numpy()
    out["label_a"], out["label_b"] = sa["label"].to_numpy(), sb["label"].to_numpy()
    return out


def next_token_divergence(a, b, tokenizer=None) -> pd.DataFrame:
    """Per position: both Traces' tokens, their most likely next tokens with probabilities, and
    KL(A ‖ B) and KL(B ‖ A) of the next-token distributions, in nats."""
    check_comparable(a, b)
    la, lb = a.tensor("logits"), b.tensor("logits")
    lb = lb.to(la.device)
    pa, pb = torch.softmax(la.double(), -1), torch.softmax(lb.double(), -1)
    top_a, top_b = pa.max(-1), pb.max(-1)
    # where the logits are NaN there is no most likely token (max would name id 0): empty, and p NaN
    nan_a, nan_b = nan_logits(la), nan_logits(lb)

    def names(top, nan) -> list[str]:
        ids = top.indices.tolist()
        return ["" if bad else tokenizer.decode([i]) if tokenizer is not None else str(i) for i, bad in zip(ids, nan)]

    return pd.DataFrame(
        {
            "position": np.arange(a.n_tokens),
            "token_a": list(a.tokens),
            "token_b": list(b.tokens),
            "top_a": names(top_a, nan_a),
            "p_top_a": np.where(nan_a, np.nan, top_a.values.cpu().numpy()),
            "top_b": names(top_b, nan_b),
            "p_top_b": np.where(nan_b, np.nan, top_b.values.cpu().numpy()),
            "kl_ab": kl_divergence(la, lb),
            "kl_ba": kl_divergence(lb, la),
        }
    )


def loss_comparison(a, b) -> pd.DataFrame:
    """Per predicted position (1..T-1): each Trace's loss on its own next token, and B − A."""
    check_comparable(a, b)
    la, lb = per_token_loss(a.tensor("logits"), a.token_ids), per_token_loss(b.tensor("logits"), b.token_ids)
    return pd.DataFrame(
        {
            "position": la["position"].to_numpy(),
            "token_a": [a.tokens[p] for p in la["position"]],
            "token_b": [b.tokens[p] for p in lb["position"]],
            "loss_a": la["loss_nats"].to_numpy(),
            "loss_b": lb["loss_nats"].to_numpy(),
            "change": lb["loss_nats"].to_numpy() - la["loss_nats"].to_numpy(),
        }
    )


def first_difference(a, b) -> int | None:
    """The first position where the two prompts hold different tokens (None when they are the same)."""
    diff = np.flatnonzero(np.asarray(a.token_ids) != np.asarray(b.token_ids))
    return int(diff[0]) if diff.size else None
