"""Editing features inside a run: an intervention at the SAE's site that changes some features and
keeps the SAE's error term, x -> x + decode(f') - decode(f) (docs/architecture.md, "Features")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ..checks import real
from ..interventions import Intervention, InterventionError, _ints
from .activations import as_rows, from_rows
from .sae import SAE


def settle_features(edit: Intervention, count: int, owner: str) -> None:
    """Check and normalise a feature edit's `features` (whole numbers below count) and `how` ("zero"
    or a finite number), in place on the frozen dataclass."""
    feats = _ints(edit.features, "features")  # type: ignore[attr-defined]
    if feats is None:
        raise InterventionError("features= names the features to edit, e.g. features=[12]")
    bad = [f for f in feats if not 0 <= f < count]
    if bad:
        raise InterventionError(f"{owner} has {count} features (0 … {count - 1}); not {bad[0]}")
    object.__setattr__(edit, "features", feats)
    how = edit.how  # type: ignore[attr-defined]
    if how != "zero":
        try:
            object.__setattr__(edit, "how", real(how, "how"))
        except ValueError:
            raise InterventionError(f"how must be 'zero' or a number, got {how!r}") from None


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
        settle_features(self, self.sae.d_sae, "the SAE")

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
    sae: SAE | Any, features: Sequence[int], how: str | float = "zero", positions: Sequence[int] | None = None
) -> Intervention:
    """An intervention at sae.site: the named features set to zero (how="zero") or clamped to a
    number, the SAE's error term kept, so x becomes x + decode(f') - decode(f). positions: the
    tokens it edits (all by default). Given a transcoder (tcs[l]) it edits blocks.{l}.mlp.out the
    same way, out + decode(f') − decode(f), f the features of that pass's mlp.in."""
    if isinstance(features, (int, np.integer)):
        features = [int(features)]
    if not isinstance(sae, SAE) and hasattr(sae, "feature_edit"):  # a transcoder makes its own (transcoders/)
        return sae.feature_edit(features, how, positions)
    # the fields hold __post_init__'s normalised tuples; it converts (and checks) these sequences with _ints
    return FeatureEdit(
        sae.site if isinstance(sae, SAE) else "embed",
        None,
        cast("tuple[int, ...] | None", positions),
        sae,
        cast("tuple[int, ...]", features),
        how,
    )
