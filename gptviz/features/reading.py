"""What a page reads about features: the strongest features of a prompt, and a feature's logit
effect (its decoder row through the unembedding, W_U · W_dec[f]: the tokens it promotes and
suppresses when it fires, before the final norm)."""

from __future__ import annotations

import numpy as np
import torch

from ..names import parse
from .sae import SAE
from .sites import SAEError

WRITES_RESIDUAL = ("resid_pre", "resid_mid", "resid_post", "attn.out", "mlp.out")


def top_features(acts: np.ndarray, n: int) -> np.ndarray:
    """The n features with the largest activation anywhere in acts [T, d_sae], strongest first
    (features that never fire are left out)."""
    peak = acts.max(axis=0)  # [d_sae]
    order = np.argsort(-peak, kind="stable")[:n]
    return order[peak[order] > 0]


@torch.no_grad()
def logit_effect(model, sae: SAE, feature: int, k: int = 10) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(promoted, suppressed): the k token ids whose logit W_dec[feature] raises most, and lowers
    most, with the amounts (per unit of activation). The SAE must write into the residual stream."""
    if parse(sae.site)[1] not in WRITES_RESIDUAL:
        raise SAEError(
            f"{sae.site} is not in the residual stream's width: a logit effect needs one of {WRITES_RESIDUAL}"
        )
    if not 0 <= feature < sae.d_sae:
        raise SAEError(f"the SAE has {sae.d_sae} features; not {feature}")
    effect = model.lm_head.weight.float() @ sae.W_dec[feature].float().to(model.device)  # [V]
    k = min(k, effect.numel())
    up, down = torch.topk(effect, k), torch.topk(-effect, k)
    return (
        list(zip(up.indices.tolist(), up.values.tolist())),
        list(zip(down.indices.tolist(), (-down.values).tolist())),
    )
