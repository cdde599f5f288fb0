"""The scan's SAE features (`scan(..., saes=[sae])`): each feature's strongest contexts and how
often it fires, reduced batch by batch like the neurons (hooks at each SAE's site; the top-k merge
of reduce.py, so no [tokens × features] matrix is ever kept).

    features:        sae, feature, rank, value, window, position  (at most one per window, rank 0 the largest)
    feature_density: sae, feature, fires, density                 (tokens it fires on, their share)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..features.activations import as_rows
from .reduce import top_k

FEATURE_COLUMNS = ("feature", "rank", "value", "window", "position", "sae")
DENSITY_COLUMNS = ("sae", "feature", "fires", "density")


class FeatureScan:
    """Per SAE: the running top-k of (value, window, position) per feature and its firing count."""

    def __init__(self, saes: Sequence, k: int):
        self.saes = list(saes)
        self.k = k
        self.top: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = [None] * len(self.saes)
        self.fires = [np.zeros(s.d_sae, np.int64) for s in self.saes]
        self.tokens = 0
        self._batch: dict[int, tuple[Tensor, Tensor]] = {}
        self._lengths: Tensor | None = None

    def hooks(self, lengths: Tensor) -> dict:
        """Hooks (contract name -> fn of the batched value) that read each SAE's features; they
        return the value unchanged."""
        self._lengths = lengths
        self.tokens += int(lengths.sum())

        def reader(i: int, sae):
            def fn(value: Tensor) -> Tensor:
                x = as_rows(value, sae.site, batched=True).float()  # [B, T, d_in]
                pad = torch.arange(x.size(1), device=x.device)[None, :] >= lengths.to(x.device)[:, None]  # [B, T]
                top = sae.encode_topk(x)
                self._batch[i] = self._dense(i, sae.encode(x), pad) if top is None else self._sparse(i, top, pad)
                return value

            return fn

        out: dict = {}
        for i, sae in enumerate(self.saes):
            fn = reader(i, sae)
            out[sae.site] = fn if sae.site not in out else _then(out[sae.site], fn)
        return out

    def _dense(self, i: int, f: Tensor, pad: Tensor) -> tuple[Tensor, Tensor]:
        """Each window's largest activation of each feature and its position, [B, F] each, from the
        features [B, T, F]; the firing counts added up."""
        self.fires[i] += ((f > 0) & ~pad[:, :, None]).sum((0, 1)).cpu().numpy()
        return f.masked_fill(pad[:, :, None], float("-inf")).max(dim=1)

    def _sparse(self, i: int, top: tuple[Tensor, Tensor], pad: Tensor) -> tuple[Tensor, Tensor]:
        """_dense from a topk SAE's k (value, feature) pairs per token [B, T, k]: the same numbers
        from B·T·k entries, not B·T·F (a third of the SAE's cost in the scan)."""
        values, index = top
        B, T, _ = values.shape
        F = len(self.fires[i])
        live = (values > 0) & ~pad[:, :, None]  # [B, T, k]: the features firing on real tokens
        cell = torch.arange(B, device=index.device)[:, None, None] * F + index  # [B, T, k]: (window, feature)
        self.fires[i] += np.bincount(index[live].cpu().numpy(), minlength=F)
        v = values.new_zeros(B * F).scatter_reduce(0, cell[live], values[live], "amax")  # 0: it did not fire
        # the first position where the window's maximum is reached (max(dim=1)'s choice on the dense features)
        at = live & (values == v[cell])
        where = torch.arange(T, device=index.device)[None, :, None].expand(B, T, index.size(-1))
        p = torch.full((B * F,), T, dtype=torch.long, device=index.device)
        p = p.scatter_reduce(0, cell[at], where[at], "amin").masked_fill_(v == 0, 0)
        return v.view(B, F), p.view(B, F)

    def add(self, windows: Sequence[int]) -> None:
        """Merge the batch just run (its windows in batch order) into the running top-k."""
        win = np.asarray(windows, dtype=np.int64)
        for i in range(len(self.saes)):
            v, p = self._batch.pop(i)
            value = v.T.cpu().numpy()[None]  # [1, F, B]
            cand = (value, np.broadcast_to(win[None, None, :], value.shape), p.T.cpu().numpy()[None].astype(np.int32))
            held = self.top[i]
            if held is not None:
                values, wins, positions = (np.concatenate([a, b], axis=-1) for a, b in zip(held, cand))
                cand = (values, wins, positions)
            self.top[i] = top_k(*cand, self.k)

    def tables(self) -> dict[str, pd.DataFrame]:
        rows, density = [], []
        for i, sae in enumerate(self.saes):
            held = self.top[i]
            if held is None:
                continue
            value, window, position = (a[0] for a in held)  # [F, k]
            F_, K = value.shape
            df = pd.DataFrame(
                {
                    "feature": np.repeat(np.arange(F_), K),
                    "rank": np.tile(np.arange(K), F_),
                    "value": value.reshape(-1),
                    "window": window.reshape(-1),
                    "position": position.reshape(-1).astype(np.int64),
                    "sae": i,
                }
            )
            rows.append(df[np.isfinite(df.value) & (df.value > 0)])  # a feature that never fired has no context
            fires = self.fires[i]
            density.append(
                pd.DataFrame(
                    {"sae": i, "feature": np.arange(sae.d_sae), "fires": fires, "density": fires / self.tokens}
                )
            )
        empty = lambda cols: pd.DataFrame(columns=list(cols))  # noqa: E731
        return {
            "features": pd.concat(rows, ignore_index=True) if rows else empty(FEATURE_COLUMNS),
            "feature_density": pd.concat(density, ignore_index=True) if density else empty(DENSITY_COLUMNS),
        }


def _then(first, second):
    return lambda value: second(first(value))
