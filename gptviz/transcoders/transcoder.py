"""A transcoder: one MLP rewritten as a sparse sum of learned directions (docs/architecture.md,
"Circuits"). It reads what the MLP reads (`blocks.{l}.mlp.in`) and writes an estimate of what the MLP
adds (`blocks.{l}.mlp.out`). The layout is circuit-tracer's SingleLayerTranscoder, as its
`layer_{l}.safetensors` files store it:

    pre    = x @ W_enc.T + b_enc                                  # W_enc [d_tc, d_model]: [..., d_tc]
    f      = relu of the k largest of pre, zero elsewhere         topk (OpenAI's, as train_sae's)
             pre · (pre > threshold)                              jumprelu (Gemma Scope)
             relu(pre)                                            relu
    out    = f @ W_dec + b_dec (+ x @ W_skip.T)                   # W_dec [d_tc, d_model]: [..., d_model]

W_skip (a Gemma Scope 2 "affine" transcoder's linear skip) is optional. A TranscoderSet holds one per
layer, tcs[l], and says which contract points they read and write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from ..devices import kept_copy
from ..features.edits import settle_features
from ..interventions import Intervention, InterventionError, seen
from ..names import point
from .errors import TranscoderError

if TYPE_CHECKING:
    from .training import TranscoderReport

ACTIVATIONS = ("topk", "jumprelu", "relu")


class Transcoder(nn.Module):
    """One layer's transcoder: W_enc [d_tc, d_model], b_enc [d_tc], W_dec [d_tc, d_model],
    b_dec [d_model], threshold [d_tc] (jumprelu), W_skip [d_model, d_model] (optional)."""

    report: TranscoderReport  # set by train_transcoders only (one read from disk has none)

    def __init__(
        self,
        d_model: int,
        d_tc: int,
        layer: int,
        activation: str = "topk",
        k: int | None = None,
        skip: bool = False,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise TranscoderError(f"unknown activation {activation!r}; gptviz reads {', '.join(ACTIVATIONS)}")
        if activation == "topk" and not (isinstance(k, int) and 1 <= k <= d_tc):
            raise TranscoderError(f"a topk transcoder needs k in [1, d_tc={d_tc}], got {k!r}")
        self.d_model, self.d_tc, self.layer = d_model, d_tc, int(layer)
        self.activation, self.k = activation, (k if activation == "topk" else None)
        self.W_enc = nn.Parameter(torch.zeros(d_tc, d_model))
        self.b_enc = nn.Parameter(torch.zeros(d_tc))
        self.W_dec = nn.Parameter(torch.zeros(d_tc, d_model))
        self.b_dec = nn.Parameter(torch.zeros(d_model))
        self.threshold = nn.Parameter(torch.zeros(d_tc)) if activation == "jumprelu" else None
        self.W_skip = nn.Parameter(torch.zeros(d_model, d_model)) if skip else None
        self._copies: dict[torch.device, Transcoder] = {}  # on the other devices it was applied on (no submodules)

    @property
    def input_site(self) -> str:
        return point("mlp.in", self.layer)

    @property
    def output_site(self) -> str:
        return point("mlp.out", self.layer)

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.k else ""
        skip = ", skip" if self.W_skip is not None else ""
        return f"Transcoder(layer {self.layer}, {self.activation}{k}, d_model={self.d_model}, d_tc={self.d_tc}{skip})"

    def on(self, device: torch.device | str) -> Transcoder:
        """This transcoder on `device`: itself if it is there, else a copy made once and kept. It is applied
        where the activations are (a model on a GPU, the transcoders loaded on the CPU), in its own dtype."""
        return kept_copy(self, device, self._copies, self._twin)

    def _twin(self) -> Transcoder:
        twin = Transcoder(self.d_model, self.d_tc, self.layer, self.activation, k=self.k, skip=self.W_skip is not None)
        twin.__dict__.update({k: v for k, v in self.__dict__.items() if k in ("report", "path")})
        return twin

    def feature_edit(self, features, how: str | float = "zero", positions=None):
        """The intervention gptviz.edit_features(tc, ...) makes: blocks.{layer}.mlp.out edited, out +
        decode(f') − decode(f), f the features of that pass's mlp.in (the transcoder's error kept)."""
        return TranscoderEdit(point("mlp.out", self.layer), None, positions, self, tuple(features), how)

    # --- the equations --------------------------------------------------------------------------
    def _check(self, x: Tensor, width: int, what: str) -> None:
        if x.dim() == 0 or x.size(-1) != width:
            raise TranscoderError(f"{what} must end in {width} values per token, got shape {list(x.shape)}")

    def pre(self, x: Tensor) -> Tensor:
        """[..., d_model] -> [..., d_tc]: the features' pre-activations, x @ W_enc.T + b_enc (on x's device)."""
        tc = self.on(x.device)
        return x.to(tc.W_enc.dtype) @ tc.W_enc.T + tc.b_enc

    def act(self, pre: Tensor) -> Tensor:
        """The activation function on pre-activations [..., d_tc]."""
        if self.activation == "topk":
            assert self.k is not None  # __init__ refuses a topk transcoder without k
            top = torch.topk(pre, self.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        if self.activation == "jumprelu":
            threshold = self.on(pre.device).threshold
            assert threshold is not None
            return pre * (pre > threshold)
        return pre.relu()

    def encode(self, x):
        """[..., d_model] -> [..., d_tc]: the feature activations. A NumPy array in gives one back."""
        t = torch.tensor(x) if isinstance(x, np.ndarray) else torch.as_tensor(x)
        self._check(t, self.d_model, "the transcoder's input")
        f = self.act(self.pre(t))
        return f.detach().cpu().numpy() if isinstance(x, np.ndarray) else f

    @torch.no_grad()
    def encode_topk(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """A topk transcoder's features as (values, indices), each [..., k]: the k places encode() fills
        (relu'd: a 0 there is a place it left at 0), without the dense [..., d_tc] matrix; None for the
        other activations. What the scan reads (scanning/features.py), as an SAE's encode_topk."""
        if self.activation != "topk":
            return None
        assert self.k is not None  # __init__ refuses a topk transcoder without k
        top = torch.topk(self.pre(x), self.k, dim=-1)
        return top.values.relu(), top.indices

    def decode(self, f, x=None):
        """[..., d_tc] -> [..., d_model]: f @ W_dec + b_dec, plus the skip x @ W_skip.T when the
        transcoder has one (then x, its input, is needed). A NumPy array in gives one back."""
        t = torch.as_tensor(f)
        self._check(t, self.d_tc, "the features")
        tc = self.on(t.device)
        out = t.to(tc.W_dec.dtype) @ tc.W_dec + tc.b_dec
        if tc.W_skip is not None:
            if x is None:
                raise TranscoderError("this transcoder has a skip connection: decode(f, x) needs its input x")
            out = out + torch.as_tensor(x).to(tc.W_skip) @ tc.W_skip.T
        return out.detach().cpu().numpy() if isinstance(f, np.ndarray) else out

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(the estimate of mlp.out, the features) for the MLP's input x."""
        f = self.act(self.pre(x))
        return self.decode(f, x), f

    def edit(self, x: Tensor, out: Tensor, change: Callable[[Tensor], Tensor]) -> Tensor:
        """out + decode(change(f)) − decode(f), f the features of x: the MLP's true output with the
        transcoder's error term kept, so a change that leaves every feature as it was leaves out as it was."""
        f = self.act(self.pre(x))
        W_dec = self.on(x.device).W_dec
        delta = (change(f.clone()) - f).to(W_dec.dtype) @ W_dec  # [..., d_model]: decode's linear part
        return out + delta.to(out.dtype)


@dataclass(frozen=True, eq=False)
class TranscoderEdit(Intervention):
    """Set some of a transcoder's features to zero or to a number in its layer's mlp.out; compared by identity."""

    transcoder: Transcoder | None = field(default=None, repr=False)
    features: tuple[int, ...] = ()
    how: str | float = "zero"

    def __post_init__(self):
        super().__post_init__()
        tc = self.transcoder
        if not isinstance(tc, Transcoder):
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
