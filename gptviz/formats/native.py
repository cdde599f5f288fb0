"""gptviz's own format: a directory with `config.json` (model config, tokenizer, model card)
and `model.safetensors` (+ `tokenizer.json` for BPE), as `gptviz.save` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError
from ..model import GPT
from ..tokenizers import BPETokenizer, CharTokenizer, Tokenizer
from .bundle import Bundle, LoadReport, finish, load_state_into
from .safe import read_json

NATIVE_FORMAT_VERSION = 1


def save(model: GPT, path: str | Path, tokenizer: Tokenizer | None = None, card: dict | None = None) -> Path:
    """Write a native checkpoint directory: config.json + model.safetensors (+ tokenizer.json for BPE)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {"gptviz_format": NATIVE_FORMAT_VERSION, "config": model.config.to_dict(), "card": card or {}}
    if tokenizer is not None:
        meta["tokenizer"] = tokenizer.to_dict()
        if hasattr(tokenizer, "save"):  # tokenizers with their own file format (BPE)
            tokenizer.save(path)
    save_model(model, str(path / "model.safetensors"))  # drops one of a tied pair, load restores it
    (path / "config.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    return path


def is_native(path: Path) -> bool:
    cfg = path / "config.json"
    if not cfg.is_file():
        return False
    try:
        return "gptviz_format" in json.loads(cfg.read_text())
    except (ValueError, UnicodeDecodeError):
        return False


def native_tokenizer(path: Path, spec: dict | None) -> Tokenizer | None:
    if not spec:
        return None
    if spec.get("kind") == "char":
        return CharTokenizer(spec["chars"])
    if spec.get("kind") == "bpe":
        file = path / spec.get("file", "tokenizer.json")
        if not file.is_file():
            raise CheckpointError(f"{file}: file not found; config.json names it as the BPE tokenizer")
        return BPETokenizer.from_file(file)
    raise CheckpointError(f"{path / 'config.json'}: tokenizer kind {spec.get('kind')!r} is not supported")


def load_native(path: Path, device: torch.device) -> Bundle:
    meta = read_json(path / "config.json")
    try:
        config = GPTConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ConfigError) as e:
        raise CheckpointError(f"{path / 'config.json'}: bad model config ({e})") from None
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{weights}: file not found; a gptviz checkpoint needs its weights beside config.json")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({e})") from None
    report = LoadReport(path=str(path), format="gptviz")
    model = GPT(config)
    load_state_into(model, state, report, weights)
    tokenizer = native_tokenizer(path, meta.get("tokenizer"))
    report.tokenizer = tokenizer.kind if tokenizer else "none"
    return Bundle(finish(model, report, device), tokenizer, report, meta.get("card", {}))
