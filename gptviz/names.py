"""The names of the contract points: one place that spells them, so no other module builds
`blocks.{l}...` strings by hand (the role TransformerLens's get_act_name plays).

    point("attn.q", 3)    -> "blocks.3.attn.q"
    point("logits")       -> "logits"
    parse("blocks.3.attn.q") -> (3, "attn.q")
"""

from __future__ import annotations

import functools
import re

# Per-block points in forward order (the Trace contract table in docs/library.md, "From Python").
BLOCK_SITES = (
    "resid_pre",
    "attn.q",
    "attn.k",
    "attn.v",
    "attn.scores",
    "attn.mask",
    "attn.weights",
    "attn.z",
    "attn.out",
    "resid_mid",
    "mlp.in",
    "mlp.hidden",
    "mlp.out",
    "resid_post",
)
RESID_SITES = ("resid_pre", "resid_mid", "resid_post")
ATTENTION_MAPS = ("attn.scores", "attn.weights")  # [H, T, T]: rebuilt from q and k, not stored
MODEL_SITES = ("embed", "ln_f", "logits")  # points outside the blocks

_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")


def point(site: str, layer: int | None = None) -> str:
    """The contract name of a point: a block site with its layer, or a model-level site."""
    if type(site) is not str or not (layer is None or type(layer) is int):  # np.int64, a 0-d tensor: not kept
        return _point(site, layer)
    known = _POINTS.get((site, layer))  # a capture and its rebuilds name every point of a pass: ~0.6 µs each
    if known is None:
        known = _point(site, layer)
        if len(_POINTS) < 1 << 16:  # the names of the models in use; bounded against a stream of odd ones
            _POINTS[(site, layer)] = known
    return known


_POINTS: dict[tuple[str, int | None], str] = {}


def _point(site: str, layer: int | None) -> str:
    if layer is None:
        if site not in MODEL_SITES:
            raise KeyError(f"{site!r} is a block site: give its layer, or use one of {', '.join(MODEL_SITES)}")
        return site
    if site not in BLOCK_SITES:
        raise KeyError(f"{site!r} is not a block site; choose one of {', '.join(BLOCK_SITES)}")
    return f"blocks.{int(layer)}.{site}"


def parse(name: str) -> tuple[int | None, str]:
    """(layer, site) of a contract name; layer is None for embed, ln_f and logits."""
    if isinstance(name, str) and name in _PARSED:  # a capture parses every name of a pass: ~2 µs each
        return _PARSED[name]
    m = _BLOCK.fullmatch(name)
    if m and m.group(2) in BLOCK_SITES:
        parsed: tuple[int | None, str] = (int(m.group(1)), m.group(2))
    elif name in MODEL_SITES:
        parsed = (None, name)
    else:
        raise KeyError(f"{name!r} is not a contract name; names look like 'embed', 'blocks.0.attn.q', 'logits'")

    if len(_PARSED) < 1 << 16:  # the names of the models in use; bounded against a stream of odd ones
        _PARSED[name] = parsed
    return parsed


_PARSED: dict[str, tuple[int | None, str]] = {}


def contract_names(n_layer: int) -> list[str]:
    """Every tensor name of a Trace of an n_layer model, in forward order."""
    return list(_contract_names(n_layer))


@functools.lru_cache(maxsize=64)
def _contract_names(n_layer: int) -> tuple[str, ...]:
    blocks = [point(site, l) for l in range(n_layer) for site in BLOCK_SITES]
    return ("embed", *blocks, "ln_f", "logits")


def forward_order(name: str) -> tuple[int, int, int]:
    """A sort key that puts contract names in the order the forward pass produces them (remembered as
    one int, for in_forward_order)."""
    layer, site = parse(name)
    if layer is None:
        order = ({"embed": 0, "ln_f": 2, "logits": 3}[site], 0, 0)
    else:
        order = (1, layer, BLOCK_SITES.index(site))
    if len(_RANK) < 1 << 16:
        _RANK[name] = (order[0] << 40) + (order[1] << 8) + order[2]  # the same order as one int (sites < 256)
    return order


_RANK: dict[str, int] = {}


def in_forward_order(names: list[str]) -> list[str]:
    """names sorted by forward_order; names seen before by a lookup the sort makes itself, no Python call
    per name (a Trace sorts ~230)."""
    try:
        return sorted(names, key=_RANK.__getitem__)
    except KeyError:  # a name not seen yet (remembered now), or past the bound
        return sorted(names, key=forward_order)


def module_to_point(module_path: str) -> str:
    """`transformer.h.3.attn.q` -> `blocks.3.attn.q`; `transformer.embed` -> `embed`."""
    name = module_path.removeprefix("transformer.")
    return "blocks." + name.removeprefix("h.") if name.startswith("h.") else name
