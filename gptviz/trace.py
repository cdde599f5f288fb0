"""The Trace: the record of one forward pass over one prompt (DESIGN.md, "The Trace contract").

`trace[name]` gives the exact values as a read-only NumPy array, batch axis dropped:

    embed                      [T, C]    blocks.{l}.attn.scores   [H, T, T]  (before the mask)
    blocks.{l}.resid_pre       [T, C]    blocks.{l}.attn.mask     [T, T] bool
    blocks.{l}.attn.q / k / v  [H, T, D] blocks.{l}.attn.weights  [H, T, T]
    blocks.{l}.resid_mid       [T, C]    ln_f                     [T, C]
    blocks.{l}.resid_post      [T, C]    logits                   [T, V]

Besides the tensors it holds the token strings and ids, the shape trace (every module in call
order with its input and output shapes) and residual-stream statistics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

BLOCK_SITES = (
    "resid_pre",
    "attn.q",
    "attn.k",
    "attn.v",
    "attn.scores",
    "attn.mask",
    "attn.weights",
    "resid_mid",
    "resid_post",
)
RESID_SITES = ("resid_pre", "resid_mid", "resid_post")


def contract_names(n_layer: int) -> list[str]:
    """Every tensor name of a Trace of an n_layer model, in forward order."""
    blocks = [f"blocks.{l}.{site}" for l in range(n_layer) for site in BLOCK_SITES]
    return ["embed", *blocks, "ln_f", "logits"]


def _numpy(t: Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
        t = t.float()
    a = t.cpu().numpy()
    a.flags.writeable = False  # views share memory with the Trace: nobody may edit the record
    return a


class Trace(Mapping):
    """One forward pass over one prompt. A read-only mapping from contract names to arrays."""

    def __init__(self, tensors: dict[str, Tensor], tokens: list[str], token_ids: np.ndarray, shapes: list[dict]):
        self._tensors = tensors
        self.tokens = list(tokens)
        self.token_ids = np.asarray(token_ids, dtype=np.int64)
        self._shapes = shapes

    # --- the mapping -------------------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return _numpy(self._tensors[name])
        except KeyError:
            raise KeyError(f"{name!r} is not in this Trace; names look like {self.names[:3]} ...") from None

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def tensor(self, name: str) -> Tensor:
        """The captured torch tensor itself (on the model's device): for computation, not display."""
        return self._tensors[name]

    @property
    def names(self) -> list[str]:
        return list(self._tensors)

    @property
    def n_layer(self) -> int:
        return sum(1 for n in self._tensors if n.endswith(".resid_pre"))

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def nbytes(self) -> int:
        """Bytes the captured tensors hold right now."""
        return sum(t.numel() * t.element_size() for t in self._tensors.values())

    # --- derived tables ----------------------------------------------------------------
    @property
    def shape_trace(self) -> pd.DataFrame:
        """Every hooked module in call order: path, type, input and output shapes, capture name."""
        df = pd.DataFrame(self._shapes, columns=["module", "type", "inputs", "outputs", "capture"])
        for col in ("inputs", "outputs"):
            df[col] = [", ".join(str(tuple(s)) for s in shapes) for shapes in df[col]]
        df.index.name = "step"
        return df

    @cached_property
    def resid_stats(self) -> pd.DataFrame:
        """Mean, std (population) and L2 norm over the C axis of every residual site, per position."""
        rows = []
        for l in range(self.n_layer):
            for site in RESID_SITES:
                x = self[f"blocks.{l}.{site}"].astype(np.float64)  # [T, C]
                for pos, (m, s, n) in enumerate(zip(x.mean(1), x.std(1), np.linalg.norm(x, axis=1))):
                    rows.append((l, site, pos, self.tokens[pos], m, s, n))
        return pd.DataFrame(rows, columns=["layer", "site", "position", "token", "mean", "std", "norm"])

    # --- files -------------------------------------------------------------------------
    def to_npz(self, path: str | Path) -> None:
        """Write the contract's names as keys (float32; the mask stays bool), plus tokens and token_ids.
        The shape trace is not written: it describes the run, not the values."""
        arrays = {}
        for name, t in self._tensors.items():
            a = self[name]
            arrays[name] = a if a.dtype == np.bool_ else a.astype(np.float32)
        np.savez(path, tokens=np.array(self.tokens, dtype=np.str_), token_ids=self.token_ids, **arrays)

    @classmethod
    def from_npz(cls, path: str | Path) -> Trace:
        with np.load(path, allow_pickle=False) as f:
            tokens = [str(t) for t in f["tokens"]]
            token_ids = f["token_ids"]
            names = [k for k in f.files if k not in ("tokens", "token_ids")]
            tensors = {k: torch.from_numpy(f[k].copy()) for k in sorted(names, key=_forward_order)}
        return cls(tensors=tensors, tokens=tokens, token_ids=token_ids, shapes=[])


def _forward_order(name: str) -> tuple:
    m = re.match(r"blocks\.(\d+)\.(.+)", name)
    if m:
        return (1, int(m.group(1)), BLOCK_SITES.index(m.group(2)))
    return ({"embed": 0, "ln_f": 2, "logits": 3}.get(name, 4), 0, 0)
