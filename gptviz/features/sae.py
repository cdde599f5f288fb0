"""A sparse autoencoder: one contract point rewritten as a sparse sum of learned directions.

The equations are SAELens's (its `SAE.encode` / `decode` for the three architectures it saves), so
an SAE trained by either reads the same here and there:

    x_in   = norm_in(x) - b_dec · apply_b_dec_to_input
    pre    = x_in @ W_enc + b_enc                                  # [..., d_sae]
    f      = relu(pre)                      standard
             relu(pre) · (pre > threshold)  jumprelu
             relu of the k largest of pre, zero elsewhere           topk
    x_hat  = norm_out(f @ W_dec + b_dec)                           # [..., d_in]

norm_in / norm_out are the identity unless `normalize_activations` is "constant_norm_rescale"
(x · √d_in / ‖x‖, undone on the way out) or "layer_norm" (x − mean, / (std + 1e-5), undone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from ..devices import kept_copy
from .sites import SAEError, contract_site

if TYPE_CHECKING:
    from .train import TrainReport

ARCHITECTURES = ("standard", "topk", "jumprelu")
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm")


@dataclass
class _Norm:
    """The statistics norm_in took, which norm_out undoes (per call: no state on the module)."""

    kind: str
    scale: Tensor | None = None
    mean: Tensor | None = None

    def into(self, x: Tensor, d_in: int) -> Tensor:
        if self.kind == "constant_norm_rescale":
            self.scale = (d_in**0.5) / x.norm(dim=-1, keepdim=True)  # [..., 1]
            return x * self.scale
        if self.kind == "layer_norm":
            self.mean = x.mean(dim=-1, keepdim=True)  # [..., 1]
            x = x - self.mean
            self.scale = x.std(dim=-1, keepdim=True)
            return x / (self.scale + 1e-5)
        return x

    def out(self, x: Tensor) -> Tensor:
        if self.kind not in ("constant_norm_rescale", "layer_norm"):
            return x
        if self.scale is None:
            raise RuntimeError("_Norm.out before _Norm.into: no statistics to undo")
        if self.kind == "constant_norm_rescale":
            return x / self.scale
        assert self.mean is not None  # into() sets mean with scale for layer_norm
        return x * self.scale + self.mean


@dataclass(eq=False)
class SAEConfig:
    architecture: str
    d_in: int
    d_sae: int
    site: str  # the contract point it reads, e.g. "blocks.2.resid_post"
    k: int | None = None  # topk only
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"
    rescale_acts_by_decoder_norm: bool = False  # topk: features scaled by their decoder rows' norms
    extra: dict = field(default_factory=dict)  # the rest of cfg.json, kept when saved again


class SAE(nn.Module):
    """A sparse autoencoder on one contract point (docs/architecture.md, "Features").

    sae.site, sae.d_in, sae.d_sae, sae.architecture; W_enc [d_in, d_sae], b_enc [d_sae],
    W_dec [d_sae, d_in], b_dec [d_in], threshold [d_sae] (jumprelu)."""

    # declared, not defaulted: only train_sae sets it (an SAE read from disk has no report), and
    # nn.Module's __getattr__ would otherwise type it Tensor | Module
    report: TrainReport

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        if cfg.architecture not in ARCHITECTURES:
            raise SAEError(f"unknown SAE architecture {cfg.architecture!r}; gptviz reads {', '.join(ARCHITECTURES)}")
        if cfg.normalize_activations not in NORMALIZATIONS:
            raise SAEError(
                f"normalize_activations {cfg.normalize_activations!r} is not one of {', '.join(NORMALIZATIONS)}"
            )
        if cfg.architecture == "topk" and not (isinstance(cfg.k, int) and 1 <= cfg.k <= cfg.d_sae):
            raise SAEError(f"a topk SAE needs k in [1, d_sae={cfg.d_sae}], got {cfg.k!r}")
        cfg.site = contract_site(cfg.site)
        self.cfg = cfg
        d_in, d_sae = cfg.d_in, cfg.d_sae
        self.W_enc = nn.Parameter(torch.zeros(d_in, d_sae))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(torch.zeros(d_sae, d_in))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        if cfg.architecture == "jumprelu":
            self.threshold = nn.Parameter(torch.zeros(d_sae))
        self.path: str | None = None  # where it was loaded from, for the page and messages
        # copies of this SAE on the other devices it has been applied on (plain dict: not submodules)
        self._copies: dict[torch.device, SAE] = {}

    # --- what the contract names ----------------------------------------------------------------
    @property
    def site(self) -> str:
        return self.cfg.site

    @property
    def d_in(self) -> int:
        return self.cfg.d_in

    @property
    def d_sae(self) -> int:
        return self.cfg.d_sae

    @property
    def architecture(self) -> str:
        return self.cfg.architecture

    @property
    def k(self) -> int | None:
        return self.cfg.k

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.architecture == "topk" else ""
        return f"SAE({self.architecture}, {self.site}, d_in={self.d_in}, d_sae={self.d_sae}{k})"

    def on(self, device: torch.device | str) -> SAE:
        """This SAE on `device`: itself if it is there, else a copy made once and kept. An SAE is applied
        where the activations are (a model on a GPU, the SAE loaded on the CPU); it keeps its own dtype
        (float32 as saved), and what it writes back is cast to the model's."""
        return kept_copy(self, device, self._copies, self._twin)

    def _twin(self) -> SAE:
        twin = SAE(self.cfg)
        twin.path = self.path
        return twin

    # --- the equations --------------------------------------------------------------------------
    def _pre(self, x: Tensor, norm: _Norm) -> Tensor:
        x = norm.into(x.to(self.W_enc.dtype), self.d_in)
        if self.cfg.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc  # [..., d_sae]

    def _act(self, pre: Tensor) -> Tensor:
        if self.architecture == "topk":
            if self.cfg.rescale_acts_by_decoder_norm:
                pre = pre * self.W_dec.norm(dim=-1)  # [..., d_sae]
            assert self.cfg.k is not None  # __init__ refuses a topk SAE without k
            top = torch.topk(pre, self.cfg.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        f = pre.relu()
        if self.architecture == "jumprelu":
            f = f * (pre > self.threshold)
        return f

    def _check(self, x: Tensor, width: int, what: str) -> None:
        if x.dim() == 0 or x.size(-1) != width:
            raise SAEError(f"{what} must end in {width} values per token, got shape {list(x.shape)}")

    def encode(self, x):
        """[..., d_in] -> [..., d_sae]: the feature activations (SAELens's encode). A NumPy array
        in gives one back."""
        t = torch.tensor(x) if isinstance(x, np.ndarray) else torch.as_tensor(x)  # a read-only array is copied
        self._check(t, self.d_in, "the SAE's input")
        sae = self.on(t.device)
        f = sae._act(sae._pre(t, _Norm(self.cfg.normalize_activations)))
        return f.detach().numpy() if isinstance(x, np.ndarray) else f

    @torch.no_grad()
    def encode_topk(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """A topk SAE's features as (values, indices), each [..., k]: the k places encode() may fill
        (a value of 0 there is a place it left at 0; every other feature is 0), without building the
        dense [..., d_sae] matrix. None for the other architectures. For reading, not training (no grad)."""
        if self.architecture != "topk":
            return None
        k = self.cfg.k
        assert k is not None  # __init__ refuses a topk SAE without k
        sae = self.on(x.device)
        pre = sae._pre(x, _Norm(self.cfg.normalize_activations))  # [..., d_sae]
        if self.cfg.rescale_acts_by_decoder_norm:
            pre = pre * sae.W_dec.norm(dim=-1)
        if pre.device.type != "cpu":
            top = torch.topk(pre, k, dim=-1, sorted=False)
            return top.values.relu(), top.indices
        # NumPy's introselect picks the same k as torch.topk (ties aside) in a quarter of its time on
        # a CPU: 5.7 against 22 ms for [2048, 1536], k = 32, one thread; the scan's largest SAE cost
        a = pre.contiguous().numpy()
        index = np.argpartition(a, -k, axis=-1)[..., -k:]
        return torch.from_numpy(np.take_along_axis(a, index, axis=-1)).relu(), torch.from_numpy(index)

    def decode(self, f):
        """[..., d_sae] -> [..., d_in]: f @ W_dec + b_dec (SAELens's decode; a normalisation of the
        input is undone by forward/reconstruct, which saw the input)."""
        t = torch.as_tensor(f)
        self._check(t, self.d_sae, "the features")
        sae = self.on(t.device)
        out = sae._dec(t.to(sae.W_dec.dtype))
        return out.detach().numpy() if isinstance(f, np.ndarray) else out

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(reconstruction, features) of x, the normalisation undone: what replaces the site. Both on
        x's device, in the SAE's dtype."""
        if self.on(x.device) is not self:
            return self.on(x.device)(x)
        norm = _Norm(self.cfg.normalize_activations)
        f = self._act(self._pre(x, norm))
        return norm.out(self._dec(f)), f

    def edit(self, x: Tensor, change) -> Tensor:
        """x + reconstruct(x with its features changed) − reconstruct(x): the SAE's error term kept,
        so a change that leaves every feature as it was leaves x exactly as it was. change: a function
        of the features [..., d_sae] that returns the new features."""
        if self.on(x.device) is not self:
            return self.on(x.device).edit(x, change)
        norm = _Norm(self.cfg.normalize_activations)
        f = self._act(self._pre(x, norm))
        delta = norm.out(self._dec(change(f.clone()))) - norm.out(self._dec(f))  # [..., d_in]
        return x + delta.to(x.dtype)

    def _dec(self, f: Tensor) -> Tensor:
        if self.cfg.rescale_acts_by_decoder_norm:
            f = f * (1 / self.W_dec.norm(dim=-1))
        return f @ self.W_dec + self.b_dec  # [..., d_in]

    def reconstruct(self, x: Tensor) -> Tensor:
        return self.forward(x)[0]
