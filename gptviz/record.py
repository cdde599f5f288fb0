"""The Trace: the record of one forward pass over one prompt (the Trace contract: the table in
the README's "From Python"; gptviz.names spells every name).

`trace[name]` gives the exact values as a read-only NumPy array, batch axis dropped:

    embed                      [T, C]    blocks.{l}.attn.scores   [H, T, T]  (before the mask)
    blocks.{l}.resid_pre       [T, C]    blocks.{l}.attn.mask     [T, T] bool
    blocks.{l}.attn.q / k / v  [H, T, D] blocks.{l}.attn.weights  [H, T, T]
    blocks.{l}.attn.z          [H, T, D] blocks.{l}.attn.out      [T, C]
    blocks.{l}.resid_mid       [T, C]    blocks.{l}.mlp.in        [T, C]     (what the MLP reads)
    blocks.{l}.mlp.hidden      [T, 4C]   blocks.{l}.mlp.out       [T, C]
    blocks.{l}.resid_post      [T, C]
    ln_f                       [T, C]    logits                   [T, V]

Besides the tensors it holds the token strings and ids, the shape trace (every module in call
order with its input and output shapes) and residual-stream statistics.

Scores and weights grow as L·H·T² (1.2 GB for GPT-2 small at T = 1024), so a Trace from
`gptviz.trace` keeps q and k and rebuilds a layer's maps each time they are asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .names import RESID_SITES, in_forward_order, parse, point


def _numpy(t: Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
        t = t.float()
    a = t.cpu().numpy()
    a.flags.writeable = False  # views share memory with the Trace: nobody may edit the record
    return a


class Trace(Mapping):
    """One forward pass over one prompt. A read-only mapping from contract names to arrays."""

    interventions: tuple = ()  # the edits of an intervened run (gptviz.interventions); none for a plain run
    # set by gptviz.trace (None for a Trace read from a file): each layer's AttentionSpec, how its q and k
    # become weights, and the model's GPTConfig, which the pages name (rotary, grouped heads, MLP width)
    attention_specs: list[Any] | None = None
    config: Any = None

    def __init__(
        self,
        tensors: dict[str, Tensor],
        tokens: list[str],
        token_ids: np.ndarray,
        shapes: list[dict] | Callable[[], list[dict]],
        lazy: Mapping[str, Callable[[], Tensor]] | None = None,
        names: set[str] | None = None,
        batched: bool = False,
    ) -> None:
        """tensors: captured values. lazy: values computed from them when asked for, and not kept
        (the attention maps grow as L·H·T²; q and k are enough to rebuild them exactly). names: the
        names it answers (what was asked for; the tensors may hold more, to rebuild them); None: all.
        batched: every value, held or rebuilt, still has the forward's batch axis of one, dropped when read."""
        self._tensors = tensors
        self._lazy = lazy or {}
        self._batched = batched
        self._rows: dict[str, Tensor] = {}  # name -> its last position's value, kept where the rest is rebuilt
        self.tokens = list(tokens)
        self.token_ids = np.asarray(token_ids, dtype=np.int64)
        self._shapes = shapes
        answers = [*tensors, *self._lazy] if names is None else [n for n in names if n in tensors or n in self._lazy]
        self._names = in_forward_order(answers)

    # --- the mapping -------------------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        return _numpy(self.tensor(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:  # Mapping's own would rebuild a lazy value to say yes
        return name in self._names_set

    def tensor(self, name: str) -> Tensor:
        """The value as a torch tensor on the model's device: for computation, not display."""
        if name not in self._names_set:
            raise KeyError(f"{name!r} is not in this Trace; names look like {self._names[:3]} ...")
        value = self._tensors[name] if name in self._tensors else self._lazy[name]()
        return value[0] if self._batched else value

    @cached_property
    def _names_set(self) -> frozenset[str]:
        return frozenset(self._names)

    def keep_row(self, name: str, row: Tensor) -> None:
        """Hold name's value at the last position (as the forward computed it), so part(name, -1)
        reads it without rebuilding all T rows. For the capture that records the Trace."""
        self._rows[name] = row

    def held(self, name: str) -> bool:
        """Whether the Trace holds name's value (False: it rebuilds it when asked, as the attention
        maps from q and k, or does not know the name)."""
        return name in self._tensors

    def part(self, name: str, index: int | slice | tuple[int | slice, ...]) -> np.ndarray:
        """trace[name][index], with only that part leaving the model's device: one position's
        logits are V floats, all of them T × V."""
        last = index if isinstance(index, int) else None
        if name in self._rows and name in self._names_set and last in (-1, self.n_tokens - 1):
            return _numpy(self._rows[name])
        return _numpy(self.tensor(name)[index])

    @property
    def names(self) -> list[str]:
        """Every name this Trace answers, in forward order."""
        return list(self._names)

    @property
    def n_layer(self) -> int:
        """L: the number of blocks of the model recorded (of its config; else as many as the names count)."""
        config = getattr(self, "config", None)
        if config is not None:
            return config.n_layer
        layers = [parse(n)[0] for n in (*self._tensors, *self._lazy)]
        return max((l for l in layers if l is not None), default=-1) + 1

    @property
    def n_tokens(self) -> int:
        """T: the number of tokens of the prompt."""
        return len(self.token_ids)

    @property
    def nbytes(self) -> int:
        """Bytes the Trace holds right now: each memory block once (q, k and v share one, and
        resid_post of a block is resid_pre of the next); what is rebuilt on demand is not held."""
        held = [*self._tensors.values(), *self._rows.values()]
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}
        return sum(storages.values())

    # --- derived tables ----------------------------------------------------------------
    @property
    def shape_trace(self) -> pd.DataFrame:
        """Every hooked module in call order: path, type, input and output shapes (tuples of shape
        tuples, one per tensor argument), capture name."""
        if callable(self._shapes):  # rebuilt when first asked for (capture.shape_rows)
            self._shapes = self._shapes()
        df = pd.DataFrame(self._shapes, columns=["module", "type", "inputs", "outputs", "capture"])
        for col in ("inputs", "outputs"):
            df[col] = [tuple(tuple(s) for s in shapes) for shapes in df[col]]
        df.index.name = "step"
        return df

    @cached_property
    def resid_stats(self) -> pd.DataFrame:
        """Mean, std (population) and L2 norm over the C axis of every residual site, per position."""
        rows = []
        for l in range(self.n_layer):
            for site in RESID_SITES:
                if point(site, l) not in self._names_set:  # a Trace of chosen names
                    continue
                x = self[point(site, l)].astype(np.float64)  # [T, C]
                for pos, (m, s, n) in enumerate(zip(x.mean(1), x.std(1), np.linalg.norm(x, axis=1))):
                    rows.append((l, site, pos, self.tokens[pos], m, s, n))
        return pd.DataFrame(rows, columns=["layer", "site", "position", "token", "mean", "std", "norm"])

    # --- files -------------------------------------------------------------------------
    def to_npz(self, path: str | Path) -> None:
        """Write the contract's names as keys (float32; the mask stays bool), plus tokens and token_ids.
        The shape trace is not written: it describes the run, not the values."""
        arrays: dict[str, Any] = {}  # np.savez's keywords: mypy reads them as its own parameters otherwise
        for name in self._names:
            a = self[name]
            arrays[name] = a if a.dtype == np.bool_ else a.astype(np.float32)
        np.savez(path, tokens=np.array(self.tokens, dtype=np.str_), token_ids=self.token_ids, **arrays)

    @classmethod
    def from_npz(cls, path: str | Path) -> Trace:
        """Read back what to_npz wrote: the same names and values (float32), no shape trace."""
        with np.load(path, allow_pickle=False) as f:
            tokens = [str(t) for t in f["tokens"]]
            token_ids = f["token_ids"]
            names = [k for k in f.files if k not in ("tokens", "token_ids")]
            tensors = {k: torch.from_numpy(f[k].copy()) for k in names}
        return cls(tensors=tensors, tokens=tokens, token_ids=token_ids, shapes=[])
