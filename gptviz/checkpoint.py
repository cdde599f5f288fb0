"""Loading and saving checkpoints. `load(path)` detects the format from the files.

Checkpoints are untrusted input: nothing here unpickles arbitrary objects. The native format is
a directory with `config.json` (model config, tokenizer, model card) and `model.safetensors`.
Other formats register a detector and a loader in FORMATS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model

from .errors import CheckpointError, ConfigError, DeviceError
from .model import GPT, GPTConfig
from .tokenizer import CharTokenizer, Tokenizer

NATIVE_FORMAT_VERSION = 1


@dataclass
class LoadReport:
    """What a load found: shown in the dashboard and by `python -m gptviz info`."""

    path: str
    format: str
    n_params: int = 0
    dtype: str = ""
    device: str = ""
    tokenizer: str = "none"
    missing: list[str] = field(default_factory=list)  # keys the model has and the file lacks
    unexpected: list[str] = field(default_factory=list)  # keys the file has and the model ignores
    reshaped: list[str] = field(default_factory=list)  # keys transposed or split on the way in
    warnings: list[str] = field(default_factory=list)  # e.g. NaN in weights

    def as_rows(self) -> list[tuple[str, str]]:
        def keys(v):
            return ", ".join(v) if v else "none"

        return [
            ("path", self.path),
            ("format", self.format),
            ("parameters", f"{self.n_params:,}"),
            ("dtype", self.dtype),
            ("device", self.device),
            ("tokenizer", self.tokenizer),
            ("missing keys", keys(self.missing)),
            ("unexpected keys", keys(self.unexpected)),
            ("reshaped keys", keys(self.reshaped)),
            ("warnings", keys(self.warnings)),
        ]


@dataclass
class Bundle:
    """A loaded checkpoint: the model in eval mode, its tokenizer (None if it has none), the report."""

    model: GPT
    tokenizer: Tokenizer | None
    report: LoadReport
    card: dict = field(default_factory=dict)  # free-form model card (corpus, steps, losses, command)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device for a name, or DeviceError saying why it cannot be used here."""
    dev = torch.device(device or "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for but no CUDA GPU is available here; use device='cpu'")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise DeviceError("MPS was asked for but Apple's Metal backend is not available here; use device='cpu'")
    return dev


def finish(model: GPT, report: LoadReport, device: torch.device) -> GPT:
    """Put a freshly loaded model on its device in eval mode and fill the report's summary."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        report.warnings.append(f"NaN or Inf in weights: {', '.join(bad)}")
    model.to(device).eval()
    report.n_params = model.num_params()
    report.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    report.device = str(device)
    return model


def tied_keys(config: GPTConfig) -> set[str]:
    return {"lm_head.weight", "transformer.wte.weight"} if config.tie_weights else set()


# --- the native format -----------------------------------------------------------------------
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


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def native_tokenizer(path: Path, spec: dict | None) -> Tokenizer | None:
    if not spec:
        return None
    if spec.get("kind") == "char":
        return CharTokenizer(spec["chars"])
    if spec.get("kind") == "bpe":
        from .bpe import BPETokenizer

        file = path / spec.get("file", "tokenizer.json")
        if not file.is_file():
            raise CheckpointError(f"{file}: file not found; config.json names it as the BPE tokenizer")
        return BPETokenizer.from_file(file)
    raise CheckpointError(f"{path / 'config.json'}: tokenizer kind {spec.get('kind')!r} is not supported")


def load_state_into(model: GPT, state: dict[str, torch.Tensor], report: LoadReport, source: Path) -> None:
    """Copy a state dict into model, recording missing and unexpected keys; shape mismatches fail clearly."""
    expected = model.state_dict()
    for key, value in state.items():
        if key in expected and expected[key].shape != value.shape:
            raise CheckpointError(
                f"{source}: {key} has shape {list(value.shape)} but the config needs {list(expected[key].shape)}"
            )
    result = model.load_state_dict(state, strict=False)
    tied = tied_keys(model.config)
    report.missing = [k for k in result.missing_keys if not (k in tied and tied & set(state))]
    report.unexpected = list(result.unexpected_keys)
    if report.missing:
        raise CheckpointError(f"{source}: weights missing for {', '.join(report.missing)}")


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


# --- format detection --------------------------------------------------------------------------
# (name, does this path hold the format?, loader). Later formats append here.
FORMATS: list[tuple[str, Callable[[Path], bool], Callable[[Path, torch.device], Bundle]]] = [
    ("gptviz", is_native, load_native),
]


def load(path: str | Path, device: str | torch.device | None = "cpu") -> Bundle:
    """Load any supported checkpoint, detecting its format. Raises CheckpointError naming the file."""
    path = Path(path)
    dev = resolve_device(device)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    for _, detect, loader in FORMATS:
        if detect(path):
            return loader(path, dev)
    raise CheckpointError(
        f"{path}: not a checkpoint gptviz recognises; expected a gptviz or Hugging Face "
        "GPT-2 directory (config.json + weights) or a nanoGPT ckpt.pt"
    )


def _register_foreign_formats() -> None:
    # imported here: these modules build on the helpers above
    from .hf_gpt2 import is_hf, load_hf_gpt2
    from .nanogpt import is_nanogpt, load_nanogpt

    FORMATS.extend([("hf-gpt2", is_hf, load_hf_gpt2), ("nanogpt", is_nanogpt, load_nanogpt)])


_register_foreign_formats()
