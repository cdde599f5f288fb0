"""Steering: add a direction to a contract point in every forward pass (docs/architecture.md, "Steering").

    v = gptviz.steering_vector(model, [(" love", " hate")], "blocks.2.resid_post", tokenizer)
    gptviz.generate(model, ids, 40, interventions=[gptviz.steer("blocks.2.resid_post", v, 4.0)])
    gptviz.steering_sweep(model, ids, v, ["blocks.0.resid_post", ...], [-8, -4, 0, 4, 8], target=7)

A vector may also be an SAE feature's decoder row (sae.W_dec[f]) or a neuron's output direction
(neuron_direction). The sweep runs every (site, coefficient) as one row of a batch: a hook per site
adds each row's own coefficient (zero on the rows of other sites), so a sweep costs a few forward
passes of a batch, not one pass per cell; a residual site's rows start from the unsteered residual
and run only the blocks after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .attention import explicit_attention
from .capture import as_ids, edited
from .checks import real
from .errors import PromptError
from .features.activations import as_rows, from_rows
from .features.sites import site_width
from .interventions import Intervention, InterventionError
from .names import BLOCK_SITES, parse, point

LOGIT_BUDGET = 1 << 24  # floats of [rows, T, V] logits one batch of the sweep may make (64 MB)


def _vector(v, what: str = "the steering vector") -> Tensor:
    # a copy: a read-only array (a cached vector the dashboard shares) cannot back a tensor
    t = torch.tensor(np.asarray(v.detach().cpu() if isinstance(v, Tensor) else v, dtype=np.float32))
    if t.dim() != 1 or t.numel() == 0:
        raise InterventionError(f"{what} must be one row of numbers, got shape {list(t.shape)}")
    if not torch.isfinite(t).all():
        raise InterventionError(f"{what} holds NaN or infinite values")
    return t


@dataclass(frozen=True, eq=False)
class Steer(Intervention):
    """value + coeff * vector at the named positions (all by default); compared by identity."""

    vector: Tensor | None = field(default=None, repr=False)
    coeff: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "vector", _vector(self.vector))
        try:
            object.__setattr__(self, "coeff", real(self.coeff, "coeff"))
        except ValueError as e:
            raise InterventionError(str(e)) from None

    @property
    def pointwise(self) -> bool:
        return True

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        vector = self.vector
        assert vector is not None  # __post_init__ made it a checked Tensor
        rows = as_rows(value, self.name, batched)  # [(B,) T, d]
        if rows.size(-1) != vector.numel():
            raise InterventionError(
                f"the steering vector has {vector.numel()} values; {self.name} has {rows.size(-1)} per token"
            )
        add = self.coeff * vector.to(device=value.device, dtype=value.dtype)  # [d]
        return from_rows(rows + add, value, self.name)

    def describe(self) -> str:
        vector = self.vector
        assert vector is not None  # __post_init__ made it a checked Tensor
        return f"steer {super().describe()} by {self.coeff:g} × a vector of norm {float(vector.norm()):.3g}"


def steer(site: str, v, coeff: float, positions: Sequence[int] | None = None) -> Steer:
    """An intervention: the value at `site` becomes value + coeff * v at `positions` (every position
    by default), in every forward pass it is given to (trace, and every step of generate)."""
    # the field holds __post_init__'s normalised tuple; it converts (and checks) the sequence with _ints
    return Steer(site, None, cast("tuple[int, ...] | None", positions), v, coeff)


def _texts_to_ids(item, tokenizer) -> list[int]:
    if isinstance(item, str):
        if tokenizer is None:
            raise PromptError("text in a steering pair needs the model's tokenizer (pass tokenizer= or a Bundle)")
        return tokenizer.encode(item)
    return list(as_ids(item, torch.device("cpu"))[0].tolist())


def _unbundle(model, tokenizer):
    from .formats import Bundle

    if isinstance(model, Bundle):
        return model.model, tokenizer or model.tokenizer
    return model, tokenizer


@torch.no_grad()
def _last_value(model, ids: list[int], site: str) -> Tensor:
    if not ids:
        raise PromptError("a text of a steering pair is empty")
    got = {}

    def keep(out: Tensor) -> None:
        got["v"] = as_rows(out, site, batched=True)[0, -1].float()  # the last token's [d]

    with edited(model, {site: lambda out: keep(out)}):
        model(as_ids(ids[-model.config.block_size :], model.device))
    return got["v"].cpu()


def steering_vector(model, pairs, site: str, tokenizer=None) -> np.ndarray:
    """The mean over pairs of (positive − negative) at `site`, each read at its text's last token.
    pairs: [(positive, negative), ...], each a text (with the model's tokenizer) or a list of ids.
    model: a GPT or a Bundle. Returns a float32 array [width of the site]."""
    model, tokenizer = _unbundle(model, tokenizer)
    parse(site)
    pairs = list(pairs)
    if not pairs:
        raise PromptError("steering_vector needs at least one (positive, negative) pair")
    diffs = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise PromptError(f"each steering pair is (positive, negative), got {str(pair)[:60]!r}")
        pos, neg = (_last_value(model, _texts_to_ids(x, tokenizer), site) for x in pair)
        diffs.append(pos - neg)
    return torch.stack(diffs).mean(0).numpy()


def neuron_direction(model, layer: int, neuron: int) -> np.ndarray:
    """What one MLP neuron writes into the residual stream per unit of activation: its column of
    the down projection, [C] (the vector a neuron steers with)."""
    proj = model.transformer.h[layer].mlp.c_proj.weight  # [C, F]
    if not 0 <= neuron < proj.size(1):
        raise PromptError(f"layer {layer} has {proj.size(1)} neurons (0 … {proj.size(1) - 1}); not {neuron}")
    return proj[:, neuron].detach().float().cpu().numpy()


def _sites(model, sites) -> list[str]:
    """Site names; a block site without its layer ("resid_post") means that site in every layer."""
    if isinstance(sites, str):
        sites = [sites]
    out = []
    for s in sites:
        if s in BLOCK_SITES:
            out += [point(s, l) for l in range(model.config.n_layer)]
        else:
            layer, _ = parse(s)
            if layer is not None and layer >= model.config.n_layer:
                raise InterventionError(f"{s}: the model has {model.config.n_layer} layers")
            out.append(s)
    if not out:
        raise InterventionError("steering_sweep needs at least one site")
    return out


@torch.no_grad()
def steering_sweep(
    model, ids, v, sites, coeffs, target: int | None = None, positions: Sequence[int] | None = None
) -> pd.DataFrame:
    """For each site and coefficient, the next-token distribution at the last position with
    `steer(site, v, coeff, positions)` against the unsteered one: DataFrame site, coeff,
    target_logprob (log-probability of `target`, NaN without one), kl (KL(unsteered ‖ steered), nats)
    and top_token (the steered argmax id). All cells run as rows of a few batches."""
    model, _ = _unbundle(model, None)
    idx = as_ids(ids, model.device)  # (1, T)
    model.check_ids(idx)
    vec = _vector(v)
    names = _sites(model, sites)
    for s in names:
        if site_width(model, s) != vec.numel():
            raise InterventionError(f"the vector has {vec.numel()} values; {s} has {site_width(model, s)} per token")
    cs = [real(c, "coeff") for c in coeffs]
    if not cs:
        raise InterventionError("steering_sweep needs at least one coefficient")
    if target is not None and not 0 <= int(target) < model.config.vocab_size:
        raise PromptError(f"target {target} is outside the vocabulary [0, {model.config.vocab_size - 1}]")
    T, V = idx.size(1), model.config.vocab_size
    vec = vec.to(model.device)
    keep = torch.ones(T, dtype=torch.bool, device=model.device)
    if positions is not None:
        keep = torch.zeros(T, dtype=torch.bool, device=model.device)
        keep[list(positions)] = True
    # one unsteered pass keeps every residual: a residual site's cells start from it and run only the
    # blocks after it (the blocks before see nothing steered), and only the last position's logits
    starts = {}
    resid: dict[str, Tensor | None] = {s: None for s in names if parse(s)[1] in ("resid_pre", "resid_post")}

    def keeper(name: str):
        def fn(value: Tensor) -> None:
            resid[name] = value  # [1, T, C]

        return fn

    with edited(model, {name: keeper(name) for name in resid}):
        base = torch.log_softmax(model(idx)[0, -1].float(), dim=-1)  # (V,)
    for name in resid:
        layer, site = parse(name)
        assert layer is not None  # resid_pre / resid_post are block sites, so they have a layer
        starts[name] = layer + (1 if site == "resid_post" else 0)
    rows_per_batch = max(1, LOGIT_BUDGET // (T * V))
    cells = [(s, c) for s in names if s not in resid for c in cs]
    logps = {}
    for name in resid:
        kept = resid[name]
        assert kept is not None  # the keeper hook filled it in the unsteered pass above
        for start in range(0, len(cs), rows_per_batch):
            chunk = cs[start : start + rows_per_batch]
            coeff = torch.tensor(chunk, device=model.device)
            add = (coeff[:, None, None] * vec) * keep[None, :, None]  # (B, T, C)
            x = kept + add.to(kept.dtype)
            with explicit_attention(False):
                for block in model.transformer.h[starts[name] :]:
                    x = block(x)
                # the head on every position, as the forward pass runs it: a product of the last row alone
                # rounds differently (~1e-7), and the sweep equals a manual hook bit for bit on the CPU
                logits = model.lm_head(model.transformer.ln_f(x))[:, -1]  # (B, V)
            for c, row in zip(chunk, torch.log_softmax(logits.float(), dim=-1)):
                logps[(name, c)] = row
    for start in range(0, len(cells), rows_per_batch):
        chunk = cells[start : start + rows_per_batch]
        B = len(chunk)

        def adder(site: str, coeff: Tensor):
            def fn(value: Tensor) -> Tensor:
                rows = as_rows(value, site, batched=True)  # [B, T, d]
                add = (coeff[:, None, None] * vec) * keep[None, :, None]  # [B, T, d]
                return from_rows(rows + add.to(rows.dtype), value, site)

            return fn

        hooks = {}
        for s in {s for s, _ in chunk}:
            coeff = torch.tensor([c if cs_ == s else 0.0 for cs_, c in chunk], device=model.device)
            hooks[s] = adder(s, coeff)
        with edited(model, hooks):
            logp = torch.log_softmax(model(idx.expand(B, T))[:, -1].float(), dim=-1)  # (B, V)
        for (s, c), row in zip(chunk, logp):
            logps[(s, c)] = row
    out = []
    for s in names:
        for c in cs:
            lp = logps[(s, c)]
            out.append(
                dict(
                    site=s,
                    coeff=c,
                    target_logprob=float(lp[int(target)]) if target is not None else float("nan"),
                    kl=float((base.exp() * (base - lp)).sum().clamp_min(0.0)),
                    top_token=int(lp.argmax()),
                )
            )
    return pd.DataFrame(out, columns=["site", "coeff", "target_logprob", "kl", "top_token"])
