"""Reading and writing SAEs: SAELens's saved format and Gemma Scope's, as untrusted files.

SAELens: a folder with `cfg.json` (architecture, d_in, d_sae, hook_name — at the top level or in
`metadata` — apply_b_dec_to_input, normalize_activations, k for topk) and `sae_weights.safetensors`
(W_enc [d_in, d_sae], b_enc, W_dec [d_sae, d_in], b_dec, threshold for jumprelu).
Gemma Scope: `params.npz` or `params.safetensors` (the same tensors, jumprelu, no b_dec subtracted
from the input); no cfg, so the site comes from the caller or the path (`layer_12`, and `-res` /
`-mlp` / `-att` in a folder's name).

Every file is sized before it is read, every tensor's shape is checked against the cfg (and the
model's site, when a model is given) before any data is read, and each failure is one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import cast

import numpy as np
import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..formats.inmemory import MemoryPath
from ..formats.safe import check_file, read_json, user_path
from ..names import point
from . import vetting
from .sae import ARCHITECTURES, SAE, SAEConfig
from .sites import SAEError, check_fits, contract_site, hook_name

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
GEMMA_FILES = ("params.safetensors", "params.npz")
MAX_D_IN = 1 << 17
MAX_D_SAE = 1 << 22
MAX_SAE_PARAMS = 1 << 31  # 8 GB as float32: Gemma Scope's largest SAEs are well under it
HEADER_ALLOWANCE = 1 << 20
SAELENS_LAYOUT = "6.0.0"


def _shapes(cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
    d_in, d_sae = cfg.d_in, cfg.d_sae
    out = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    if cfg.architecture == "jumprelu":
        out["threshold"] = (d_sae,)
    return out


def _limit(cfg: SAEConfig) -> int:
    """The largest weights file these shapes can come in (float64 at most, plus its header)."""
    return 8 * sum(int(np.prod(s)) for s in _shapes(cfg).values()) + HEADER_ALLOWANCE


def _int(cfg: dict, key: str, high: int, source: Path) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high:
        raise SAEError(f"{source}: '{key}' must be a whole number in [1, {high}], got {str(v)[:40]!r}")
    return v


def _sizes(cfg: SAEConfig, source: Path) -> None:
    params = 2 * cfg.d_in * cfg.d_sae
    if params > MAX_SAE_PARAMS:
        raise SAEError(f"{source}: d_in × d_sae = {cfg.d_in} × {cfg.d_sae} is larger than gptviz loads")


def _older(raw: dict) -> dict:
    """A cfg.json of SAELens before 6.0 in today's names: hook_point, activation_fn topk + its k,
    normalize_activations as a bool."""
    raw = dict(raw)
    if "hook_point" in raw and "hook_name" not in raw:
        raw["hook_name"] = raw["hook_point"]
    kwargs = raw.get("activation_fn_kwargs")
    if raw.get("activation_fn") == "topk" and isinstance(kwargs, dict) and "k" in kwargs:
        raw.setdefault("k", kwargs["k"])
        if raw.get("architecture", "standard") == "standard":
            raw["architecture"] = "topk"
    if isinstance(raw.get("normalize_activations"), bool):
        raw["normalize_activations"] = "expected_average_only_in" if raw["normalize_activations"] else "none"
    return raw


def parse_cfg(raw: dict, source: Path, site: str | None = None) -> SAEConfig:
    """An SAEConfig from a cfg.json's object, each field checked; one line naming the file if not."""
    raw = _older(raw)
    arch = raw.get("architecture", "standard")
    if arch not in ARCHITECTURES:
        raise SAEError(f"{source}: architecture {str(arch)[:40]!r} is not one of {', '.join(ARCHITECTURES)}")
    d_in, d_sae = _int(raw, "d_in", MAX_D_IN, source), _int(raw, "d_sae", MAX_D_SAE, source)
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    hook = site or raw.get("hook_name") or meta.get("hook_name")
    if not hook:
        raise SAEError(f"{source}: no hook_name, so gptviz cannot tell which point the SAE reads")
    try:
        where = contract_site(hook)
    except SAEError as e:
        raise SAEError(f"{source}: {e}") from None
    k = _int(raw, "k", d_sae, source) if arch == "topk" else None
    norm = raw.get("normalize_activations") or "none"
    apply = raw.get("apply_b_dec_to_input", True)  # SAELens's default
    if not isinstance(apply, bool):
        raise SAEError(f"{source}: apply_b_dec_to_input must be true or false, got {str(apply)[:40]!r}")
    rescale = raw.get("rescale_acts_by_decoder_norm", False)
    if not isinstance(rescale, bool):
        raise SAEError(f"{source}: rescale_acts_by_decoder_norm must be true or false, got {str(rescale)[:40]!r}")
    reshape = raw.get("reshape_activations", "none")
    if reshape not in ("none", "hook_z", None):
        raise SAEError(f"{source}: reshape_activations {str(reshape)[:40]!r} is not one gptviz reads (none, hook_z)")
    known = (
        "architecture",
        *("d_in", "d_sae", "hook_name", "k", "normalize_activations", "apply_b_dec_to_input"),
        "rescale_acts_by_decoder_norm",
    )
    extra = {key: value for key, value in raw.items() if key not in known}
    norm = norm if isinstance(norm, str) else repr(norm)
    cfg = SAEConfig(arch, d_in, d_sae, where, k, apply, norm, rescale and arch == "topk", extra)
    _sizes(cfg, source)
    return cfg


def _fill(cfg: SAEConfig, tensors: dict[str, torch.Tensor], source: Path) -> SAE:
    try:
        sae = SAE(cfg)
    except SAEError as e:
        raise SAEError(f"{source}: {e}") from None
    with torch.no_grad():
        for name in _shapes(cfg):
            t = tensors[name]
            if not t.is_floating_point():
                raise SAEError(f"{source}: {name} holds {t.dtype}, not floating-point numbers")
            t = t.float()
            if not torch.isfinite(t).all():
                raise SAEError(f"{source}: {name} holds NaN or infinite values")
            getattr(sae, name).copy_(t)
    sae.requires_grad_(False)
    sae.path = str(source)
    return sae


def _read(cfg: SAEConfig, file: Path, model, headers=None) -> dict[str, torch.Tensor]:
    """The SAE's tensors from file, once the model's site has the SAE's width and every array's shape,
    dtype and unpacked size has been checked from the headers (vetting.py): nothing is unpacked before."""
    if model is not None:
        check_fits(cfg, model)
    shapes = _shapes(cfg)
    found = vetting.check_arrays(
        file, {_stored(n, headers): s for n, s in shapes.items()}, _limit(cfg), SAEError, headers
    )
    tensors = vetting.read_arrays(file, list(found))
    return {name: tensors[_stored(name, headers)] for name in shapes}


def _stored(name: str, headers) -> str:
    """The name an array has in the file: Gemma Scope 2 writes w_enc, w_dec (SAELens and Gemma Scope W_)."""
    lower = name.lower()
    return lower if headers is not None and name not in headers and lower in headers else name


def _saelens(folder: Path, site: str | None, model=None) -> SAE:
    cfg = parse_cfg(read_json(folder / CFG, "SAE cfg.json"), folder / CFG, site)
    file = folder / WEIGHTS
    try:
        check_file(file, _limit(cfg), "SAE weights file")
    except CheckpointError as e:
        raise SAEError(str(e)) from None
    return _fill(cfg, _read(cfg, file, model), folder)


def gemma_site(path: Path) -> str | None:
    """The site a Gemma Scope file's path names (`.../gemma-scope-2b-pt-res/layer_12/...`), if any."""
    text = str(path)
    layer = re.search(r"layer_(\d+)", text)
    if layer is None:
        return None
    # Gemma Scope's folders say -res / -mlp / -att; Gemma Scope 2's say resid_post (or resid_post_all)
    for key, site in (("res", "resid_post"), ("resid_post", "resid_post"), ("mlp", "mlp.out"), ("att", "attn.z")):
        if re.search(rf"[-_/]{key}([-_/]|$)", text):
            return point(site, int(layer.group(1)))
    return None


def _gemma(file: Path, site: str | None, model=None) -> SAE:
    site = site or gemma_site(file)
    if site is None:
        raise SAEError(
            f"{file}: a Gemma Scope file does not say where it reads; give site= (e.g. 'blocks.12.resid_post')"
        )
    headers = vetting.read_headers(file)  # the zip's directory and each .npy header: no array read
    w_enc = headers.get("W_enc") or headers.get("w_enc")
    if w_enc is None or len(w_enc.shape) != 2:
        raise SAEError(f"{file}: has no 2-D W_enc, so it is not an SAE's parameters")
    d_in, d_sae = w_enc.shape
    raw = {"architecture": "jumprelu", "d_in": d_in, "d_sae": d_sae, "apply_b_dec_to_input": False}
    cfg = parse_cfg(raw, file, site)
    return _fill(cfg, _read(cfg, file, model, headers), file)


def load_sae(path, model=None, site: str | None = None) -> SAE:
    """An SAE from disk: a SAELens folder (cfg.json + sae_weights.safetensors) or Gemma Scope's
    params.npz / params.safetensors (a file, or a folder holding one). model: checked to have the
    SAE's site at the SAE's width (one line if not). site: where a Gemma Scope SAE reads, when its
    path does not say; for a SAELens SAE it overrides the cfg's hook_name. path may be a MemoryPath
    (an upload held in memory), read with the same checks."""
    # a MemoryPath answers every pathlib call the readers below make (formats/inmemory.py)
    p = cast(Path, path) if isinstance(path, MemoryPath) else user_path(path)
    if p.is_dir():
        if (p / CFG).is_file():
            sae = _saelens(p, site, model)
        else:
            found = [p / name for name in GEMMA_FILES if (p / name).is_file()]
            if not found:
                raise SAEError(f"{p}: holds no {CFG} + {WEIGHTS} (SAELens) and no params.npz (Gemma Scope)")
            sae = _gemma(found[0], site, model)
    elif p.name in GEMMA_FILES or p.suffix in (".npz",):
        sae = _gemma(p, site, model)
    elif p.name in (CFG, WEIGHTS):
        sae = _saelens(p.parent, site, model)
    elif not p.exists():
        raise SAEError(f"{p}: no such file or folder")
    else:
        raise SAEError(f"{p}: not an SAE; give the folder with {CFG} and {WEIGHTS}, or a params.npz")
    return sae


def save_sae(sae: SAE, out: str | Path, extra: dict | None = None) -> Path:
    """Write `sae` in SAELens's format (cfg.json + sae_weights.safetensors), which
    sae_lens.SAE.load_from_disk reads."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = sae.cfg
    meta = dict(cfg.extra.get("metadata") or {})
    # the 6.x layout (hook_name inside metadata), which SAELens recognises by this version field
    meta.update(hook_name=hook_name(cfg.site), gptviz_site=cfg.site, sae_lens_version=SAELENS_LAYOUT)
    body = {
        **{k: v for k, v in cfg.extra.items() if k != "metadata"},
        "architecture": cfg.architecture,
        "d_in": cfg.d_in,
        "d_sae": cfg.d_sae,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": cfg.apply_b_dec_to_input,
        "normalize_activations": cfg.normalize_activations,
        "reshape_activations": "none",
        "metadata": meta,
        **(extra or {}),
    }
    if cfg.architecture == "topk":
        body.update(k=cfg.k, rescale_acts_by_decoder_norm=cfg.rescale_acts_by_decoder_norm)
    tensors = {name: getattr(sae, name).detach().float().contiguous().cpu() for name in _shapes(cfg)}
    save_file(tensors, str(out / WEIGHTS))
    (out / CFG).write_text(json.dumps(body, indent=2) + "\n")
    return out
