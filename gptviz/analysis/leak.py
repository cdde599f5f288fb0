"""The causal mask switched off in a loaded model: the weights reach into the future, and the
predictions change: the leak, on a real model.

The switch is an ordinary intervention: every layer's attn.mask becomes all True, so each query
may read every key, the one it must predict included. The toy version of the same thing, with
numbers a class checks by hand, is gptviz.analysis.worked.leak; the future mass here is the same
sum (worked.future picks the cells j > i), taken over a real model's weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..capture import trace
from ..interventions import Intervene, intervene
from ..model import GPT
from ..names import point
from ..record import Trace
from ..tokenizers import Tokenizer, display_token
from .worked import future


def all_true(mask: Tensor) -> Tensor:
    """The mask with every cell True: every query may read every key."""
    return torch.ones_like(mask, dtype=torch.bool)


def unmask(n_layer: int) -> list[Intervene]:
    """The switch: interventions that set every layer's attn.mask to all True."""
    return [intervene(point("attn.mask", layer), all_true) for layer in range(n_layer)]


def future_mass(weights: np.ndarray) -> np.ndarray:
    """Attention weight on keys after each query (j > i), summed over the queries: [..., T, T] -> [...].

    The same sum as the toy's (worked.masked_softmax): each query's row adds up to 1, so the total
    lies between 0 (a causal head) and T - 1 (every query reading only the future)."""
    w = np.asarray(weights, dtype=np.float64)
    return w[..., future(w.shape[-1])].sum(axis=-1)


def token_loss(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """Cross-entropy (nats) of each position's prediction of the token after it: [T, V] -> [T - 1]."""
    lg = torch.as_tensor(np.array(logits[:-1], dtype=np.float64))
    target = torch.as_tensor(np.asarray(ids[1:], dtype=np.int64))
    return torch.nn.functional.cross_entropy(lg, target, reduction="none").numpy()


@dataclass(frozen=True)
class Side:
    """One run of the prompt: with the causal mask (as the model is meant to run) or without it."""

    trace: Trace
    future_mass: np.ndarray  # [L, H]: weight on future keys, summed over the queries
    probs: np.ndarray  # [T, V]: each position's next-token distribution
    loss: np.ndarray  # [T - 1]: nats on the token that really came next

    @property
    def mean_loss(self) -> float:
        """Mean per-token loss over the prompt (nats)."""
        return float(self.loss.mean()) if self.loss.size else float("nan")

    def weights(self, layer: int, head: int) -> np.ndarray:
        """[T, T] attention weights of one head."""
        return np.asarray(self.trace[point("attn.weights", layer)][head])


@dataclass(frozen=True)
class Leak:
    """The same prompt through the same model, with the mask and with the switch."""

    masked: Side
    unmasked: Side
    ids: list[int]
    tokens: list[str]

    def top_k(self, position: int, k: int = 5, tokenizer: Tokenizer | None = None) -> pd.DataFrame:
        """The k likeliest next tokens at one position, with the mask and without it, side by side,
        and the token that really came next (when the prompt has one)."""
        T = len(self.ids)
        if not 0 <= position < T:
            raise IndexError(f"position {position} is not in the prompt (0 … {T - 1})")
        rows = {}
        for label, side in (("with mask", self.masked), ("without mask", self.unmasked)):
            p = side.probs[position]
            order = np.argsort(-p, kind="stable")[:k]
            rows[f"{label}: token"] = [_name(int(i), tokenizer) for i in order]
            rows[f"{label}: p"] = [float(p[i]) for i in order]
        return pd.DataFrame(rows, index=pd.RangeIndex(1, k + 1, name="rank"))

    def loss_table(self) -> pd.DataFrame:
        """Per position: the token, the one after it, and its loss with and without the mask."""
        return pd.DataFrame(
            {
                "position": range(len(self.ids) - 1),
                "token": self.tokens[:-1],
                "next": self.tokens[1:],
                "loss with mask": self.masked.loss,
                "loss without mask": self.unmasked.loss,
            }
        )


def _name(i: int, tokenizer: Tokenizer | None) -> str:
    return display_token(tokenizer.decode([i])) if tokenizer is not None else str(i)


def _side(t: Trace, ids: Sequence[int]) -> Side:
    L = t.n_layer
    mass = np.stack([future_mass(t[point("attn.weights", layer)]) for layer in range(L)])  # [L, H]
    logits = np.asarray(t["logits"], dtype=np.float64)
    probs = torch.softmax(torch.as_tensor(logits), dim=-1).numpy()
    return Side(trace=t, future_mass=mass, probs=probs, loss=token_loss(logits, ids))


def mask_leak(model: GPT, ids: Sequence[int], tokenizer: Tokenizer | None = None) -> Leak:
    """Run the prompt twice, with the causal mask and with every layer's mask set to all True.

    Returns a Leak: per side the future mass of every layer and head ([L, H]; exactly 0 with the
    mask), the next-token probabilities and the per-token loss, plus the prompt's tokens."""
    ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
    on = trace(model, ids, tokenizer)
    off = trace(model, ids, tokenizer, interventions=unmask(model.config.n_layer))
    return Leak(masked=_side(on, ids), unmasked=_side(off, ids), ids=ids, tokens=list(on.tokens))


@torch.no_grad()
def text_loss(model: GPT, ids: Sequence[int], causal: bool = True) -> float:
    """Mean next-token loss over a longer text, read as consecutive windows of block_size tokens,
    with the causal mask or with the switch (the leaky model's training-time view)."""
    block = model.config.block_size
    data = torch.as_tensor(list(ids), dtype=torch.long)
    total, count = 0.0, 0
    for start in range(0, len(data) - 1, block):
        window = data[start : start + block + 1]
        if len(window) < 2:
            break
        x = window[:-1].tolist()
        edits = () if causal else unmask(model.config.n_layer)
        lg = trace(model, x, interventions=edits).tensor("logits").double().cpu()
        # every position of the window predicts the token after it, the window's last included
        loss = torch.nn.functional.cross_entropy(lg, window[1:], reduction="none").numpy()
        total, count = total + float(loss.sum()), count + loss.size
    return total / count
