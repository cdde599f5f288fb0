"""A transcoder: one MLP rewritten as a sparse sum of learned directions (docs/circuits.md,
"Train, load, measure"). It reads what the MLP reads (`blocks.{l}.mlp.in`) and writes an estimate of what the MLP
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

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

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

    def feature_edit(self, features, how="zero", positions=None):
        """gptviz.edit_features(tc, ...): an edit of this layer's mlp.out, the error term kept (edits.py)."""
        from .edits import TranscoderEdit

        return TranscoderEdit(self.output_site, None, positions, self, features, how)

    # --- the equations --------------------------------------------------------------------------
    def _check(self, x: Tensor, width: int, what: str) -> None:
        if x.dim() == 0 or x.size(-1) != width:
            raise TranscoderError(f"{what} must end in {width} values per token, got shape {list(x.shape)}")

    def pre(self, x: Tensor) -> Tensor:
        """[..., d_model] -> [..., d_tc]: the features' pre-activations, x @ W_enc.T + b_enc."""
        return x.to(self.W_enc.dtype) @ self.W_enc.T + self.b_enc

    def act(self, pre: Tensor) -> Tensor:
        """The activation function on pre-activations [..., d_tc]."""
        if self.activation == "topk":
            assert self.k is not None  # __init__ refuses a topk transcoder without k
            top = torch.topk(pre, self.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        if self.activation == "jumprelu":
            assert self.threshold is not None
            return pre * (pre > self.threshold)
        return pre.relu()

    def encode(self, x):
        """[..., d_model] -> [..., d_tc]: the feature activations. A NumPy array in gives one back."""
        t = torch.tensor(x) if isinstance(x, np.ndarray) else torch.as_tensor(x)
        self._check(t, self.d_model, "the transcoder's input")
        f = self.act(self.pre(t))
        return f.detach().cpu().numpy() if isinstance(x, np.ndarray) else f

    def decode(self, f, x=None):
        """[..., d_tc] -> [..., d_model]: f @ W_dec + b_dec, plus the skip x @ W_skip.T when the
        transcoder has one (then x, its input, is needed). A NumPy array in gives one back."""
        t = torch.as_tensor(f)
        self._check(t, self.d_tc, "the features")
        out = t.to(self.W_dec.dtype) @ self.W_dec + self.b_dec
        if self.W_skip is not None:
            if x is None:
                raise TranscoderError("this transcoder has a skip connection: decode(f, x) needs its input x")
            out = out + torch.as_tensor(x).to(self.W_skip.dtype) @ self.W_skip.T
        return out.detach().cpu().numpy() if isinstance(f, np.ndarray) else out

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(the estimate of mlp.out, the features) for the MLP's input x."""
        f = self.act(self.pre(x))
        return self.decode(f, x), f

    def edit(self, x: Tensor, out: Tensor, change: Callable[[Tensor], Tensor]) -> Tensor:
        """out + decode(change(f)) − decode(f), f the features of x: the MLP's true output with the
        transcoder's error term kept, so a change that leaves every feature as it was leaves out as it was."""
        f = self.act(self.pre(x))
        delta = (change(f.clone()) - f).to(self.W_dec.dtype) @ self.W_dec  # [..., d_model]: decode's linear part
        return out + delta.to(out.dtype)


class TranscoderSet(Mapping):
    """One transcoder per layer (all of them, or some): tcs[l], tcs.layers, len(tcs), `for l in tcs`.
    input_hook / output_hook are TransformerLens's names of the points they read and write
    (mlp.hook_in, hook_mlp_out), as circuit-tracer's config.yaml says them."""

    input_hook = "mlp.hook_in"
    output_hook = "hook_mlp_out"

    def __init__(self, transcoders: Mapping[int, Transcoder] | list[Transcoder], meta: dict | None = None):
        items = transcoders.values() if isinstance(transcoders, Mapping) else transcoders
        by_layer: dict[int, Transcoder] = {}
        for tc in items:
            if not isinstance(tc, Transcoder):
                raise TranscoderError(f"a TranscoderSet holds Transcoders, got {type(tc).__name__}")
            if tc.layer in by_layer:
                raise TranscoderError(f"two transcoders for layer {tc.layer}")
            by_layer[tc.layer] = tc
        if not by_layer:
            raise TranscoderError("a TranscoderSet needs at least one transcoder")
        widths = {tc.d_model for tc in by_layer.values()}
        if len(widths) > 1:
            raise TranscoderError(f"the transcoders read different widths: {sorted(widths)}")
        self._tcs = dict(sorted(by_layer.items()))
        self.meta: dict[str, Any] = dict(meta or {})  # config.yaml's other fields (model_name, training report)
        self.path: str | None = None

    def __getitem__(self, layer: int) -> Transcoder:
        try:
            return self._tcs[int(layer)]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"no transcoder for layer {layer!r}; these are for layers {self.layers}") from None

    def __iter__(self) -> Iterator[int]:
        return iter(self._tcs)

    def __len__(self) -> int:
        return len(self._tcs)

    def __repr__(self) -> str:
        first = next(iter(self._tcs.values()))
        return f"TranscoderSet(layers {self.layers}, {first.activation}, d_model={self.d_model}, d_tc={first.d_tc})"

    @property
    def layers(self) -> list[int]:
        return list(self._tcs)

    @property
    def d_model(self) -> int:
        return next(iter(self._tcs.values())).d_model

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> TranscoderSet:
        """Move every transcoder (in place, as nn.Module.to) and return the set."""
        for tc in self._tcs.values():
            tc.to(device=device, dtype=dtype)
        return self

    def check_fits(self, model) -> None:
        """One TranscoderError line unless every transcoder reads a layer this model has, of its width."""
        cfg = model.config
        bad = [l for l in self._tcs if not 0 <= l < cfg.n_layer]
        if bad:
            raise TranscoderError(
                f"the transcoders are for layer {bad[0]}, but the model has {cfg.n_layer} layers "
                f"(0 … {cfg.n_layer - 1})"
            )
        if self.d_model != cfg.n_embd:
            raise TranscoderError(
                f"the transcoders read {self.d_model} values per token, but this model's mlp.in is {cfg.n_embd} "
                "wide: they were trained on another model"
            )

    def fidelity(self, model, data, *, tokenizer=None, max_tokens: int = 16384) -> dict:
        """How well the replacement model (every MLP replaced by its transcoder, all at once) stands in
        for `model` over the corpus `data`: top1_agreement, kl (nats / token, KL(model ‖ replacement)),
        nmse per layer (on the true mlp.in), dead share. See gptviz.transcoders.fidelity."""
        from .fidelity import fidelity

        return fidelity(self, model, data, tokenizer=tokenizer, max_tokens=max_tokens)
