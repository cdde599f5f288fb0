"""Editing transcoder features inside a run: an edit of blocks.{l}.mlp.out that changes some of the
layer's transcoder features and keeps its error term, out -> out + (f' − f) @ W_dec, f the features of
the same pass's mlp.in (docs/circuits.md, "Train, load, measure"). Editing nothing changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..features.edits import settle_features
from ..interventions import Intervention, InterventionError, seen
from ..names import point


@dataclass(frozen=True, eq=False)
class TranscoderEdit(Intervention):
    """Set some of a transcoder's features to zero or to a number in its layer's mlp.out; compared by identity."""

    transcoder: Any = field(default=None, repr=False)  # a Transcoder (transcoder.py builds these edits)
    features: tuple[int, ...] = ()
    how: str | float = "zero"

    def __post_init__(self):
        super().__post_init__()
        tc = self.transcoder
        if not all(hasattr(tc, a) for a in ("d_tc", "d_model", "edit")):
            raise InterventionError(f"a transcoder edit needs a Transcoder (tcs[l]), got {type(tc).__name__}")
        settle_features(self, tc.d_tc, "the transcoder")

    @property
    def reads(self) -> str:
        return point("mlp.in", self.layer)

    @property
    def pointwise(self) -> bool:
        return True

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        tc = self.transcoder
        assert tc is not None  # __post_init__ refuses anything but a Transcoder
        x = seen(self.reads)  # [B, T, d_model]: what this pass's MLP read
        if not batched:
            x = x[0]
        if x.size(-1) != tc.d_model or value.size(-1) != tc.d_model:
            width = value.size(-1)
            raise InterventionError(f"the transcoder reads {tc.d_model} values per token; {self.name} has {width}")
        index = torch.tensor(self.features, device=x.device)
        to = 0.0 if self.how == "zero" else float(self.how)
        with torch.no_grad():
            return tc.edit(x.float(), value.float(), lambda f: f.index_fill(-1, index, to)).to(value.dtype)

    def describe(self) -> str:
        how = "zero" if self.how == "zero" else f"= {self.how:g}"
        feats = ", ".join(map(str, self.features))
        return f"edit transcoder features {feats} of {super().describe()} ({how})"
