"""gptviz's own format: a directory with `config.json` (model config, tokenizer, model card)
and `model.safetensors` (+ `tokenizer.json` for BPE), as `gptviz.save` writes it."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import save_model

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError
from ..limits import MAX_TOKENIZER_BYTES
from ..model import GPT
from ..progress import ProgressFn, begin
from ..tokenizers import BPETokenizer, CharTokenizer, Tokenizer
from .bundle import Bundle, LoadReport, check_shapes, compute_dtype, fill_model, finish
from .safe import check_file, read_json
from .weights import Stacked, Weights

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
        return "gptviz_format" in read_json(cfg)
    except CheckpointError:  # too large or not JSON: the Hugging Face loader names the problem
        return False


def native_tokenizer(path: Path, spec: object, vocab_size: int, context: int | None = None) -> Tokenizer | None:
    source = path / "config.json"
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise CheckpointError(f"{source}: 'tokenizer' must be an object with a 'kind', got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind == "char":
        chars = spec.get("chars")
        if not isinstance(chars, list) or not all(isinstance(c, str) for c in chars):
            raise CheckpointError(f"{source}: the char tokenizer's 'chars' must be a list of characters")
        try:
            tokenizer = CharTokenizer(chars)
        except (ValueError, TypeError) as e:
            raise CheckpointError(f"{source}: bad char tokenizer ({e})") from None
    elif kind == "bpe":
        name = spec.get("file", "tokenizer.json")
        # a plain file name beside config.json: a checkpoint may not point at other files on this machine
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise CheckpointError(f"{source}: the BPE tokenizer 'file' must be a file name beside config.json")
        file = path / name
        if not file.exists():
            raise CheckpointError(f"{file}: file not found; config.json names it as the BPE tokenizer")
        check_file(file, MAX_TOKENIZER_BYTES, "tokenizer file")
        tokenizer = BPETokenizer.from_file(
            file, special_tokens=spec.get("special_tokens") is True, vocab_size=vocab_size, context=context
        )
    else:
        shown = repr(kind) if len(repr(kind)) < 40 else repr(kind)[:37] + "..."
        raise CheckpointError(f"{source}: tokenizer kind {shown} is not supported; use 'char' or 'bpe'")
    if tokenizer.vocab_size > vocab_size:
        raise CheckpointError(
            f"{source}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {vocab_size} ids"
        )
    return tokenizer


def load_native(path: Path, device: torch.device, dtype: str = "auto", progress: ProgressFn | None = None) -> Bundle:
    meta = read_json(path / "config.json")
    if "config" not in meta:
        raise CheckpointError(
            f"{path / 'config.json'}: bad model config (no 'config' object); re-save with gptviz.save"
        )
    try:
        config = GPTConfig.from_dict(meta["config"])
    except (TypeError, ConfigError) as e:
        raise CheckpointError(f"{path / 'config.json'}: bad model config ({e})") from None
    file = path / "model.safetensors"
    if not file.exists():
        raise CheckpointError(f"{file}: file not found; a gptviz checkpoint needs its weights beside config.json")
    report = LoadReport(path=str(path), format="gptviz")
    begin(progress, "reading the weights' header")
    weights = Weights([file])
    check_shapes(config, weights.shapes, report, file)  # before a byte of weights is read
    begin(progress, "reading the tokenizer")
    tokenizer = native_tokenizer(path, meta.get("tokenizer"), config.vocab_size, config.block_size)
    dtype_ = compute_dtype(weights.floating_dtypes(), dtype, config, device, report)
    order = sorted(weights.shapes, key=lambda k: k == "lm_head.weight")  # a tied head last, as load_state_dict
    tensors = ((k, Stacked(weights, (k,)) if weights.shapes[k] else partial(weights.get, k)) for k in order)
    model = fill_model(config, tensors, dtype_, device, report, file, progress)
    report.tokenizer = tokenizer.kind if tokenizer else "none"
    card = meta.get("card")
    return Bundle(finish(model, report, device), tokenizer, report, card if isinstance(card, dict) else {})
