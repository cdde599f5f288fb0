"""A site's value as an SAE reads it: one vector per token, [T, d_in] (attn.z's heads concatenated,
as TransformerLens's hook_z SAEs read them), and the features of a Trace."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..capture import edited
from ..names import forward_order, parse
from .sae import SAE
from .sites import SAEError


def as_rows(value: Tensor, site: str, batched: bool = False) -> Tensor:
    """The site's value as [(B,) T, d_in] rows: attn.z [(B,) H, T, D] -> [(B,) T, H * D]."""
    if parse(site)[1] == "attn.z":
        z = value.transpose(-3, -2)  # (B,) T, H, D
        return z.reshape(*z.shape[:-2], -1)
    return value


def from_rows(rows: Tensor, like: Tensor, site: str) -> Tensor:
    """as_rows undone: rows shaped back to the site's own layout (that of `like`)."""
    if parse(site)[1] == "attn.z":
        H, D = like.shape[-3], like.shape[-1]
        return rows.reshape(*rows.shape[:-1], H, D).transpose(-3, -2)
    return rows


class _Stop(Exception):
    """Raised by the hook at the site: nothing after it is needed."""


def site_rows(model, site: str, windows: Sequence[Sequence[int] | np.ndarray]) -> Tensor:
    """[N, d_in] float32: the site's value at every real token of these windows (token-id lists), from
    one padded forward pass that stops at the site. The SAE trainer's activations, on either engine.
    site may name several points, comma-separated (a transcoder trainer's mlp.in and mlp.out of
    every layer): their rows side by side, in the order named, the pass stopping after the last."""
    sites = site.split(",")
    lengths = [len(ids) for ids in windows]
    T = max(lengths)
    idx = torch.zeros(len(windows), T, dtype=torch.long)
    for b, ids in enumerate(windows):
        idx[b, : len(ids)] = torch.as_tensor(ids)
    got: dict[str, Tensor] = {}
    last = max(sites, key=forward_order)

    def keeper(name: str):
        def keep(out: Tensor) -> Tensor:
            got[name] = as_rows(out, name, batched=True)  # [B, T, d_in]
            if name == last:
                raise _Stop
            return out

        return keep

    with torch.no_grad(), edited(model, {name: keeper(name) for name in sites}), contextlib.suppress(_Stop):
        model(idx.to(model.device))
    rows = torch.cat([got[name] for name in sites], dim=-1) if len(sites) > 1 else got[site]
    real = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    return rows[real.to(rows.device)].float()


@torch.no_grad()
def feature_activations(trace, sae: SAE) -> np.ndarray:
    """[T, d_sae]: the SAE's features at every token of a Trace, read at the SAE's site."""
    if sae.site not in trace:
        raise SAEError(f"the Trace has no {sae.site}, where the SAE reads")
    x = as_rows(trace.tensor(sae.site), sae.site).float()  # [T, d_in]
    if x.size(-1) != sae.d_in:
        raise SAEError(
            f"the SAE reads {sae.site} with d_in={sae.d_in}, but this Trace's is {x.size(-1)} wide: "
            "it was trained on another model"
        )
    return sae.encode(x).cpu().numpy()
