"""What each page reads of a run: the contract names (gptviz.trace's `names=`) the sidebar asks the
capture for when that page is open. A page not named here reads everything (None).

The layer, head and position a page shows change without a new run, so a page asks for a site at
every layer ("blocks.*.attn.weights"), never for one layer's. Its logits and attention maps are
rebuilt from ln_f and from q and k, so asking for them holds T·C and L·T·(H + H_kv)·D floats.
"""

from __future__ import annotations

MAPS = "blocks.*.attn.weights"
PAGE_NAMES: dict[str, tuple[str, ...]] = {
    "": ("logits", MAPS),  # the Overview: the next token and one head's map
    "next-token": ("logits",),
    "generate": ("logits", MAPS),
}


def names_for(page: str) -> tuple[str, ...] | None:
    """The names the page with url path `page` reads of a run (None: every name)."""
    return PAGE_NAMES.get(page)
