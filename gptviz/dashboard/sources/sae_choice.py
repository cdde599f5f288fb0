"""Which SAE a session reads, as the URL says it (?sae=NAME | PATH | upload | none): the shipped SAEs
beside a shipped checkpoint, the one a checkpoint opens on, and the picker's value set from the URL
before the sidebar draws it (saes.py draws the picker; state.py reads the URL)."""

from __future__ import annotations

from enum import Enum

import streamlit as st

from ...features.files import CFG
from .checkpoints import checkpoints_dir, shipped


class SAEPick(Enum):
    """SAE choices besides the shipped ones (which are picked by their folder's name)."""

    NONE = "none"
    PATH = "an SAE folder…"
    UPLOAD = "upload an SAE…"


URL_WORDS = {SAEPick.NONE: "none", SAEPick.UPLOAD: "upload"}


def shipped_saes(source: str) -> list[str]:
    """The names of the SAEs shipped beside a shipped checkpoint (checkpoints/<source>/saes/<name>)."""
    if source not in shipped():
        return []
    folder = checkpoints_dir() / source / "saes"
    try:
        return sorted(p.name for p in folder.iterdir() if (p / CFG).is_file() and p.name.isprintable())
    except OSError:  # no saes folder: none shipped
        return []


def shipped_path(source: str, name: str) -> str:
    return str(checkpoints_dir() / source / "saes" / name)


def default_sae(source: str) -> str | SAEPick:
    """What the picker opens on for a checkpoint (no ?sae=): its first shipped SAE, else none."""
    names = shipped_saes(source)
    return names[0] if names else SAEPick.NONE


def from_url(value: str | None, source: str) -> None:
    """Set the picker from ?sae= (None: the default, the first shipped SAE), before the widget exists."""
    state = st.session_state
    if value is None:
        state["sae_choice"] = default_sae(source)
    elif value in shipped_saes(source):
        state["sae_choice"] = value
    elif value in ("none", "upload"):
        state["sae_choice"] = SAEPick.NONE if value == "none" else SAEPick.UPLOAD
    else:
        state["sae_choice"], state["sae_path"] = SAEPick.PATH, value[:1000]
