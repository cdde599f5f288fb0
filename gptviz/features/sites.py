"""Where an SAE reads: SAELens / TransformerLens hook names <-> the Trace contract's names, and the
width of each contract point in a given model (what an SAE's d_in must equal).

    contract_site("blocks.2.hook_resid_post")  -> "blocks.2.resid_post"
    hook_name("blocks.2.resid_post")           -> "blocks.2.hook_resid_post"
"""

from __future__ import annotations

import re

from ..errors import GptvizError
from ..names import parse, point


class SAEError(GptvizError, ValueError):
    """An SAE file or argument that cannot be used: the message names the file or the mismatch."""


# TransformerLens's hook inside block l -> the contract's site of that block
_BLOCK_HOOKS = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn.out",
    "hook_mlp_out": "mlp.out",
    "mlp.hook_in": "mlp.in",
    "mlp.hook_post": "mlp.hidden",
    "attn.hook_z": "attn.z",
}
_MODEL_HOOKS = {"ln_final.hook_normalized": "ln_f"}
_SITE_HOOKS = {v: k for k, v in _BLOCK_HOOKS.items()}
_TL_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
# sites an SAE may read: a vector per token ([T, width]); attn.z is read with its heads concatenated
SAE_SITES = ("resid_pre", "resid_mid", "resid_post", "attn.out", "mlp.in", "mlp.out", "mlp.hidden", "attn.z")


def contract_site(name: str) -> str:
    """The contract name of an SAE's hook: a TransformerLens hook name or a contract name already."""
    if not isinstance(name, str) or not name:
        raise SAEError(f"an SAE's hook name must be text such as 'blocks.2.hook_resid_post', got {name!r}")
    m = _TL_BLOCK.fullmatch(name)
    if m and m.group(2) in _BLOCK_HOOKS:
        return point(_BLOCK_HOOKS[m.group(2)], int(m.group(1)))
    if name in _MODEL_HOOKS:
        return _MODEL_HOOKS[name]
    try:
        layer, site = parse(name)
    except KeyError:
        known = ", ".join(f"blocks.{{l}}.{h}" for h in _BLOCK_HOOKS)
        raise SAEError(f"hook {name[:80]!r} is not a point gptviz knows; SAEs read {known}") from None
    if site not in (*SAE_SITES, "ln_f"):
        raise SAEError(f"{name} holds a map, not a vector per token: an SAE reads {', '.join(SAE_SITES)}")
    return name


def hook_name(site: str) -> str:
    """The TransformerLens hook name of a contract site (what SAELens's cfg.json stores)."""
    layer, s = parse(contract_site(site))
    if layer is None:
        return {v: k for k, v in _MODEL_HOOKS.items()}[s]
    return f"blocks.{layer}.{_SITE_HOOKS[s]}"


def site_width(model, site: str) -> int:
    """The width of one token's vector at `site` in `model` (C, the MLP's F, or H * D for attn.z)."""
    layer, s = parse(site)
    cfg = model.config
    if layer is not None and not 0 <= layer < cfg.n_layer:
        raise SAEError(f"the SAE reads {site}, but the model has {cfg.n_layer} layers (0 … {cfg.n_layer - 1})")
    if s == "mlp.hidden":
        return model.transformer.h[layer].mlp.c_proj.in_features
    if s == "attn.z":
        attn = model.transformer.h[layer].attn
        return attn.n_head * attn.head_dim
    return cfg.n_embd


def check_fits(sae, model) -> None:
    """One SAEError line unless `sae` reads a point this model has, of the width the SAE expects."""
    width = site_width(model, sae.site)
    if width != sae.d_in:
        raise SAEError(
            f"the SAE reads {sae.site} with d_in={sae.d_in}, but this model's {sae.site} is {width} wide: "
            "it was trained on another model"
        )
