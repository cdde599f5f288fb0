"""Editing features inside a run: an intervention at the SAE's site that changes some features and
keeps the SAE's error term, x -> x + decode(f') - decode(f) (docs/architecture.md, "Features")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch
from torch import Tensor

from ..checks import real
from ..interventions import Intervention, InterventionError, _ints
from .activations import as_rows, from_rows
from .sae import SAE


@dataclass(frozen=True, eq=False)
class FeatureEdit(Intervention):
    """Set some of an SAE's features to zero or to a number at its site; compared by identity."""

    sae: SAE | None = field(default=None, repr=False)
    features: tuple[int, ...] = ()
    how: str | float = "zero"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.sae, SAE):
            raise InterventionError(f"edit_features needs an SAE (gptviz.load_sae), got {type(self.sae).__name__}")
        feats = _ints(self.features, "features")
        if feats is None:
            raise InterventionError("features= names the features to edit, e.g. features=[12]")
        bad = [f for f in feats if not 0 <= f < self.sae.d_sae]
        if bad:
            raise InterventionError(f"the SAE has {self.sae.d_sae} features (0 … {self.sae.d_sae - 1}); not {bad[0]}")
        object.__setattr__(self, "features", feats)
        if self.how != "zero":
            try:
                object.__setattr__(self, "how", real(self.how, "how"))
            except ValueError:
                raise InterventionError(f"how must be 'zero' or a number, got {self.how!r}") from None

    @property
    def pointwise(self) -> bool:
        return True

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        sae = self.sae
        assert sae is not None  # __post_init__ refuses anything but an SAE
        rows = as_rows(value, self.name, batched)  # [(B,) T, d_in]
        if rows.size(-1) != sae.d_in:
            raise InterventionError(f"the SAE reads {sae.d_in} values per token; {self.name} has {rows.size(-1)}")
        index = torch.tensor(self.features, device=rows.device)
        to = 0.0 if self.how == "zero" else float(self.how)

        def change(f: Tensor) -> Tensor:
            return f.index_fill(-1, index, to)

        with torch.no_grad():
            new = sae.edit(rows.float(), change).to(value.dtype)
        return from_rows(new, value, self.name)

    def describe(self) -> str:
        how = "zero" if self.how == "zero" else f"= {self.how:g}"
        feats = ", ".join(map(str, self.features))
        return f"edit features {feats} of the SAE at {super().describe()} ({how})"


def edit_features(
    sae: SAE, features: Sequence[int], how: str | float = "zero", positions: Sequence[int] | None = None
) -> FeatureEdit:
    """An intervention at sae.site: the named features set to zero (how="zero") or clamped to a
    number, the SAE's error term kept, so x becomes x + decode(f') - decode(f). positions: the
    tokens it edits (all by default)."""
    if isinstance(features, (int, np.integer)):
        features = [int(features)]
    # the fields hold __post_init__'s normalised tuples; it converts (and checks) these sequences with _ints
    return FeatureEdit(
        sae.site if isinstance(sae, SAE) else "embed",
        None,
        cast("tuple[int, ...] | None", positions),
        sae,
        cast("tuple[int, ...]", features),
        how,
    )
