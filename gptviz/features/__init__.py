"""Features: sparse autoencoders (SAEs) on the user's own model (DESIGN.md, "Features").

    sae = gptviz.load_sae("checkpoints/shakespeare-char/saes/l2-resid-8x")
    acts = gptviz.feature_activations(trace, sae)     # [T, d_sae]
    sae = gptviz.train_sae(model, "samples/shakespeare", "blocks.2.resid_post", out="my-sae")

sae.py holds the module and its equations (SAELens's), files.py reads and writes the formats,
sites.py maps hook names to contract points.
"""

from .files import load_sae, save_sae
from .sae import SAE, SAEConfig
from .sites import SAEError, check_fits, contract_site, hook_name, site_width

__all__ = [
    "SAE",
    "SAEConfig",
    "SAEError",
    "load_sae",
    "save_sae",
    "check_fits",
    "contract_site",
    "hook_name",
    "site_width",
]
