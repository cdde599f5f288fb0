"""The scan's features (`scan(..., saes=[sae])`, `scan(..., transcoders=tcs)`): each feature's strongest
contexts and how often it fires, reduced batch by batch like the neurons (hooks at each dictionary's
site; the top-k merge of reduce.py, so no [tokens × features] matrix is ever kept).

A Reader is one dictionary of features read at one contract point: an SAE at its site, or one layer's
transcoder at blocks.{l}.mlp.in. Each kind has its pair of tables, its dictionaries told apart by one column:

    features:             sae, feature, rank, value, window, position  (at most one per window, rank 0 the largest)
    feature_density:      sae, feature, fires, density                 (tokens it fires on, their share)
    transcoder_features:  layer, feature, rank, value, window, position
    transcoder_density:   layer, feature, fires, density
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..features.activations import as_rows
from .reduce import top_k
from .store import COLUMNS

# a feature table -> (its density table, the column naming which dictionary a row is of)
KINDS = {"features": ("feature_density", "sae"), "transcoder_features": ("transcoder_density", "layer")}


@dataclass(frozen=True)
class Reader:
    """One dictionary read in the scan: its rows go to `table` with `label` in the naming column."""

    table: str
    label: int  # an SAE's index in saes; a transcoder's layer
    site: str
    width: int  # its number of features
    encode: Callable[[Tensor], Tensor]  # [..., d_in] -> [..., width]
    encode_topk: Callable[[Tensor], tuple[Tensor, Tensor] | None]  # (values, indices) [..., k], or None


def sae_readers(saes: Sequence) -> list[Reader]:
    return [Reader("features", i, s.site, s.d_sae, s.encode, s.encode_topk) for i, s in enumerate(saes)]


def transcoder_readers(tcs) -> list[Reader]:
    """One Reader per layer of a TranscoderSet: each transcoder's features of what its MLP reads."""
    return [Reader("transcoder_features", l, tcs[l].input_site, tcs[l].d_tc, tcs[l].encode, tcs[l].encode_topk)
            for l in tcs.layers]  # fmt: skip


class FeatureScan:
    """Per Reader: the running top-k of (value, window, position) per feature and its firing count."""

    def __init__(self, readers: Sequence[Reader], k: int):
        self.readers = list(readers)
        self.k = k
        self.top: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = [None] * len(self.readers)
        self.fires = [np.zeros(r.width, np.int64) for r in self.readers]
        self.tokens = 0
        self._batch: dict[int, tuple[Tensor, Tensor]] = {}
        self._lengths: Tensor | None = None

    def hooks(self, lengths: Tensor) -> dict:
        """Hooks (contract name -> fn of the batched value) that read each dictionary's features; they
        return the value unchanged."""
        self._lengths = lengths
        self.tokens += int(lengths.sum())

        def read(i: int, r: Reader):
            def fn(value: Tensor) -> Tensor:
                x = as_rows(value, r.site, batched=True).float()  # [B, T, d_in]
                pad = torch.arange(x.size(1), device=x.device)[None, :] >= lengths.to(x.device)[:, None]  # [B, T]
                top = r.encode_topk(x)
                self._batch[i] = self._dense(i, r.encode(x), pad) if top is None else self._sparse(i, top, pad)
                return value

            return fn

        out: dict = {}
        for i, r in enumerate(self.readers):
            fn = read(i, r)
            out[r.site] = fn if r.site not in out else _then(out[r.site], fn)
        return out

    def _dense(self, i: int, f: Tensor, pad: Tensor) -> tuple[Tensor, Tensor]:
        """Each window's largest activation of each feature and its position, [B, F] each, from the
        features [B, T, F]; the firing counts added up."""
        self.fires[i] += ((f > 0) & ~pad[:, :, None]).sum((0, 1)).cpu().numpy()
        return f.masked_fill(pad[:, :, None], float("-inf")).max(dim=1)

    def _sparse(self, i: int, top: tuple[Tensor, Tensor], pad: Tensor) -> tuple[Tensor, Tensor]:
        """_dense from a topk dictionary's k (value, feature) pairs per token [B, T, k]: the same numbers
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
        for i in range(len(self.readers)):
            v, p = self._batch.pop(i)
            value = v.T.cpu().numpy()[None]  # [1, F, B]
            cand = (value, np.broadcast_to(win[None, None, :], value.shape), p.T.cpu().numpy()[None].astype(np.int32))
            held = self.top[i]
            if held is not None:
                values, wins, positions = (np.concatenate([a, b], axis=-1) for a, b in zip(held, cand))
                cand = (values, wins, positions)
            self.top[i] = top_k(*cand, self.k)

    def tables(self) -> dict[str, pd.DataFrame]:
        """The feature and density tables of every kind of dictionary read (empty ones for a kind read
        but never seen), columns in the store's order."""
        rows: dict[str, list[pd.DataFrame]] = {r.table: [] for r in self.readers}
        density: dict[str, list[pd.DataFrame]] = {r.table: [] for r in self.readers}
        for r, held, fires in zip(self.readers, self.top, self.fires):
            if held is None:
                continue
            column = KINDS[r.table][1]
            value, window, position = (a[0] for a in held)  # [F, k]
            F_, K = value.shape
            df = pd.DataFrame(
                {
                    column: r.label,
                    "feature": np.repeat(np.arange(F_), K),
                    "rank": np.tile(np.arange(K), F_),
                    "value": value.reshape(-1),
                    "window": window.reshape(-1),
                    "position": position.reshape(-1).astype(np.int64),
                }
            )
            rows[r.table].append(df[np.isfinite(df.value) & (df.value > 0)])  # a feature that never fired has none
            density[r.table].append(
                pd.DataFrame({column: r.label, "feature": np.arange(r.width), "fires": fires,
                              "density": fires / max(self.tokens, 1)})
            )  # fmt: skip
        out: dict[str, pd.DataFrame] = {}
        for table, parts in rows.items():
            dens = KINDS[table][0]
            out[table] = _joined(parts, COLUMNS[table])
            out[dens] = _joined(density[table], COLUMNS[dens])
        return out


def _joined(parts: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(parts, ignore_index=True)[list(columns)]


def _then(first, second):
    return lambda value: second(first(value))
