"""The tokens a model's generation stops at, as Hugging Face's `generate` reads them: the
`eos_token_id` of generation_config.json when that file names one, else config.json's."""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError
from .safe import read_json


def _ids(value: object, vocab_size: int) -> tuple[int, ...]:
    values = value if isinstance(value, list) else [value]
    # an id outside the vocabulary can never be generated: it stops nothing, so it is left out
    return tuple(i for i in values if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size)


def eos_token_ids(hf: dict, folder: Path, vocab_size: int) -> tuple[int, ...]:
    """The end-of-text ids of the checkpoint in `folder` (whose config.json is `hf`); () when none.
    A generation_config.json that cannot be read is passed over, as Hugging Face does."""
    gen = folder / "generation_config.json"
    if gen.is_file():
        try:
            generation = read_json(gen, "generation config")
        except CheckpointError:
            generation = {}
        if generation.get("eos_token_id") is not None:
            return _ids(generation["eos_token_id"], vocab_size)
    return _ids(hf.get("eos_token_id"), vocab_size)
