"""What every loader returns (a Bundle with its LoadReport), and the steps every loader shares:
checking the weights' shapes against the config before any model is built, copying a state dict
into a fresh model, and finishing it on its device."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError, summarise
from ..model import GPT
from ..tokenizers import Tokenizer


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
            return summarise(v, "keys", show=8) if v else "none"

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


def finish(model: GPT, report: LoadReport, device: torch.device) -> GPT:
    """Put a freshly loaded model on its device in eval mode and fill the report's summary."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        report.warnings.append(f"NaN or Inf in weights: {summarise(bad, 'tensors')}")
    model.to(device).eval()
    report.n_params = model.num_params()
    report.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    report.device = str(device)
    return model


def tied_keys(config: GPTConfig) -> set[str]:
    return {"lm_head.weight", "transformer.wte.weight"} if config.tie_weights else set()


LAYER_KEY = re.compile(r"transformer\.h\.(\d+)\.")


def check_shapes(config: GPTConfig, shapes: dict[str, tuple[int, ...]], report: LoadReport, source: Path) -> None:
    """Refuse weights the config does not describe, before GPT(config) is built: a wrong shape,
    more layers than n_layer (the model would be cut short), or keys the model needs and the file
    lacks. shapes: the file's own tensor shapes, keyed as the model names them. Keys the model does
    not have go to report.unexpected."""
    expected = config.state_shapes()
    for key, shape in shapes.items():
        if key in expected and tuple(shape) != expected[key]:
            raise CheckpointError(
                f"{source}: {key} has shape {list(shape)} but the config needs {list(expected[key])}; "
                "the config does not describe these weights"
            )
    layers = [int(m.group(1)) for k in shapes if (m := LAYER_KEY.match(k))]
    if layers and max(layers) >= config.n_layer:
        n = max(layers) + 1
        raise CheckpointError(
            f"{source}: the weights hold {n} layers but the config says n_layer={config.n_layer}; "
            f"loading them would cut the model short, so set n_layer to {n}"
        )
    tied = tied_keys(config)
    missing = [k for k in expected if k not in shapes and not (k in tied and tied & set(shapes))]
    if missing:
        raise CheckpointError(f"{source}: weights missing for {summarise(missing, 'keys')}")
    report.unexpected = [k for k in shapes if k not in expected]


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
        raise CheckpointError(f"{source}: weights missing for {summarise(report.missing, 'keys')}")


def build_model(config: GPTConfig, state: dict[str, torch.Tensor], report: LoadReport, source: Path) -> GPT:
    """GPT(config) holding state, built only once the state's shapes are known to fit the config."""
    check_shapes(config, {k: tuple(v.shape) for k, v in state.items()}, report, source)
    model = GPT(config)
    load_state_into(model, state, report, source)
    return model
